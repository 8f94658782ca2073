/*
 * cpu_config.c — kvi_cpu_configure (include/kvinfer.h): the caller's choice of
 * CPU paths, applied to the kernels' process-wide switches (the ISA table of
 * kernels.c, the AMX switch of base/cpu.c, the AMX-BF16 float path of fmm_amx.c).
 *
 * Invariant: a path is only ever lowered below what the CPU has, never raised
 * above it; the library reads no environment (the CLI fills these fields).
 */
#include "kvinfer.h"

#include "base/cpu.h"
#include "base/error.h"
#include "kernels/fmm_amx.h"
#include "kernels/kernels.h"

#include <strings.h>

void kvi_cpu_params_default(kvi_cpu_params *p)
{
    if (!p) return;
    p->isa = "avx512";
    p->amx = true;
    p->amx_f16 = false;
}

int kvi_cpu_configure(const kvi_cpu_params *p, kvi_error *err)
{
    kvi_cpu_params d;
    if (!p) {
        kvi_cpu_params_default(&d);
        p = &d;
    }
    kern_isa isa;
    if (!p->isa || !strcasecmp(p->isa, "avx512"))
        isa = KVI_ISA_AVX512;
    else if (!strcasecmp(p->isa, "avx2"))
        isa = KVI_ISA_AVX2;
    else if (!strcasecmp(p->isa, "scalar"))
        isa = KVI_ISA_SCALAR;
    else
        return err_set(err, KVI_E_INVALID, "cpu: unknown isa '%s' (avx512, avx2, scalar)", p->isa);
    kern_isa_set(isa);
    cpu_amx_set(p->amx);
    kern_amx_f16_set(p->amx_f16);
    return KVI_OK;
}
