/*
 * test_model.c — model loading from GGUF, llama2.c checkpoints and Hugging Face
 * folders, against the reference models in ../shared/models and hand-computed
 * values; plus corrupt inputs, each of which must give a clear error.
 *
 * Findings this test pins down:
 *  - stories260K.gguf and stories260K.bin hold bit-identical weights, q/k rows
 *    included: that GGUF was converted without any q/k permutation, and both use
 *    the interleaved-pair RoPE of llama2.c, so one RoPE serves both files;
 *  - TinyStories-656K stores q_proj/k_proj in rotate-half order; the loader
 *    interleaves each head's two halves (checked row by row against the file).
 */
#include "kvinfer.h"
#include "model/model.h"
#include "formats/safetensors.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool tensor_equal(const kern_tensor *a, const kern_tensor *b)
{
    return a->type == KVI_TYPE_F32 && b->type == KVI_TYPE_F32 && a->n_in == b->n_in && a->n_out == b->n_out &&
           memcmp(a->data, b->data, (size_t)(a->n_in * a->n_out) * sizeof(float)) == 0;
}

static bool msg_has(const kvi_error *e, const char *s) { return strstr(e->msg, s) != NULL; }

static void check_stories_hparams(const kvi_model *m, const char *what)
{
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    CHECK(strcmp(info.arch, "llama") == 0, "%s: arch %s", what, info.arch);
    CHECK(info.dim == 64 && info.ffn_dim == 172 && info.n_layers == 5, "%s: dim %d ffn %d layers %d", what,
          info.dim, info.ffn_dim, info.n_layers);
    CHECK(info.n_heads == 8 && info.n_kv_heads == 4 && info.head_dim == 8, "%s: heads %d/%d hd %d", what,
          info.n_heads, info.n_kv_heads, info.head_dim);
    CHECK(info.n_vocab == 512 && kvi_n_vocab(m) == 512, "%s: vocab %d", what, info.n_vocab);
    CHECK(info.weight_type == KVI_TYPE_F32 && info.has_weights, "%s: type %d", what, info.weight_type);
    CHECK(m->n_rot == 8 && !m->rope_neox && m->rope_freqs == NULL, "%s: rope", what);
    CHECK(fabsf(m->rms_eps - 1e-5f) < 1e-9f && m->rope_theta == 10000.0f, "%s: eps %g theta %g", what,
          (double)m->rms_eps, (double)m->rope_theta);
    CHECK(kvi_token_bos(m) == 1 && kvi_token_eos(m) == 2, "%s: bos %d eos %d", what, kvi_token_bos(m),
          kvi_token_eos(m));
}

/* stories260K: GGUF vs llama2.c checkpoint vs the raw bytes of the .bin. */
static void test_stories(void)
{
    kvi_error err = { 0 };
    kvi_model *g = kvi_model_load(shared_path("models/stories260K.gguf"), NULL, &err);
    CHECK(g != NULL, "load gguf: %s", err.msg);
    kvi_model *b = kvi_model_load(shared_path("models/stories260K.bin"), NULL, &err);
    CHECK(b != NULL, "load bin: %s", err.msg);
    if (!g || !b) {
        kvi_model_free(g);
        kvi_model_free(b);
        return;
    }
    check_stories_hparams(g, "gguf");
    check_stories_hparams(b, "bin");
    CHECK(g->n_ctx_train == 2048 && b->n_ctx_train == 512, "ctx %d %d", g->n_ctx_train, b->n_ctx_train);
    /* All F32: 2 * 512*64 + 64 + 5 * (2*64*64 + 2*32*64 + 2*64 + 3*172*64) floats. */
    CHECK(g->weight_bytes == 292800u * 4, "gguf weight bytes %zu", g->weight_bytes);
    /* The .bin shares its classifier: the same minus one [512][64] matrix. */
    CHECK(b->weight_bytes == (292800u - 512 * 64) * 4, "bin weight bytes %zu", b->weight_bytes);
    CHECK(b->output.data == b->tok_embd.data, "bin classifier is shared");

    CHECK(tensor_equal(&g->tok_embd, &b->tok_embd), "token_embd differs");
    CHECK(tensor_equal(&g->output, &b->output), "output differs");
    CHECK(memcmp(g->output_norm, b->output_norm, 64 * sizeof(float)) == 0, "output_norm differs");
    for (int l = 0; l < 5; l++) {
        const model_layer *x = &g->layers[l], *y = &b->layers[l];
        CHECK(tensor_equal(&x->wq, &y->wq) && tensor_equal(&x->wk, &y->wk), "layer %d q/k differ", l);
        CHECK(tensor_equal(&x->wv, &y->wv) && tensor_equal(&x->wo, &y->wo), "layer %d v/o differ", l);
        CHECK(tensor_equal(&x->w_gate, &y->w_gate) && tensor_equal(&x->w_up, &y->w_up) &&
                  tensor_equal(&x->w_down, &y->w_down),
              "layer %d ffn differs", l);
        CHECK(memcmp(x->attn_norm, y->attn_norm, 64 * 4) == 0 &&
                  memcmp(x->ffn_norm, y->ffn_norm, 64 * 4) == 0,
              "layer %d norms differ", l);
    }

    /* Independent reading of the .bin: layer 3's wk row 17 and layer 2's w2 (down) row 5. */
    size_t len;
    char *raw = read_file(shared_path("models/stories260K.bin"), &len);
    CHECK(raw && len == 1056540, "raw .bin");
    if (raw) {
        const size_t V = 512, D = 64, L = 5, KV = 32, H = 172;
        size_t wk = 7 + V * D + L * D + L * D * D; /* floats from the start */
        size_t w2 = wk + 2 * L * KV * D + L * D * D + L * D + L * H * D;
        float want[64], want2[172];
        memcpy(want, raw + 4 * (wk + 3 * KV * D + 17 * D), sizeof want);
        memcpy(want2, raw + 4 * (w2 + 2 * D * H + 5 * H), sizeof want2);
        CHECK(memcmp((const float *)b->layers[3].wk.data + 17 * 64, want, sizeof want) == 0, "bin wk row");
        CHECK(memcmp((const float *)g->layers[3].wk.data + 17 * 64, want, sizeof want) == 0,
              "gguf wk row (no q/k permutation between the two files)");
        CHECK(memcmp((const float *)b->layers[2].w_down.data + 5 * 172, want2, sizeof want2) == 0,
              "bin w2 row");
        free(raw);
    }

    /* Tokenizer delegation: ids from tok512.bin read by hand; golden prompt ids. */
    char piece[32];
    int32_t n = kvi_token_to_piece(g, 388, piece, sizeof piece, false);
    CHECK(n == 3 && memcmp(piece, "all", 3) == 0, "piece 388: %d", n);
    n = kvi_token_to_piece(b, 405, piece, sizeof piece, false);
    CHECK(n == 6 && memcmp(piece, " Timmy", 6) == 0, "bin piece 405: %d", n);
    cJSON *cs = load_json(shared_path("golden/stories260K/case1.json"));
    CHECK(cs != NULL, "golden case1");
    if (cs) {
        const cJSON *pr = cJSON_GetObjectItem(cs, "prompt"), *ids = cJSON_GetObjectItem(cs, "prompt_tokens");
        int32_t got[256];
        for (int which = 0; which < 2 && pr && ids; which++) {
            kvi_model *m = which ? b : g;
            int32_t k = kvi_tokenize(m, pr->valuestring, strlen(pr->valuestring), true, false, got, 256);
            bool same = k == cJSON_GetArraySize(ids);
            for (int32_t i = 0; same && i < k; i++) same = got[i] == cJSON_GetArrayItem(ids, i)->valueint;
            CHECK(same, "%s tokenizes the golden prompt differently (%d ids)", which ? "bin" : "gguf", k);
        }
        cJSON_Delete(cs);
    }

    /* use_mmap gives the same bytes. */
    kvi_load_params p;
    kvi_load_params_default(&p);
    p.use_mmap = true;
    kvi_model *bm = kvi_model_load(shared_path("models/stories260K.bin"), &p, &err);
    kvi_model *gm = kvi_model_load(shared_path("models/stories260K.gguf"), &p, &err);
    CHECK(bm && gm, "mmap loads: %s", err.msg);
    if (bm && gm)
        CHECK(tensor_equal(&bm->layers[4].w_up, &b->layers[4].w_up) &&
                  tensor_equal(&gm->layers[1].wq, &g->layers[1].wq),
              "mmap tensors differ");
    kvi_model_free(bm);
    kvi_model_free(gm);
    kvi_model_free(g);
    kvi_model_free(b);
}

static void test_aidreams(void)
{
    kvi_error err = { 0 };
    /* Default search: tok512.bin next to the checkpoint (its own vocabulary). */
    kvi_model *m = kvi_model_load(shared_path("models/aidreams260K/aidreams260K.bin"), NULL, &err);
    CHECK(m != NULL, "aidreams: %s", err.msg);
    if (!m) return;
    /* Pieces read by hand from aidreams260K/tok512.bin ("Echoes of" = 388 355 260 275). */
    char piece[16];
    int32_t n = kvi_token_to_piece(m, 355, piece, sizeof piece, false);
    CHECK(n == 3 && memcmp(piece, "cho", 3) == 0, "aidreams piece 355: %d", n);
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    CHECK(info.dim == 64 && info.n_layers == 4 && info.n_heads == 4 && info.n_kv_heads == 4 &&
              info.head_dim == 16 && info.ffn_dim == 172 && info.n_vocab == 512 && info.n_ctx_train == 128,
          "aidreams hparams dim %d layers %d heads %d/%d ctx %d", info.dim, info.n_layers, info.n_heads,
          info.n_kv_heads, info.n_ctx_train);
    /* First float after the 28-byte header: token_embedding[0][0] = 0x3ddd48b5. */
    uint32_t bits;
    memcpy(&bits, m->tok_embd.data, 4);
    CHECK(bits == 0x3ddd48b5u, "aidreams embedding[0][0] bits %08x", bits);
    kvi_model_free(m);

    /* A copy in a folder without any tokenizer fails clearly; tokenizer_path rescues it. */
    size_t len;
    char *raw = read_file(shared_path("models/aidreams260K/aidreams260K.bin"), &len);
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s", tmp_path("notok"));
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/aidreams.bin", dir);
    CHECK(raw && write_file(path, raw, len) == 0, "copy aidreams");
    free(raw);
    m = kvi_model_load(path, NULL, &err);
    CHECK(m == NULL && err.code == KVI_E_IO && msg_has(&err, "tokenizer"), "no tokenizer: %s", err.msg);
    kvi_load_params p;
    kvi_load_params_default(&p);
    char tok_path[1024];
    snprintf(tok_path, sizeof tok_path, "%s", shared_path("models/aidreams260K/tok512.bin"));
    p.tokenizer_path = tok_path;
    m = kvi_model_load(path, &p, &err);
    CHECK(m != NULL && m->n_layers == 4, "tokenizer_path: %s", err.msg);
    kvi_model_free(m);
}

/* Reads row r of the safetensors tensor `name` (F32) into dst by parsing the
 * header here with cJSON, independently of the loader. */
static bool st_row(const char *file, size_t len, const char *name, int64_t r, int64_t n, float *dst)
{
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)file[i];
    cJSON *h = cJSON_ParseWithLength(file + 8, (size_t)hl);
    const cJSON *t = h ? cJSON_GetObjectItem(h, name) : NULL;
    const cJSON *off = t ? cJSON_GetObjectItem(t, "data_offsets") : NULL;
    bool ok = off != NULL;
    if (ok) {
        size_t at = 8 + (size_t)hl + (size_t)cJSON_GetArrayItem(off, 0)->valuedouble +
                    (size_t)(r * n) * sizeof(float);
        ok = at + (size_t)n * sizeof(float) <= len;
        if (ok) memcpy(dst, file + at, (size_t)n * sizeof(float));
    }
    cJSON_Delete(h);
    return ok;
}

static void test_hf(void)
{
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path("models/TinyStories-656K"), NULL, &err);
    CHECK(m != NULL, "TinyStories-656K: %s", err.msg);
    if (!m) return;
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    CHECK(strcmp(info.arch, "llama") == 0 && strcmp(info.name, "TinyStories-656K") == 0, "arch %s name %s",
          info.arch, info.name);
    CHECK(info.dim == 128 && info.ffn_dim == 384 && info.n_layers == 2 && info.n_heads == 8 &&
              info.n_kv_heads == 4 && info.head_dim == 16 && info.n_vocab == 2048 && info.n_ctx_train == 512,
          "hf hparams dim %d ffn %d layers %d heads %d/%d hd %d vocab %d", info.dim, info.ffn_dim,
          info.n_layers, info.n_heads, info.n_kv_heads, info.head_dim, info.n_vocab);
    CHECK(fabsf(m->rms_eps - 1e-6f) < 1e-12f && m->rope_theta == 10000.0f && !m->rope_neox && m->n_rot == 16,
          "hf eps %g", (double)m->rms_eps);
    CHECK(m->output.data == m->tok_embd.data, "tied embeddings");
    CHECK(m->weight_bytes == 2624000u, "hf weight bytes %zu (the whole data section)", m->weight_bytes);
    CHECK(kvi_token_bos(m) == 1 && kvi_token_eos(m) == 2, "hf bos %d eos %d", kvi_token_bos(m),
          kvi_token_eos(m));

    size_t len;
    char *file = read_file(shared_path("models/TinyStories-656K/model.safetensors"), &len);
    CHECK(file != NULL, "read safetensors");
    if (file) {
        float orig[128];
        const int hd = 16;
        /* q_proj layer 1, head 3, pair 5: new rows 58 and 59 = old rows 53 and 61. */
        const struct {
            const char *name;
            const kern_tensor *t;
            int head, i;
        } cases[] = {
            { "model.layers.1.self_attn.q_proj.weight", &m->layers[1].wq, 3, 5 },
            { "model.layers.0.self_attn.k_proj.weight", &m->layers[0].wk, 2, 7 },
            { "model.layers.0.self_attn.q_proj.weight", &m->layers[0].wq, 0, 0 },
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const float *w = cases[c].t->data;
            int base = cases[c].head * hd, i = cases[c].i;
            CHECK(st_row(file, len, cases[c].name, base + i, 128, orig) &&
                      memcmp(w + (size_t)(base + 2 * i) * 128, orig, sizeof orig) == 0,
                  "%s: row %d is not old row %d", cases[c].name, base + 2 * i, base + i);
            CHECK(st_row(file, len, cases[c].name, base + i + hd / 2, 128, orig) &&
                      memcmp(w + (size_t)(base + 2 * i + 1) * 128, orig, sizeof orig) == 0,
                  "%s: row %d is not old row %d", cases[c].name, base + 2 * i + 1, base + i + hd / 2);
        }
        /* v_proj and the embedding are not permuted. */
        CHECK(st_row(file, len, "model.layers.1.self_attn.v_proj.weight", 9, 128, orig) &&
                  memcmp((const float *)m->layers[1].wv.data + 9 * 128, orig, sizeof orig) == 0,
              "v_proj row 9");
        CHECK(st_row(file, len, "lm_head.weight", 1000, 128, orig) &&
                  memcmp((const float *)m->tok_embd.data + 1000 * 128, orig, sizeof orig) == 0,
              "embedding row 1000");
        free(file);
    }
    kvi_model_free(m);

    kvi_load_params p;
    kvi_load_params_default(&p);
    p.use_mmap = true;
    m = kvi_model_load(shared_path("models/TinyStories-656K/"), &p, &err);
    CHECK(m != NULL && m->n_layers == 2, "hf with mmap: %s", err.msg);
    kvi_model_free(m);
}

static void test_qtest(void)
{
    static const struct {
        const char *name;
        kvi_type type, output;
    } files[] = {
        { "f32", KVI_TYPE_F32, KVI_TYPE_F32 },    { "f16", KVI_TYPE_F16, KVI_TYPE_F16 },
        { "bf16", KVI_TYPE_BF16, KVI_TYPE_BF16 }, { "q8_0", KVI_TYPE_Q8_0, KVI_TYPE_Q8_0 },
        { "q4_0", KVI_TYPE_Q4_0, KVI_TYPE_Q6_K }, { "q4_1", KVI_TYPE_Q4_1, KVI_TYPE_Q4_1 },
        { "q5_0", KVI_TYPE_Q5_0, KVI_TYPE_Q5_0 }, { "q5_1", KVI_TYPE_Q5_1, KVI_TYPE_Q5_1 },
        { "q2_k", KVI_TYPE_Q2_K, KVI_TYPE_Q2_K }, { "q3_k", KVI_TYPE_Q3_K, KVI_TYPE_Q3_K },
        { "q4_k", KVI_TYPE_Q4_K, KVI_TYPE_Q4_K }, { "q5_k", KVI_TYPE_Q5_K, KVI_TYPE_Q5_K },
        { "q6_k", KVI_TYPE_Q6_K, KVI_TYPE_Q6_K }, { "q4_k_m", KVI_TYPE_Q4_K, KVI_TYPE_Q6_K },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/quant/qtest-%s.gguf", files[i].name);
        kvi_error err = { 0 };
        kvi_model *m = kvi_model_load(shared_path(rel), NULL, &err);
        CHECK(m != NULL, "%s: %s", rel, err.msg);
        if (!m) continue;
        kvi_model_info info;
        kvi_model_get_info(m, &info);
        CHECK(info.dim == 256 && info.ffn_dim == 768 && info.n_layers == 4 && info.n_heads == 8 &&
                  info.n_kv_heads == 4 && info.head_dim == 32 && info.n_vocab == 512,
              "%s hparams", rel);
        CHECK(info.weight_type == files[i].type, "%s: weight type %d", rel, info.weight_type);
        CHECK(m->output.type == files[i].output && m->output.data != m->tok_embd.data, "%s: output type %d",
              rel, m->output.type);
        bool pure = strcmp(files[i].name, "q4_k_m") != 0;
        for (int l = 0; pure && l < 4; l++) {
            const model_layer *L = &m->layers[l];
            CHECK(L->wq.type == files[i].type && L->wk.type == files[i].type && L->wv.type == files[i].type &&
                      L->wo.type == files[i].type && L->w_gate.type == files[i].type &&
                      L->w_up.type == files[i].type && L->w_down.type == files[i].type,
                  "%s: layer %d types", rel, l);
        }
        struct stat st;
        CHECK(stat(shared_path(rel), &st) == 0 && info.weight_bytes > 0 &&
                  info.weight_bytes < (size_t)st.st_size && info.weight_bytes > (size_t)st.st_size * 9 / 10,
              "%s: weight bytes %zu", rel, info.weight_bytes);
        kvi_model_free(m);
    }
}

/* A pipeline stage's load (kvi_load_params.stage_*): the tensors of its layers
 * (and of the embedding / head when its stage has them) equal a whole load's
 * bytes, repacked alike; every other tensor was never read (all zeros, where the
 * file holds weights); a bad range is refused. */
static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

/* rel loaded as the stage [first, end) (NULL with err set when refused). */
static kvi_model *load_stage(const char *rel, int first, int end, kvi_error *err)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.stage_first = first;
    lp.stage_end = end;
    return kvi_model_load(shared_path(rel), &lp, err);
}

static void test_staged_load(void)
{
    const char *rel = "golden/quant/qtest-q8_0.gguf";
    kvi_error err = { 0 };
    kvi_model *whole = kvi_model_load(shared_path(rel), NULL, &err);
    CHECK(whole != NULL, "%s: %s", rel, err.msg);
    if (!whole) return;
    static const int ranges[][2] = { { 0, 1 }, { 1, 3 }, { 3, 4 }, { 0, 4 } };
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        const int l0 = ranges[r][0], l1 = ranges[r][1];
        kvi_model *m = load_stage(rel, l0, l1, &err);
        CHECK(m != NULL, "%s stage %d-%d: %s", rel, l0, l1, err.msg);
        if (!m) continue;
        int kept = 0, unread = 0, wrong = 0;
        for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
            const gguf_tensor *t = gguf_tensor_at(m->gguf, i), *w = gguf_tensor_at(whole->gguf, i);
            if (model_stage_keeps(m->gguf, t, l0, l1, 4)) {
                kept++;
                wrong += w->nbytes != t->nbytes || memcmp(w->data, t->data, t->nbytes) != 0;
            } else {
                unread++;
                wrong += !all_zero(t->data, t->nbytes) || all_zero(w->data, w->nbytes);
            }
        }
        CHECK(wrong == 0 && kept > 0 && (l0 == 0 && l1 == 4 ? unread == 0 : unread > 0),
              "%s stage %d-%d: %d tensors kept, %d unread, %d wrong", rel, l0, l1, kept, unread, wrong);
        kvi_model_free(m);
    }
    static const int bad[][2] = { { 2, 2 }, { 3, 1 }, { -1, 2 }, { 2, 5 } };
    for (size_t r = 0; r < sizeof bad / sizeof bad[0]; r++) {
        kvi_model *m = load_stage(rel, bad[r][0], bad[r][1], &err);
        CHECK(!m && err.code == KVI_E_INVALID && msg_has(&err, "stage layers"), "stage %d-%d: %s", bad[r][0],
              bad[r][1], m ? "loaded" : err.msg);
        kvi_model_free(m);
    }
    kvi_model_free(whole);
}

static void test_vocab(void)
{
    kvi_error err = { 0 };
    kvi_model *v = kvi_vocab_load(shared_path("golden/tokenizer/ggml-vocab-llama-spm.gguf"), &err);
    CHECK(v != NULL && !kvi_model_has_weights(v) && kvi_n_vocab(v) == 32000, "spm vocab: %s", err.msg);
    kvi_model_free(v);
    v = kvi_vocab_load(shared_path("golden/tokenizer/ggml-vocab-gpt-2.gguf"), &err);
    CHECK(v != NULL && !kvi_model_has_weights(v) && kvi_n_vocab(v) == 50257, "gpt2 vocab: %s", err.msg);
    kvi_model_free(v);
    v = kvi_vocab_load(shared_path("models/tok512.bin"), &err);
    CHECK(v != NULL && kvi_n_vocab(v) == 512 && kvi_token_bos(v) == 1, "tok512.bin: %s", err.msg);
    kvi_model_free(v);
    v = kvi_vocab_load(shared_path("models/TinyStories-656K"), &err);
    CHECK(v != NULL && kvi_n_vocab(v) == 2048, "tokenizer.json folder: %s", err.msg);
    kvi_model_free(v);
    v = kvi_vocab_load(shared_path("models/TinyStories-656K/tokenizer.json"), &err);
    CHECK(v != NULL && kvi_n_vocab(v) == 2048, "tokenizer.json: %s", err.msg);
    kvi_model_free(v);
    v = kvi_vocab_load(shared_path("models/stories260K.gguf"), &err);
    CHECK(v != NULL && kvi_n_vocab(v) == 512 && !kvi_model_has_weights(v), "gguf vocab: %s", err.msg);
    kvi_model_free(v);
    /* A model file is not a tokenizer. */
    v = kvi_vocab_load(shared_path("models/stories260K.bin"), &err);
    CHECK(v == NULL && err.code == KVI_E_FORMAT, "checkpoint as vocab: %s", err.msg);
    kvi_model_free(v);
}

/* Writes a llama2.c file: the stories260K.bin bytes with header fields replaced
 * (NULL patch: unchanged) and cut to len bytes. */
static const char *write_bin(const char *name, const char *raw, size_t len, const int32_t *patch)
{
    char *buf = malloc(len);
    memcpy(buf, raw, len);
    if (patch) memcpy(buf, patch, len < 28 ? len : 28);
    const char *path = tmp_path(name);
    write_file(path, buf, len);
    free(buf);
    return path;
}

static void test_corrupt_llama2c(void)
{
    size_t len;
    char *raw = read_file(shared_path("models/stories260K.bin"), &len);
    CHECK(raw != NULL, "read .bin");
    if (!raw) return;
    kvi_load_params p;
    kvi_load_params_default(&p);
    char tok_path[1024]; /* shared_path's buffers rotate: keep a copy */
    snprintf(tok_path, sizeof tok_path, "%s", shared_path("models/tok512.bin"));
    p.tokenizer_path = tok_path;
    kvi_error err = { 0 };
    const int32_t ok[7] = { 64, 172, 5, 8, 4, 512, 512 };
    struct {
        const char *what;
        int32_t h[7];
        size_t len;
        const char *msg;
    } cases[] = {
        { "truncated", { 64, 172, 5, 8, 4, 512, 512 }, 100000, "needs" },
        { "one byte too many", { 64, 172, 5, 8, 4, 512, 512 }, 0, "needs" },
        { "negative dim", { -64, 172, 5, 8, 4, 512, 512 }, 0, "dim" },
        { "huge layers", { 64, 172, 0x7fffffff, 8, 4, 512, 512 }, 0, "n_layers" },
        { "zero kv heads", { 64, 172, 5, 8, 0, 512, 512 }, 0, "n_kv_heads" },
        { "INT32_MIN vocab", { 64, 172, 5, 8, 4, INT32_MIN, 512 }, 0, "vocab" },
        { "heads do not divide", { 64, 172, 5, 7, 7, 512, 512 }, 0, "divide" },
        { "kv heads do not divide", { 64, 172, 5, 8, 3, 512, 512 }, 0, "divide" },
        { "huge everything", { 1 << 17, 1 << 20, 4096, 4096, 4096, 1 << 24, 1 << 24 }, 0, "needs" },
        { "separate classifier missing", { 64, 172, 5, 8, 4, -512, 512 }, 0, "needs" },
        { "tiny file", { 64, 172, 5, 8, 4, 512, 512 }, 20, "neither" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path;
        if (cases[i].len == 0 && strcmp(cases[i].what, "one byte too many") == 0) {
            char *big = malloc(len + 1);
            memcpy(big, raw, len);
            big[len] = 0;
            path = write_bin("bad.bin", big, len + 1, NULL);
            free(big);
        } else {
            path = write_bin("bad.bin", raw, cases[i].len ? cases[i].len : len, cases[i].h);
        }
        err.code = 0;
        err.msg[0] = 0;
        kvi_model *m = kvi_model_load(path, &p, &err);
        CHECK(m == NULL && err.code == KVI_E_FORMAT && msg_has(&err, cases[i].msg), "%s: code %d msg '%s'",
              cases[i].what, err.code, err.msg);
        CHECK(strchr(err.msg, '\n') == NULL, "one-line message");
        kvi_model_free(m);
    }
    /* The unpatched copy loads (so the cases above fail for their own reason). */
    kvi_model *m = kvi_model_load(write_bin("good.bin", raw, len, ok), &p, &err);
    CHECK(m != NULL, "good copy: %s", err.msg);
    kvi_model_free(m);
    /* Newer llama2.c export (magic "ak42"). */
    int32_t v1[7] = { 0x616b3432, 1, 64, 172, 5, 8, 4 };
    m = kvi_model_load(write_bin("v1.bin", raw, len, v1), &p, &err);
    CHECK(m == NULL && err.code == KVI_E_UNSUPPORTED, "ak42: %s", err.msg);
    free(raw);

    m = kvi_model_load(shared_path("models/no-such-file.bin"), NULL, &err);
    CHECK(m == NULL && err.code == KVI_E_IO, "missing file: %s", err.msg);
    m = kvi_model_load(shared_path("golden/tokenizer/ggml-vocab-gpt-2.gguf"), NULL, &err);
    CHECK(m == NULL && err.code == KVI_E_UNSUPPORTED && msg_has(&err, "gpt2"), "gpt2 arch: %s", err.msg);
}

static void mkdir_p(const char *path) { mkdir(path, 0755); }

/* A folder tmp/<name> with config.json = cfg (NULL: the real one), the given
 * safetensors bytes, and the real tokenizer.json. */
static const char *make_hf_dir(const char *name, const char *cfg, const char *st, size_t st_len)
{
    const char *dir = tmp_path(name);
    static char dirbuf[1024];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    mkdir_p(dirbuf);
    char path[1100];
    size_t n;
    char *real_cfg = read_file(shared_path("models/TinyStories-656K/config.json"), &n);
    snprintf(path, sizeof path, "%s/config.json", dirbuf);
    write_file(path, cfg ? cfg : real_cfg, cfg ? strlen(cfg) : n);
    free(real_cfg);
    snprintf(path, sizeof path, "%s/model.safetensors", dirbuf);
    write_file(path, st, st_len);
    char *tok = read_file(shared_path("models/TinyStories-656K/tokenizer.json"), &n);
    snprintf(path, sizeof path, "%s/tokenizer.json", dirbuf);
    write_file(path, tok, n);
    free(tok);
    return dirbuf;
}

/* Replaces the first occurrence of `from` by `to` (same length) in buf. */
static bool patch(char *buf, size_t len, const char *from, const char *to)
{
    size_t n = strlen(from);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return true;
        }
    return false;
}

static void test_corrupt_hf(void)
{
    size_t len;
    char *st = read_file(shared_path("models/TinyStories-656K/model.safetensors"), &len);
    CHECK(st != NULL, "read safetensors");
    if (!st) return;
    kvi_error err = { 0 };
    char *cfg = read_file(shared_path("models/TinyStories-656K/config.json"), NULL);

    /* config.json problems */
    struct {
        const char *what, *from, *to;
        int code;
        const char *msg;
    } cfgs[] = {
        { "missing hidden_size", "\"hidden_size\"", "\"hidden_sizX\"", KVI_E_FORMAT, "hidden_size" },
        { "missing rms_norm_eps", "\"rms_norm_eps\"", "\"rms_norm_epX\"", KVI_E_FORMAT, "rms_norm_eps" },
        { "missing vocab_size", "\"vocab_size\"", "\"vocab_sizX\"", KVI_E_FORMAT, "vocab_size" },
        { "missing layers", "\"num_hidden_layers\"", "\"num_hidden_layerX\"", KVI_E_FORMAT,
          "num_hidden_layers" },
        { "fractional heads", "\"num_attention_heads\": 8", "\"num_attention_heads\": 8.5", KVI_E_FORMAT,
          "num_attention_heads" },
        { "unknown architecture", "LlamaForCausalLM", "GPTJForCausalLM", KVI_E_UNSUPPORTED, "GPTJ" },
        { "not JSON", "{", "[", KVI_E_FORMAT, "JSON" },
        { "wrong kv heads", "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 3", KVI_E_FORMAT,
          "n_kv_heads" },
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        char *c = malloc(strlen(cfg) + 16);
        strcpy(c, cfg);
        char *at = strstr(c, cfgs[i].from);
        CHECK(at != NULL, "pattern %s", cfgs[i].from);
        if (at) {
            size_t fl = strlen(cfgs[i].from), tl = strlen(cfgs[i].to);
            memmove(at + tl, at + fl, strlen(at + fl) + 1);
            memcpy(at, cfgs[i].to, tl);
        }
        const char *dir = make_hf_dir("badhf", c, st, len);
        err.code = 0;
        kvi_model *m = kvi_model_load(dir, NULL, &err);
        CHECK(m == NULL && err.code == cfgs[i].code && msg_has(&err, cfgs[i].msg), "%s: code %d '%s'",
              cfgs[i].what, err.code, err.msg);
        kvi_model_free(m);
        free(c);
    }

    /* safetensors headers that lie (same-length patches keep the header length valid) */
    struct {
        const char *what, *from, *to;
        const char *msg;
    } sts[] = {
        { "end past the data", "[2623488,2624000]", "[2623488,2624004]", "outside" },
        { "size mismatch", "[1048576,1049088]", "[1048576,1049084]", "need" },
        { "begin after end", "[1049088,1245696]", "[1245696,1049088]", "outside" },
        { "shape vs offsets", "[384,128]", "[385,128]", "need" },
        { "wrong shape for the model", "\"shape\":[64,128],\"data_offsets\":[1639424",
          "\"shape\":[128,64],\"data_offsets\":[1639424", "k_proj" },
        { "unknown dtype", "\"dtype\":\"F32\"", "\"dtype\":\"Q32\"", "dtype" },
        { "integer dtype", "\"dtype\":\"F32\"", "\"dtype\":\"I32\"", "dtype" },
        { "negative offset", "[1048576,1049088]", "[-1048576,104908]", "data_offsets" },
        { "broken JSON", "{\"__metadata__\"", "[\"__metadata__\"", "JSON" },
    };
    for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++) {
        char *c = malloc(len);
        memcpy(c, st, len);
        CHECK(patch(c, 8 + 2160, sts[i].from, sts[i].to), "pattern %s", sts[i].from);
        err.code = 0;
        kvi_model *m = kvi_model_load(make_hf_dir("badst", NULL, c, len), NULL, &err);
        CHECK(m == NULL && (err.code == KVI_E_FORMAT || err.code == KVI_E_UNSUPPORTED) &&
                  msg_has(&err, sts[i].msg),
              "%s: code %d '%s'", sts[i].what, err.code, err.msg);
        kvi_model_free(m);
        free(c);
    }
    /* Header length field larger than the file, and a file cut inside the data. */
    char *c = malloc(len);
    memcpy(c, st, len);
    c[5] = 0x7f;
    kvi_model *m = kvi_model_load(make_hf_dir("badst", NULL, c, len), NULL, &err);
    CHECK(m == NULL && err.code == KVI_E_FORMAT && msg_has(&err, "header length"), "hlen: '%s'", err.msg);
    m = kvi_model_load(make_hf_dir("badst", NULL, st, len - 100), NULL, &err);
    CHECK(m == NULL && err.code == KVI_E_FORMAT && msg_has(&err, "outside"), "cut file: '%s'", err.msg);
    m = kvi_model_load(make_hf_dir("badst", NULL, st, 5), NULL, &err);
    CHECK(m == NULL && err.code == KVI_E_FORMAT, "5-byte file: '%s'", err.msg);
    /* The unmodified copy loads. */
    m = kvi_model_load(make_hf_dir("badst", NULL, st, len), NULL, &err);
    CHECK(m != NULL, "good hf copy: %s", err.msg);
    kvi_model_free(m);
    free(c);

    /* st_parse directly: an empty object is fine, a scalar header is not. */
    char mini[64];
    const char *js = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    uint64_t hl = strlen(js);
    for (int i = 0; i < 8; i++) mini[i] = (char)(hl >> (8 * i));
    memcpy(mini + 8, js, hl);
    st_index *ix = NULL;
    CHECK(st_parse(mini, 8 + hl + 6, &ix, &err) == 0 && ix && ix->n_tensors == 1, "mini: %s", err.msg);
    if (ix) {
        const st_tensor *t = st_find(ix, "a");
        CHECK(t && t->type == KVI_TYPE_BF16 && t->nbytes == 6 && t->shape[0] == 3 &&
                  t->data == (const void *)(mini + 8 + hl),
              "mini tensor");
    }
    st_free(ix);
    CHECK(st_parse(mini, 8 + hl + 5, &ix, &err) == KVI_E_FORMAT, "mini cut: %s", err.msg);
    free(cfg);
    free(st);
}

/* How write_gguf changes stories260K.gguf. */
typedef struct gguf_mod {
    const char *skip_tensor; /* left out */
    const char *half_tensor; /* declared with ne[1] halved (wrong shape) */
    const char *drop_key;    /* metadata key left out */
    const char *arch;        /* rename: drops every "llama." key, writes <arch>.* by hand */
    bool f16_norms;          /* output_norm as F16, blk.0.attn_norm as BF16 (exact values) */
    bool q8_norm;            /* output_norm as Q8_0 (not allowed for a vector) */
    bool rope_freqs;         /* add rope_freqs.weight [4] */
    bool biases;             /* add blk.N.attn_{q,k,v}.bias */
} gguf_mod;

/* Exactly representable in F16 and BF16: 1, 0.5, 2, -1.5 (hand-encoded bits). */
static const float norm_vals[4] = { 1.0f, 0.5f, 2.0f, -1.5f };
static const uint16_t norm_f16[4] = { 0x3C00, 0x3800, 0x4000, 0xBE00 };
static const uint16_t norm_bf16[4] = { 0x3F80, 0x3F00, 0x4000, 0xBFC0 };

static float bias_val(int l, int j) { return (float)(l * 1000 + j) / 64.0f; }

static const char *write_gguf(const char *name, const gguf_mod *mod)
{
    kvi_error err = { 0 };
    gguf_ctx *src = NULL;
    if (gguf_open(shared_path("models/stories260K.gguf"), false, &src, &err) != 0) return NULL;
    gguf_writer *w = gguf_writer_create();
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        if (mod->drop_key && strcmp(key, mod->drop_key) == 0) continue;
        if (mod->arch && (strncmp(key, "llama.", 6) == 0 || strcmp(key, "general.architecture") == 0))
            continue;
        gguf_writer_copy_kv(w, src, key);
    }
    if (mod->arch) {
        char k[96];
        static const struct {
            const char *k;
            uint32_t v;
        } ints[] = {
            { "context_length", 2048 }, { "embedding_length", 64 },    { "feed_forward_length", 172 },
            { "block_count", 5 },       { "attention.head_count", 8 }, { "attention.head_count_kv", 4 },
        };
        gguf_writer_set_str(w, "general.architecture", mod->arch);
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
            snprintf(k, sizeof k, "%s.%s", mod->arch, ints[i].k);
            gguf_writer_set_u32(w, k, ints[i].v);
        }
        snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", mod->arch);
        gguf_writer_set_f32(w, k, 1e-6f);
        snprintf(k, sizeof k, "%s.rope.freq_base", mod->arch);
        gguf_writer_set_f32(w, k, 1000000.0f);
    }

    /* Declarations, then data in the same order. */
    enum { MAXT = 128 };
    const void *data[MAXT];
    void *tmp[MAXT] = { 0 };
    int64_t n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(src) && n < MAXT; i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (mod->skip_tensor && strcmp(t->name, mod->skip_tensor) == 0) continue;
        int64_t ne[4] = { t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
        kvi_type type = t->type;
        data[n] = t->data;
        if (mod->half_tensor && strcmp(t->name, mod->half_tensor) == 0) ne[1] /= 2;
        bool out_norm = strcmp(t->name, "output_norm.weight") == 0;
        if (mod->f16_norms && (out_norm || strcmp(t->name, "blk.0.attn_norm.weight") == 0)) {
            uint16_t *h = malloc(64 * sizeof *h);
            for (int j = 0; j < 64; j++) h[j] = out_norm ? norm_f16[j % 4] : norm_bf16[j % 4];
            type = out_norm ? KVI_TYPE_F16 : KVI_TYPE_BF16;
            data[n] = tmp[n] = h;
        }
        if (mod->q8_norm && out_norm) {
            type = KVI_TYPE_Q8_0;
            data[n] = tmp[n] = calloc(1, 2 * 34);
        }
        gguf_writer_add_tensor(w, t->name, type, t->n_dims, ne);
        n++;
    }
    if (mod->rope_freqs) {
        int64_t ne[1] = { 4 };
        gguf_writer_add_tensor(w, "rope_freqs.weight", KVI_TYPE_F32, 1, ne);
        float *f = malloc(4 * sizeof *f);
        for (int j = 0; j < 4; j++) f[j] = 1.0f + (float)j;
        data[n] = tmp[n] = f;
        n++;
    }
    for (int l = 0; mod->biases && l < 5; l++) {
        static const char *const bn[3] = { "attn_q", "attn_k", "attn_v" };
        for (int b = 0; b < 3; b++) {
            char bname[64];
            snprintf(bname, sizeof bname, "blk.%d.%s.bias", l, bn[b]);
            int64_t ne[1] = { b == 0 ? 64 : 32 };
            gguf_writer_add_tensor(w, bname, KVI_TYPE_F32, 1, ne);
            float *f = malloc((size_t)ne[0] * sizeof *f);
            for (int j = 0; j < ne[0]; j++) f[j] = bias_val(l * 3 + b, j);
            data[n] = tmp[n] = f;
            n++;
        }
    }
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    int rc = f ? gguf_writer_write_header(w, f, &err) : -1;
    for (int64_t i = 0; rc == 0 && i < n; i++) rc = gguf_writer_write_tensor(w, f, i, data[i], &err);
    if (f) fclose(f);
    if (rc) fprintf(stderr, "write_gguf %s: %s\n", name, err.msg);
    for (int64_t i = 0; i < n; i++) free(tmp[i]);
    gguf_writer_free(w);
    gguf_close(src);
    return rc ? NULL : path;
}

static void test_gguf_variants(void)
{
    kvi_error err = { 0 };
    kvi_model *ref = kvi_model_load(shared_path("models/stories260K.gguf"), NULL, &err);
    CHECK(ref != NULL, "reference: %s", err.msg);
    if (!ref) return;

    /* Unchanged rewrite loads: the writer path itself is sound. */
    gguf_mod none = { 0 };
    const char *path = write_gguf("same.gguf", &none);
    kvi_model *m = path ? kvi_model_load(path, NULL, &err) : NULL;
    CHECK(m != NULL && tensor_equal(&m->layers[2].wk, &ref->layers[2].wk), "rewrite: %s", err.msg);
    kvi_model_free(m);

    /* F16 / BF16 vectors become f32 copies with the exact values; rope_freqs is bound. */
    gguf_mod half = { .f16_norms = true, .rope_freqs = true };
    path = write_gguf("f16norm.gguf", &half);
    m = path ? kvi_model_load(path, NULL, &err) : NULL;
    CHECK(m != NULL, "f16 norms: %s", err.msg);
    if (m) {
        bool ok = true;
        for (int j = 0; j < 64; j++)
            ok = ok && m->output_norm[j] == norm_vals[j % 4] && m->layers[0].attn_norm[j] == norm_vals[j % 4];
        CHECK(ok, "converted norms differ from the hand-encoded values");
        CHECK(memcmp(m->layers[1].attn_norm, ref->layers[1].attn_norm, 64 * 4) == 0, "other norms kept");
        CHECK(m->rope_freqs && m->rope_freqs[0] == 1.0f && m->rope_freqs[3] == 4.0f, "rope_freqs");
    }
    kvi_model_free(m);

    /* qwen2: neox RoPE, biases bound, its own hyper-parameters. */
    gguf_mod qwen = { .arch = "qwen2", .biases = true };
    path = write_gguf("qwen2.gguf", &qwen);
    m = path ? kvi_model_load(path, NULL, &err) : NULL;
    CHECK(m != NULL, "qwen2: %s", err.msg);
    if (m) {
        CHECK(strcmp(m->arch, "qwen2") == 0 && m->rope_neox && m->rope_theta == 1000000.0f &&
                  fabsf(m->rms_eps - 1e-6f) < 1e-12f,
              "qwen2 hparams");
        CHECK(m->layers[3].bq && m->layers[3].bk && m->layers[3].bv && m->layers[3].bq[5] == bias_val(9, 5) &&
                  m->layers[3].bv[31] == bias_val(11, 31),
              "qwen2 biases");
        CHECK(ref->layers[3].bq == NULL, "llama file has no biases");
    }
    kvi_model_free(m);

    struct {
        const char *what;
        gguf_mod mod;
        int code;
        const char *msg;
    } bad[] = {
        { "missing tensor", { .skip_tensor = "blk.4.ffn_up.weight" }, KVI_E_FORMAT, "blk.4.ffn_up.weight" },
        { "missing norm", { .skip_tensor = "output_norm.weight" }, KVI_E_FORMAT, "output_norm.weight" },
        { "missing embedding", { .skip_tensor = "token_embd.weight" }, KVI_E_FORMAT, "token_embd.weight" },
        { "wrong shape", { .half_tensor = "blk.2.attn_k.weight" }, KVI_E_FORMAT, "blk.2.attn_k.weight" },
        { "wrong output rows", { .half_tensor = "output.weight" }, KVI_E_FORMAT, "output.weight" },
        { "missing block_count", { .drop_key = "llama.block_count" }, KVI_E_FORMAT, "llama.block_count" },
        { "missing eps", { .drop_key = "llama.attention.layer_norm_rms_epsilon" }, KVI_E_FORMAT, "epsilon" },
        { "missing architecture",
          { .drop_key = "general.architecture" },
          KVI_E_FORMAT,
          "general.architecture" },
        { "unknown architecture", { .arch = "mamba" }, KVI_E_UNSUPPORTED, "mamba" },
        { "quantised vector", { .q8_norm = true }, KVI_E_UNSUPPORTED, "output_norm.weight" },
        { "no tokenizer", { .drop_key = "tokenizer.ggml.tokens" }, 0, "" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_gguf("bad.gguf", &bad[i].mod);
        CHECK(path != NULL, "%s: write", bad[i].what);
        err.code = 0;
        err.msg[0] = 0;
        m = path ? kvi_model_load(path, NULL, &err) : NULL;
        if (bad[i].code)
            CHECK(m == NULL && err.code == bad[i].code && msg_has(&err, bad[i].msg), "%s: code %d '%s'",
                  bad[i].what, err.code, err.msg);
        else
            CHECK(m == NULL && err.code < 0 && err.msg[0], "%s: code %d '%s'", bad[i].what, err.code,
                  err.msg);
        kvi_model_free(m);
    }
    kvi_model_free(ref);
}

int main(void)
{
    test_stories();
    test_aidreams();
    test_hf();
    test_qtest();
    test_staged_load();
    test_vocab();
    test_gguf_variants();
    test_corrupt_llama2c();
    test_corrupt_hf();
    return test_main_end();
}
