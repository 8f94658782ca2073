/*
 * test_kvplan.c — `kvinfer kv-plan` against hand-computed KV sizes, and
 * kvi_model_info_from_file() against stories260K's known shape.
 *
 * Hand arithmetic (bytes per token = layers x (K + V bytes of kv_dim elements)):
 *  - seed 70B, GQA: 80 layers, 8 KV heads x 128 = 1024 -> f16 2 x 80 x 1024 x 2 =
 *    327680 B = 320 KiB; at 100000 tokens 32768000000 B (30.5 GiB); 80 GiB holds
 *    floor(85899345920 / 32768000000) = 2 sequences, or 262144 tokens in one.
 *  - without GQA (64 KV heads): 8x = 2621440 B per token; 0 sequences of 100k fit.
 *  - q8_0: 1024 / 32 = 32 blocks x 34 B = 1088 per vector -> 2 x 80 x 1088 = 174080;
 *    q4_0: 32 x 18 = 576 -> 92160; f32: 655360.
 *  - llama-2-7b: 32 layers x 32 KV heads x 128 -> f16 2 x 32 x 4096 x 2 = 524288 (512 KiB).
 *  - stories260K (dim 64, 8 heads, 4 KV heads, head_dim 8, 5 layers): kv_dim 32 ->
 *    f16 2 x 5 x 32 x 2 = 640 B; q8_0 one 34-byte block per vector -> 340 B.
 *
 * Layer kinds (a window layer holds min(ctx, W) positions; f16, per layer and token
 * 2 x kv_dim x 2 bytes):
 *  - gemma-3-27b: 62 layers, 16 KV heads x 128 -> 8192 B a layer; pattern 6: layers
 *    5, 11, ..., 59 global (10), 52 window (W 1024). Per token 62 x 8192 = 507904,
 *    global 81920, window 425984. At 32768 tokens: 81920 x 32768 + 425984 x 1024 =
 *    2684354560 + 436207616 = 3120562176; full 507904 x 32768 = 16642998272; saving
 *    13522436096 (0.8125). 80 GiB = 85899345920: floor(/ 3120562176) = 27 sequences;
 *    one sequence: 1024 + floor((85899345920 - 507904 x 1024) / 81920) = 1024 +
 *    1042227 = 1043251 tokens. At 512 tokens (inside the window): 507904 x 512 =
 *    260046848 = full, saving 0.
 *  - gemma-3-1b: 26 layers, 1 KV head x 256 -> 1024 B a layer; global 5, 11, 17, 23
 *    (4), 22 window (W 512): at 32768: 4 x 1024 x 32768 + 22 x 1024 x 512 = 134217728
 *    + 11534336 = 145752064; full 26 x 1024 x 32768 = 872415232.
 *  - qwen3-32b: 64 layers, 8 KV heads x 128 -> 4096 B a layer, 262144 a token, all
 *    global; at its 40960: 10737418240; 80 GiB: 8 sequences, 327680 tokens.
 *  - phi-4-mini: 32 layers, 8 x 128 -> 131072 a token; at 131072: 17179869184 (16 GiB);
 *    64 GiB: 4 sequences, 524288 tokens.
 *  - synth gemma3-tiny (7 layers, 1 KV head x 64 -> 256 B a layer, W 16, pattern 6:
 *    layer 5 global, 6 window): per token 1792, global 256, window 1536; at 512:
 *    256 x 512 + 1536 x 16 = 155648, full 917504; 1 MiB: 6 sequences, one sequence
 *    16 + (1048576 - 1792 x 16) / 256 = 16 + 3984 = 4000 tokens. With pattern 3
 *    (layers 0, 1, 3, 4, 6 local): 5 window layers; gemma2 (period 2) of 4 layers: 2.
 */
#include "testutil.h"

#include "kvinfer.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

static cJSON *plan(const char *args, int *rc)
{
    char cmd[512], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "kv-plan --json %s", args);
    *rc = run_kvinfer(cmd, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    if (*rc == 0 && !j) fprintf(stderr, "kv-plan %s: no JSON on stdout; stderr: %s\n", args, err ? err : "");
    free(out);
    free(err);
    return j;
}

static double num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static void expect_plan(const char *args, double bpt, double bps, double max_seq, double max_ctx)
{
    int rc;
    cJSON *j = plan(args, &rc);
    CHECK(rc == 0 && j, "kv-plan %s: exit %d", args, rc);
    if (!j) return;
    CHECK(num(j, "bytes_per_token") == bpt, "%s: bytes_per_token %.0f, expected %.0f", args,
          num(j, "bytes_per_token"), bpt);
    if (bps >= 0)
        CHECK(num(j, "bytes_per_sequence") == bps, "%s: bytes_per_sequence %.0f, expected %.0f", args,
              num(j, "bytes_per_sequence"), bps);
    if (max_seq >= 0)
        CHECK(num(j, "max_sequences") == max_seq, "%s: max_sequences %.0f, expected %.0f", args,
              num(j, "max_sequences"), max_seq);
    if (max_ctx >= 0)
        CHECK(num(j, "max_context") == max_ctx, "%s: max_context %.0f, expected %.0f", args,
              num(j, "max_context"), max_ctx);
    cJSON_Delete(j);
}

static void expect_fail(const char *args, const char *needle)
{
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 1, "%s: exit %d, expected 1", args, rc);
    CHECK(err && strstr(err, needle), "%s: stderr lacks '%s': %s", args, needle, err ? err : "(none)");
    free(out);
    free(err);
}

/* The layer-kind figures of kv-plan --json args. */
static void expect_kinds(const char *args, double n_window, double bpt_g, double bpt_w, double full,
                         double saving)
{
    int rc;
    cJSON *j = plan(args, &rc);
    CHECK(rc == 0 && j, "kv-plan %s: exit %d", args, rc);
    if (!j) return;
    CHECK(num(j, "n_layers_window") == n_window, "%s: n_layers_window %.0f", args, num(j, "n_layers_window"));
    CHECK(num(j, "bytes_per_token_global") == bpt_g, "%s: global %.0f, expected %.0f", args,
          num(j, "bytes_per_token_global"), bpt_g);
    CHECK(num(j, "bytes_per_token_window") == bpt_w, "%s: window %.0f, expected %.0f", args,
          num(j, "bytes_per_token_window"), bpt_w);
    CHECK(num(j, "bytes_per_sequence_full") == full, "%s: full %.0f, expected %.0f", args,
          num(j, "bytes_per_sequence_full"), full);
    CHECK(num(j, "window_saving_bytes") == saving, "%s: saving %.0f, expected %.0f", args,
          num(j, "window_saving_bytes"), saving);
    cJSON_Delete(j);
}

/* The window layers of a synthesized file: info (metadata only) and the loader agree
 * with the count worked out by hand. */
static void expect_file_kinds(const char *what, kvi_synth_params p, int n_window, int window)
{
    char file[96];
    snprintf(file, sizeof file, "kvplan_%s.gguf", what);
    const char *path = tmp_path(file);
    kvi_error e = { 0 };
    CHECK(kvi_synth_write(&p, path, &e) == 0, "%s: synth: %s", what, e.msg);
    kvi_model_info info;
    CHECK(kvi_model_info_from_file(path, &info, &e) == 0, "%s: info: %s", what, e.msg);
    CHECK(info.n_layers_window == n_window && info.window == window, "%s: info %d window layers (W %d)", what,
          info.n_layers_window, info.window);
    kvi_model *m = kvi_model_load(path, NULL, &e);
    CHECK(m != NULL, "%s: load: %s", what, e.msg);
    if (!m) return;
    int n = 0;
    for (int l = 0; l < m->n_layers; l++) n += m->layers[l].window == window;
    CHECK(n == n_window, "%s: the loader has %d window layers", what, n);
    kvi_model_free(m);
}

static void test_layer_kinds(void)
{
    expect_plan("--preset gemma-3-27b --ctx 32768 --mem 80GiB", 507904, 3120562176.0, 27, 1043251);
    expect_kinds("--preset gemma-3-27b --ctx 32768 --mem 80GiB", 52, 81920, 425984, 16642998272.0,
                 13522436096.0);
    expect_plan("--preset gemma-3-27b --ctx 512 --mem 80GiB", 507904, 260046848.0, -1, -1);
    expect_kinds("--preset gemma-3-27b --ctx 512 --mem 80GiB", 52, 81920, 425984, 260046848.0, 0);
    expect_plan("--preset gemma-3-1b --ctx 32768 --mem 1GiB", 26 * 1024, 145752064.0, -1, -1);
    expect_kinds("--preset gemma-3-1b --ctx 32768 --mem 1GiB", 22, 4096, 22528, 872415232.0,
                 872415232.0 - 145752064.0);
    expect_plan("--preset qwen3-32b --mem 80GiB", 262144, 10737418240.0, 8, 327680);
    expect_kinds("--preset qwen3-32b --mem 80GiB", 0, 262144, 0, 10737418240.0, 0);
    expect_plan("--preset phi-4-mini --mem 64GiB", 131072, 17179869184.0, 4, 524288);

    kvi_synth_params p;
    CHECK(kvi_synth_preset("gemma3-tiny", &p) == 0, "gemma3-tiny preset");
    p.n_vocab = 300;
    expect_file_kinds("gemma3", p, 6, 16);
    char args[512];
    snprintf(args, sizeof args, "-m %s --ctx 512 --mem 1MiB", tmp_path("kvplan_gemma3.gguf"));
    expect_plan(args, 1792, 155648, 6, 4000);
    expect_kinds(args, 6, 256, 1536, 917504, 917504 - 155648);
    char *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "kv-plan -m %s --ctx 512 --mem 1MiB", tmp_path("kvplan_gemma3.gguf"));
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0 && out && strstr(out, "1 global") && strstr(out, "6 window (W 16)") &&
              strstr(out, "(83.0%)"),
          "text layer kinds: %s", out ? out : "(none)");
    free(out);
    free(err);
    p.window_pattern = 3;
    expect_file_kinds("gemma3p3", p, 5, 16);
    p = (kvi_synth_params){ .arch = "gemma2",
                            .dim = 128,
                            .ffn_dim = 128,
                            .n_layers = 4,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .n_vocab = 300,
                            .n_ctx = 256,
                            .window = 32 };
    expect_file_kinds("gemma2", p, 2, 32);
}

/* kvi_model_info_from_file of the deepseek2 golden (README: kv rank 64, RoPE 16,
 * key head 48, value head 32, 8 heads) */
static void info_latent(void)
{
    kvi_model_info info;
    kvi_error e = { 0 };
    const int rc = kvi_model_info_from_file(shared_path("golden/arch/deepseek2-f32.gguf"), &info, &e);
    CHECK(rc == 0, "deepseek2 info: %s", e.msg);
    CHECK(info.mla_kv_rank == 64 && info.mla_k_head == 48 && info.mla_v_head == 32 && info.head_dim == 80 &&
              info.n_kv_heads == 1 && info.n_heads == 8,
          "deepseek2 info: rank %d k %d v %d hd %d kv %d", info.mla_kv_rank, info.mla_k_head, info.mla_v_head,
          info.head_dim, info.n_kv_heads);
}

int main(void)
{
    test_layer_kinds();
    /* the seed's 70B with and without grouped-query attention */
    expect_plan("--preset seed-70b --ctx 100000 --mem 80GiB", 327680, 32768000000.0, 2, 262144);
    expect_plan("--preset seed-70b-mha --ctx 100000 --mem 80GiB", 2621440, 262144000000.0, 0, 32768);
    expect_plan("--preset seed-70b --ctx 100000 --mem 80GiB --kv-type q8_0", 174080, 17408000000.0, 4, -1);
    expect_plan("--preset seed-70b --ctx 1000 --mem 1GiB --kv-type q4_0", 92160, 92160000.0, 11, 11650);
    expect_plan("--preset seed-70b --ctx 1000 --mem 1GiB --kv-type f32", 655360, -1, 1, 1638);
    /* K and V separately: f16 K (163840) + q4_0 V (46080) */
    expect_plan("--preset seed-70b --ctx 1 --mem 1MiB --kv-type-k f16 --kv-type-v q4_0", 163840 + 46080, -1,
                4, 4);
    /* q4 (KIVI estimate): K 1024 x 5/8 = 640 B, V q4_0 576 B, x 80 layers */
    expect_plan("--preset seed-70b --ctx 1 --mem 1MiB --kv-type q4", 80 * (640 + 576), -1, -1, -1);
    expect_plan("--preset llama-2-7b --ctx 4096 --mem 24GiB", 524288, 2147483648.0, 12, 49152);
    /* real models: same figures as their published shapes give */
    expect_plan("--preset llama-3-8b --ctx 8192 --mem 16GiB", 131072, 1073741824.0, 16, -1);
    expect_plan("--preset qwen2.5-7b --ctx 32768 --mem 8GiB", 57344, -1, -1, -1);
    expect_plan("--preset llama-2-70b --ctx 4096 --mem 80GiB", 327680, -1, -1, -1);
    expect_plan("--preset mistral-7b --ctx 4096 --mem 1GiB", 131072, -1, -1, 8192);

    /* a model file's metadata */
    char args[512];
    snprintf(args, sizeof args, "-m %s --mem 1MiB --ctx 512", shared_path("models/stories260K.gguf"));
    expect_plan(args, 640, 327680, 3, 1638);
    snprintf(args, sizeof args, "-m %s --mem 1MiB --ctx 512 --kv-type q8_0",
             shared_path("models/stories260K.gguf"));
    expect_plan(args, 340, 174080, 6, 3084);

    /* latent attention (MLA): one row of kv_lora_rank + RoPE dims a token and layer,
     * no values. deepseek2 golden: 4 layers x 80 x 2 bytes (f16) = 640; per-head K and
     * V: 4 x 8 x (48 + 32) x 2 = 5120. DeepSeek-V3: 61 x 576 x 2 = 70272; per head
     * 61 x 128 x (192 + 128) x 2 = 4997120 */
    snprintf(args, sizeof args, "-m %s --mem 1MiB --ctx 512", shared_path("golden/arch/deepseek2-f32.gguf"));
    expect_plan(args, 640, 327680, 3, 1638);
    expect_plan("--preset deepseek-v3 --ctx 100000 --mem 64GiB", 70272, 7027200000.0, 9, -1);
    expect_plan("--preset deepseek-v2-lite --ctx 1000 --mem 1GiB --kv-type q8_0", 27 * 18 * 34, -1, -1, -1);
    {
        int prc;
        cJSON *j = plan("--preset deepseek-v3 --ctx 1000 --mem 1GiB", &prc);
        CHECK(j && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "latent")) &&
                  num(j, "bytes_per_token_per_head") == 4997120 && num(j, "kv_lora_rank") == 512,
              "deepseek-v3: per-head %g", j ? num(j, "bytes_per_token_per_head") : -1);
        cJSON_Delete(j);
        j = plan("--preset llama-3-8b --ctx 1000 --mem 1GiB", &prc);
        CHECK(j && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "latent")), "llama-3-8b: latent");
        cJSON_Delete(j);
    }
    expect_fail("kv-plan --preset deepseek-v3 --ctx 1 --mem 1GiB --kv-type q4", "latent");

    /* hybrids: K/V in the attention layers only, plus a fixed f32 state per sequence.
     * Qwen3.5-0.8B: 6 attention layers x 2 x (2 x 256) x 2 bytes = 12288 a token; state
     * 18 x (3 x 6144 + 16 x 128 x 128) x 4 = 20201472; at 1024 tokens 12582912 + 20201472;
     * max context (1 GiB - state) / 12288 = 85737. The qwen35 golden: 2 x 2 x 128 x 4 =
     * 2048 a token (f32), state 6 x (3 x 256 + 4 x 32 x 32) x 4 = 116736 */
    expect_plan("--preset qwen3.5-0.8b --ctx 1024 --mem 1GiB", 12288, 32784384.0, 32, 85737);
    expect_plan("--preset qwen3.5-0.8b-all-attention --ctx 1024 --mem 1GiB", 49152, 50331648.0, 21, -1);
    snprintf(args, sizeof args, "-m %s --mem 1MiB --ctx 512 --kv-type f32",
             shared_path("golden/arch/qwen35-f32.gguf"));
    expect_plan(args, 2048, 1165312.0, 0, 455);
    /* short-convolution hybrids (README-state-t3.md): 1 attention layer x 2 x (2 x 16) x 4 =
     * 256 a token, state 3 x 2 x 64 x 4 = 1536; at 512 tokens 132608, 7 in 1 MiB, one
     * sequence (1 MiB - 1536) / 256 = 4090 tokens */
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "-m %s --mem 1MiB --ctx 512 --kv-type f32",
                 shared_path(i ? "golden/arch/lfm2moe-f32.gguf" : "golden/arch/lfm2-f32.gguf"));
        expect_plan(args, 256, 132608.0, 7, 4090);
    }
    {
        int prc;
        cJSON *j = plan("--preset qwen3.5-0.8b --ctx 1024 --mem 1GiB --kv-type q8_0", &prc);
        CHECK(j && num(j, "n_layers_recurrent") == 18 && num(j, "state_bytes_per_sequence") == 20201472 &&
                  num(j, "bytes_per_sequence_all_attention") == 24.0 * 2 * 16 * 34 * 1024,
              "qwen3.5-0.8b: recurrent %g, state %g, all attention %g", j ? num(j, "n_layers_recurrent") : -1,
              j ? num(j, "state_bytes_per_sequence") : -1,
              j ? num(j, "bytes_per_sequence_all_attention") : -1);
        cJSON_Delete(j);
    }
    info_latent();

    /* the text table carries the same numbers */
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer("kv-plan --preset seed-70b --ctx 100000 --mem 80GiB", &out, &err);
    CHECK(rc == 0 && out && strstr(out, "320.00 KiB") && strstr(out, "327680 bytes") &&
              strstr(out, "30.52 GiB"),
          "text table: %s", out ? out : "(none)");
    free(out);
    free(err);

    /* errors */
    expect_fail("kv-plan --preset nosuch --ctx 1 --mem 1GiB", "unknown preset");
    expect_fail("kv-plan --preset seed-70b --ctx 1", "--mem");
    expect_fail("kv-plan --ctx 1 --mem 1GiB", "--preset");
    expect_fail("kv-plan --preset seed-70b --ctx 1 --mem 1GiB --kv-type q3", "unknown KV type");
    expect_fail("kv-plan --preset seed-70b --ctx 0 --mem 1GiB", "--ctx");
    expect_fail("kv-plan --preset seed-70b --mem 1GiB", "--ctx");
    expect_fail("kv-plan --preset seed-70b --ctx 5 --mem lots", "memory size");
    snprintf(args, sizeof args, "kv-plan -m %s --mem 1GiB", tmp_path("kvplan_missing.gguf"));
    expect_fail(args, "kvplan_missing.gguf");

    /* kvi_model_info_from_file: stories260K's shape, no weights loaded */
    kvi_model_info info;
    kvi_error e = { 0 };
    rc = kvi_model_info_from_file(shared_path("models/stories260K.gguf"), &info, &e);
    CHECK(rc == 0, "info_from_file: %d %s", rc, e.msg);
    CHECK(info.n_layers == 5 && info.n_heads == 8 && info.n_kv_heads == 4 && info.head_dim == 8 &&
              info.dim == 64,
          "shape %d layers %d heads %d kv %d hd %d dim", info.n_layers, info.n_heads, info.n_kv_heads,
          info.head_dim, info.dim);
    CHECK(info.n_vocab == 512 && !strcmp(info.arch, "llama") && info.has_weights, "vocab %d arch %s",
          info.n_vocab, info.arch);
    /* the same as the full loader says */
    kvi_model *m = kvi_model_load(shared_path("models/stories260K.gguf"), NULL, &e);
    CHECK(m != NULL, "load: %s", e.msg);
    if (m) {
        kvi_model_info full;
        kvi_model_get_info(m, &full);
        CHECK(full.weight_bytes == info.weight_bytes && full.weight_type == info.weight_type &&
                  full.n_ctx_train == info.n_ctx_train && full.ffn_dim == info.ffn_dim,
              "metadata-only info differs from the loaded model's (bytes %zu vs %zu)", info.weight_bytes,
              full.weight_bytes);
        kvi_model_free(m);
    }

    /* a truncated GGUF: a clean error, never a crash */
    size_t len = 0;
    char *buf = read_file(shared_path("models/stories260K.gguf"), &len);
    CHECK(buf && len > 200, "read stories260K.gguf");
    if (buf) {
        size_t cuts[] = { 3, 20, 100, 200 };
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            const char *p = tmp_path("kvplan_trunc.gguf");
            write_file(p, buf, cuts[i]);
            memset(&e, 0, sizeof e);
            rc = kvi_model_info_from_file(p, &info, &e);
            CHECK(rc < 0 && e.msg[0], "truncated at %zu: rc %d", cuts[i], rc);
        }
        free(buf);
    }
    return test_main_end();
}
