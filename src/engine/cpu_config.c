/*
 * cpu_config.c — kvi_cpu_params (include/kvinfer.h) into a kern_cfg: applied to
 * the kernels' process-wide switches by kvi_cpu_configure (the ISA table of
 * kernels.c, the AMX switch of base/cpu.c, the AMX-BF16 float path of fmm_amx.c),
 * or attached to one engine's pool by kvi_engine_create (kvi_engine_params.cpu).
 *
 * Invariant: a path is only ever lowered below what the CPU has, never raised
 * above it; the library reads no environment (the CLI fills these fields).
 */
#include "kvinfer.h"

#include "base/cpu.h"
#include "base/error.h"
#include "engine/engine_int.h"
#include "kernels/fmm_amx.h"
#include "kernels/kernels.h"

void kvi_cpu_params_default(kvi_cpu_params *p)
{
    if (!p) return;
    p->isa = "avx512";
    p->amx = true;
    p->amx_f16 = false;
}

int engine_cpu_cfg(const kvi_cpu_params *p, kern_cfg *out, kvi_error *err)
{
    kvi_cpu_params d;
    if (!p) {
        kvi_cpu_params_default(&d);
        p = &d;
    }
    kern_isa isa = KVI_ISA_AVX512;
    if (p->isa && !kern_isa_parse(p->isa, &isa))
        return err_set(err, KVI_E_INVALID, "cpu: unknown isa '%s' (avx512, avx2, scalar)", p->isa);
    *out = kern_cfg_make(isa, p->amx, p->amx_f16);
    return KVI_OK;
}

int kvi_cpu_configure(const kvi_cpu_params *p, kvi_error *err)
{
    kern_cfg c;
    const int rc = engine_cpu_cfg(p, &c, err);
    if (rc) return rc;
    kern_isa_set(c.isa);
    cpu_amx_set(c.amx);
    kern_amx_f16_set(c.amx_f16);
    return KVI_OK;
}
