/*
 * cmd_lora_merge.c — `kvinfer lora-merge -m BASE --lora FILE ... -o OUT`: the base
 * model with its LoRA adapters merged in (tools/lora_merge.h), for no runtime cost.
 */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "tools/lora_merge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char merge_help[] =
    "usage: kvinfer lora-merge -m BASE.gguf --lora FILE [--lora-scaled FILE S ...] [--type T] -o OUT.gguf\n"
    "\n"
    "Writes BASE with the adapters merged into its matrices: each adapted matrix becomes\n"
    "F32 W + s B A (s = scale * alpha / rank), every other tensor and key is copied.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH        the base GGUF model\n"
    "  --lora FILE             LoRA adapter (GGUF), scale 1; repeatable\n"
    "  --lora-scaled FILE S    LoRA adapter at scale S (or FILE:S[,FILE:S]); repeatable\n"
    "  -o, --output PATH       the merged GGUF\n"
    "  --type T                type of the merged matrices: f32 (default), f16, bf16, q8_0,\n"
    "                          q4_0, q4_1, q5_0, q5_1, q2_k .. q6_k, iq4_nl, iq4_xs, mxfp4, or\n"
    "                          base (each matrix in its base type), quantised from the merged\n"
    "                          F32 rows; other tensors are copied as they are\n"
    "  -h, --help              this help\n";

int cmd_lora_merge(int argc, char **argv)
{
    cli_common c;
    cli_common_init(&c);
    const char *out = NULL;
    int out_type = KVI_TYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(merge_help, stdout);
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_flag_value(argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--type")) {
            const char *v = cli_flag_value(argc, argv, &i);
            kvi_type t;
            if (!v) return 1;
            if (!strcmp(v, "base")) {
                out_type = -1;
            } else if (kvi_type_from_name(v, &t) != 0) {
                return cli_error("lora-merge: --type '%s' is not a type name", v);
            } else {
                out_type = (int)t;
            }
            continue;
        }
        const int r = cli_opt_common(argc, argv, &i, &c, CLI_OPT_MODEL | CLI_OPT_LORA);
        if (r < 0) return 1;
        if (r == 0) return cli_error("lora-merge: unknown option '%s'", a);
    }
    if (!c.model || !out || c.n_lora == 0)
        return cli_error("lora-merge: needs -m BASE, --lora FILE and -o OUT");
    char *paths[CLI_LORA_MAX];
    for (int k = 0; k < c.n_lora; k++) {
        paths[k] = malloc(c.lora_len[k] + 1);
        if (!paths[k]) return cli_error("lora-merge: out of memory");
        memcpy(paths[k], c.lora_path[k], c.lora_len[k]);
        paths[k][c.lora_len[k]] = '\0';
    }
    kvi_error err = { 0 };
    const int rc =
        lora_merge(c.model, c.n_lora, (const char *const *)paths, c.lora_scale, out_type, out, &err);
    for (int k = 0; k < c.n_lora; k++) free(paths[k]);
    if (rc) return cli_error("lora-merge: %s", err.msg[0] ? err.msg : kvi_strerror(rc));
    printf("lora-merge: wrote %s\n", out);
    return 0;
}
