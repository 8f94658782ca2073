/*
 * cmd_quantize.c — `kvinfer quantize [options] IN.gguf OUT.gguf TYPE [NTHREADS]`: a
 * model written again in another weight type, as llama-quantize writes it
 * (tools/quantize.h); a progress line on stderr.
 */
#include "cli/cli.h"
#include "tools/imatrix_file.h"
#include "tools/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char quantize_help[] =
    "usage: kvinfer quantize [options] IN.gguf OUT.gguf TYPE [NTHREADS]\n"
    "\n"
    "Writes IN in TYPE (any case), choosing each tensor's type as llama-quantize does:\n"
    "  F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M\n"
    "  Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS MXFP4 (= MXFP4_MOE); Q3_K, Q4_K, Q5_K are the _M mixes\n"
    "\n"
    "options:\n"
    "  --imatrix FILE             importance matrix (llama.cpp's GGUF or .dat format)\n"
    "  --leave-output-tensor      copy output.weight as it is\n"
    "  --pure                     every quantised tensor in TYPE (no mix)\n"
    "  --output-tensor-type T     output.weight in tensor type T\n"
    "  --token-embedding-type T   token_embd.weight in tensor type T\n"
    "  --tensor-type PATTERN=T    tensors whose name matches PATTERN (regex) in T; repeatable\n"
    "  --allow-requantize         accept quantised input tensors\n"
    "  -h, --help                 this help\n";

#define QUANT_MAX_OVERRIDES 64

static void progress(void *user, int i, int n, const char *name, kvi_type from, kvi_type to)
{
    (void)user;
    fprintf(stderr, "\r[%4d/%4d] %-40s %6s -> %-6s", i + 1, n, name, kvi_type_name(from), kvi_type_name(to));
    if (i + 1 == n) fputc('\n', stderr);
}

static int tensor_type(const char *s, kvi_type *t)
{
    if (kvi_type_from_name(s, t) == 0 && *t < KVI_TYPE_COUNT) return 0;
    return cli_error("quantize: unknown tensor type '%s'", s);
}

int cmd_quantize(int argc, char **argv)
{
    quantize_params p;
    quantize_params_init(&p);
    quantize_override ov[QUANT_MAX_OVERRIDES];
    char *ovs[QUANT_MAX_OVERRIDES];
    const char *imatrix = NULL, *pos[4];
    int npos = 0, rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(quantize_help, stdout);
            return 0;
        } else if (!strcmp(a, "--leave-output-tensor"))
            p.leave_output = true;
        else if (!strcmp(a, "--pure"))
            p.pure = true;
        else if (!strcmp(a, "--allow-requantize"))
            p.allow_requantize = true;
        else if (!strcmp(a, "--imatrix")) {
            if (!(imatrix = cli_flag_value(argc, argv, &i))) rc = 1;
        } else if (!strcmp(a, "--output-tensor-type") || !strcmp(a, "--token-embedding-type")) {
            kvi_type *t = a[2] == 'o' ? &p.output_type : &p.embd_type;
            rc = !(v = cli_flag_value(argc, argv, &i)) || tensor_type(v, t);
        } else if (!strcmp(a, "--tensor-type")) {
            const char *eq;
            if (!(v = cli_flag_value(argc, argv, &i)))
                rc = 1;
            else if (!(eq = strchr(v, '=')) || eq == v || !eq[1])
                rc = cli_error("quantize: --tensor-type PATTERN=TYPE");
            else if (p.n_overrides == QUANT_MAX_OVERRIDES)
                rc = cli_error("quantize: too many --tensor-type");
            else if (!(ovs[p.n_overrides] = strndup(v, (size_t)(eq - v))))
                rc = cli_error("quantize: out of memory");
            else {
                ov[p.n_overrides].pattern = ovs[p.n_overrides];
                rc = tensor_type(eq + 1, &ov[p.n_overrides++].type);
            }
        } else if (a[0] == '-' && a[1])
            rc = cli_error("quantize: unknown option '%s'", a);
        else if (npos == 4)
            rc = cli_error("quantize: too many arguments");
        else
            pos[npos++] = a;
    }
    p.overrides = ov;
    imatrix_data im = { 0 };
    kvi_error err = { 0 };
    int32_t nt = 0;
    if (!rc && npos < 3) rc = cli_error("quantize: needs IN.gguf OUT.gguf TYPE (see --help)");
    if (!rc && (p.ftype = quantize_ftype_from_name(pos[2])) < 0)
        rc = cli_error("quantize: unknown type '%s'", pos[2]);
    if (!rc && npos == 4) {
        if (cli_flag_i32("NTHREADS", pos[3], 1, 4096, &nt) < 0) rc = 1;
        p.nthread = nt;
    }
    if (!rc && imatrix) {
        if (imatrix_load(imatrix, &im, &err)) rc = cli_error("%s", err.msg);
        p.imatrix = &im;
        p.imatrix_path = imatrix;
    }
    p.progress = progress;
    if (!rc && quantize_file(pos[0], pos[1], &p, &err)) rc = cli_error("%s", err.msg);
    if (!rc) fprintf(stderr, "quantize: wrote %s\n", pos[1]);
    imatrix_free(&im);
    for (int k = 0; k < p.n_overrides; k++) free(ovs[k]);
    return rc ? 1 : 0;
}
