/*
 * lora.c — reading a LoRA adapter GGUF and binding its pairs to a model (lora.h).
 *
 * The file is untrusted: the keys general.type ("adapter"), general.architecture
 * (the model's), adapter.type ("lora") and adapter.lora.alpha (f32, absent: 0) are
 * checked as llama.cpp checks them; every tensor is "<base>.lora_a" or "<base>.lora_b"
 * of a matrix "blk.L.<name>.weight" the model has (norm tensors are skipped), each
 * pair complete, its shapes those of the base matrix, its bytes inside the file.
 * Data structure: pairs [n_layers][LORA_N_MAT], filled as tensors are met; a second
 * tensor for the same slot is an error.
 */
#include "model/lora.h"

#include "base/error.h"
#include "formats/quant.h"
#include "kernels/lora_bt.h"

#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

/* GGUF names of the matrices, in lora_mat order */
static const char *const mat_names[LORA_N_MAT] = {
    "attn_q", "attn_k",   "attn_v",        "attn_output", "ffn_gate",
    "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
};

const char *lora_mat_name(lora_mat w) { return w >= 0 && w < LORA_N_MAT ? mat_names[w] : ""; }

static bool ends_with(const char *s, const char *suf)
{
    const size_t n = strlen(s), k = strlen(suf);
    return n >= k && !memcmp(s + n - k, suf, k);
}

const kern_tensor *lora_base(const struct kvi_model *m, int l, lora_mat w, int64_t *per_out)
{
    const model_layer *L = &m->layers[l];
    const kern_tensor *t = NULL;
    switch (w) {
    case LORA_WQ: t = &L->wq; break;
    case LORA_WK: t = &L->wk; break;
    case LORA_WV: t = &L->wv; break;
    case LORA_WO: t = &L->wo; break;
    case LORA_GATE: t = &L->w_gate; break;
    case LORA_UP: t = &L->w_up; break;
    case LORA_DOWN: t = &L->w_down; break;
    case LORA_EXP_GATE: t = L->moe && !L->exp_gate_up ? &L->exp_gate : NULL; break;
    case LORA_EXP_UP: t = L->moe && !L->exp_gate_up ? &L->exp_up : NULL; break;
    case LORA_EXP_DOWN: t = L->moe ? &L->exp_down : NULL; break;
    default: break;
    }
    if (!t || !t->data) return NULL;
    if (m->mla_kv_rank > 0 && w <= LORA_WV) return NULL; /* latent attention: not these products */
    const bool exp = w >= LORA_EXP_GATE;
    if (exp && (m->n_expert <= 0 || t->n_out % m->n_expert)) return NULL;
    *per_out = exp ? t->n_out / m->n_expert : t->n_out;
    return t;
}

/* "blk.L.<name>.weight" into (l, w); false when it names no matrix lora.h knows */
static bool parse_base(const struct kvi_model *m, const char *base, int *l, lora_mat *w)
{
    int layer = -1, used = 0;
    if (sscanf(base, "blk.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 || layer >= m->n_layers)
        return false;
    const char *rest = base + used;
    for (int i = 0; i < LORA_N_MAT; i++) {
        const size_t k = strlen(mat_names[i]);
        if (!strncmp(rest, mat_names[i], k) && !strcmp(rest + k, ".weight")) {
            *l = layer;
            *w = (lora_mat)i;
            return true;
        }
    }
    return false;
}

static bool type_ok(kvi_type t, int64_t n_in)
{
    return t == KVI_TYPE_F32 || t == KVI_TYPE_F16 || t == KVI_TYPE_BF16 ||
           (t == KVI_TYPE_Q8_0 && n_in % 32 == 0);
}

/* One half of a pair: tensor t as the matrix [ne1 * ne2][ne0], its bytes checked. */
static int bind_half(const gguf_tensor *t, kern_tensor *out, kvi_error *err)
{
    if (t->n_dims < 2 || t->n_dims > 3 || t->ne[3] != 1)
        return err_set(err, KVI_E_FORMAT, "lora: tensor '%s' has %u dimensions (want 2, or 3 for experts)",
                       t->name, t->n_dims);
    for (int d = 0; d < 3; d++)
        if (t->ne[d] < 1 || t->ne[d] > MODEL_MAX_FFN * (int64_t)MODEL_MAX_EXPERTS)
            return err_set(err, KVI_E_FORMAT, "lora: tensor '%s': dimension %d out of range", t->name, d);
    if (!type_ok(t->type, t->ne[0]))
        return err_set(err, KVI_E_FORMAT, "lora: tensor '%s': type %s not supported (F32, F16, BF16, Q8_0)",
                       t->name, kvi_type_name(t->type) ? kvi_type_name(t->type) : "?");
    const int64_t rows = t->ne[1] * t->ne[2];
    const size_t rb = quant_row_bytes(t->type, t->ne[0]);
    if (rb == 0 || (size_t)rows > t->nbytes / rb || !t->data)
        return err_set(err, KVI_E_FORMAT, "lora: tensor '%s': data shorter than its shape", t->name);
    *out = (kern_tensor){ .data = t->data, .type = t->type, .n_in = t->ne[0], .n_out = rows };
    return 0;
}

/* Checks a complete pair (a: ga, b: gb) against base matrix l, w and binds it. */
int lora_bind_pair(struct kvi_lora *a, int l, lora_mat w, const gguf_tensor *ga, const gguf_tensor *gb,
                     kvi_error *err)
{
    const struct kvi_model *m = a->m;
    int64_t per_out = 0;
    const kern_tensor *W = lora_base(m, l, w, &per_out);
    const char *name = ga->name;
    if (!W)
        return err_set(err, KVI_E_INVALID,
                       "lora: LoRA tensor '%s' does not exist in base model (hint: maybe wrong base model?)",
                       name);
    const bool exp = w >= LORA_EXP_GATE;
    const int64_t E = exp ? m->n_expert : 1;
    lora_pair *p = &a->pairs[(size_t)l * LORA_N_MAT + w];
    int rc = bind_half(ga, &p->a, err);
    if (!rc) rc = bind_half(gb, &p->b, err);
    if (rc) return rc;
    const int64_t r = gb->ne[0];
    if (ga->ne[1] != r)
        return err_set(err, KVI_E_FORMAT,
                       "lora: tensor '%s': lora_a's rank %lld != lora_b's %lld (lora_a "
                       "tensor is not transposed?)",
                       name, (long long)ga->ne[1], (long long)r);
    if (r > LORA_MAX_RANK)
        return err_set(err, KVI_E_FORMAT, "lora: tensor '%s': rank %lld above %d", name, (long long)r,
                       LORA_MAX_RANK);
    if (ga->ne[0] != W->n_in || gb->ne[1] != per_out || ga->ne[2] != E || gb->ne[2] != E)
        return err_set(
            err, KVI_E_FORMAT,
            "lora: tensor '%s' has incorrect shape (hint: maybe wrong base model?): lora_a {%lld, %lld, "
            "%lld}, lora_b {%lld, %lld, %lld}, base {%lld, %lld, %lld}",
            name, (long long)ga->ne[0], (long long)ga->ne[1], (long long)ga->ne[2], (long long)gb->ne[0],
            (long long)gb->ne[1], (long long)gb->ne[2], (long long)W->n_in, (long long)per_out, (long long)E);
    p->rank = (int)r;
    p->ar = a->alpha != 0.0f ? a->alpha / (float)r : 1.0f;
    /* bt: E expert parts of kern_lora_bt_floats(r, per_out) from B's rows (each [r], widened exactly) */
    float row[LORA_MAX_RANK];
    const size_t part = kern_lora_bt_floats((int)r, per_out);
    if (!(p->bt = calloc((size_t)E * part, sizeof(float))))
        return err_set(err, KVI_E_NOMEM, "lora: out of memory for tensor '%s'", name);
    for (int64_t e = 0; e < E; e++)
        for (int64_t j = 0; j < per_out; j++) {
            if (kern_tensor_get_row(&p->b, e * per_out + j, row))
                return err_set(err, KVI_E_FORMAT, "lora: tensor '%s': cannot read lora_b", name);
            for (int k = 0; k < (int)r; k++) p->bt[(size_t)e * part + kern_lora_bt_at((int)r, j, k)] = row[k];
        }
    if (p->rank > a->max_rank) a->max_rank = p->rank;
    a->n_pairs++;
    return 0;
}

static int check_keys(const struct kvi_lora *a, const gguf_ctx *g, float *alpha, kvi_error *err)
{
    const char *type = gguf_get_str(g, "general.type");
    if (!type || strcmp(type, "adapter")) {
        char got[64];
        model_copy_str(got, sizeof got, type);
        return err_set(err, KVI_E_FORMAT, "lora: expect general.type to be 'adapter', but got: %s", got);
    }
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch || strcmp(arch, a->m->arch)) {
        char got[64];
        model_copy_str(got, sizeof got, arch);
        return err_set(err, KVI_E_INVALID,
                       "lora: model arch and LoRA arch mismatch (model '%s', adapter '%s')", a->m->arch, got);
    }
    const char *at = gguf_get_str(g, "adapter.type");
    if (!at || strcmp(at, "lora")) {
        char got[64];
        model_copy_str(got, sizeof got, at);
        return err_set(err, KVI_E_FORMAT, "lora: expect adapter.type to be 'lora', but got: %s", got);
    }
    double al = 0.0;
    const int rc = gguf_get_float(g, "adapter.lora.alpha", &al, err);
    if (rc > 0 || rc < -1) return rc;
    if (rc == 0 && !(al > -1e30 && al < 1e30))
        return err_set(err, KVI_E_FORMAT, "lora: adapter.lora.alpha is not a finite number");
    *alpha = rc == 0 ? (float)al : 0.0f;
    return 0;
}

/* The tensor of g named base + suffix, or NULL */
static const gguf_tensor *find_half(const gguf_ctx *g, const char *base, const char *suffix)
{
    char name[320];
    if (snprintf(name, sizeof name, "%s%s", base, suffix) >= (int)sizeof name) return NULL;
    return gguf_find_tensor(g, name);
}

/* Binds every tensor of a->g (see the top of this file). */
static int bind_all(struct kvi_lora *a, kvi_error *err)
{
    const gguf_ctx *g = a->g;
    const int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (ends_with(t->name, "_norm.weight") || strstr(t->name, "_norm.weight.lora_"))
            continue; /* llama.cpp skips norms */
        const bool is_a = ends_with(t->name, ".lora_a");
        if (!is_a && !ends_with(t->name, ".lora_b"))
            return err_set(err, KVI_E_FORMAT, "lora: tensor '%s' is neither a lora_a nor a lora_b", t->name);
        char base[256];
        const size_t bl = strlen(t->name) - strlen(".lora_a");
        if (bl >= sizeof base) return err_set(err, KVI_E_FORMAT, "lora: tensor name '%s' too long", t->name);
        memcpy(base, t->name, bl);
        base[bl] = '\0';
        const gguf_tensor *other = find_half(g, base, is_a ? ".lora_b" : ".lora_a");
        if (!other)
            return err_set(err, KVI_E_FORMAT, "lora: tensor '%s' has no %s", t->name,
                           is_a ? "lora_b" : "lora_a");
        if (!is_a) continue; /* the pair is bound from its lora_a */
        int l;
        lora_mat w;
        if (!parse_base(a->m, base, &l, &w))
            return err_set(
                err, KVI_E_INVALID,
                "lora: LoRA tensor '%s' does not exist in base model or is not supported here "
                "(adapted: blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}[_exps])",
                base);
        if (a->pairs[(size_t)l * LORA_N_MAT + w].a.data)
            return err_set(err, KVI_E_FORMAT, "lora: tensor '%s' appears twice", t->name);
        const int rc = lora_bind_pair(a, l, w, t, other, err);
        if (rc) return rc;
    }
    if (a->n_pairs == 0) return err_set(err, KVI_E_FORMAT, "lora: the adapter adapts no matrix");
    return 0;
}

struct kvi_lora *lora_alloc(const struct kvi_model *m, const char *path)
{
    struct kvi_lora *a = calloc(1, sizeof *a);
    if (a) a->pairs = calloc((size_t)m->n_layers * LORA_N_MAT, sizeof *a->pairs);
    if (!a || !a->pairs) {
        if (a) free(a);
        return NULL;
    }
    static uint64_t next_id;
    a->m = m;
    a->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    model_copy_str(a->path, sizeof a->path, path);
    size_t pl = strlen(a->path);
    while (pl > 1 && a->path[pl - 1] == '/') a->path[--pl] = '\0'; /* a folder's trailing slashes */
    const char *slash = strrchr(a->path, '/'), *base = slash ? slash + 1 : a->path;
    size_t nl = strlen(base);
    if (nl > 5 && !strcmp(base + nl - 5, ".gguf")) nl -= 5;
    if (nl >= sizeof a->name) nl = sizeof a->name - 1;
    memcpy(a->name, base, nl);
    a->name[nl] = '\0';
    return a;
}

static int lora_finish(const struct kvi_model *m, gguf_ctx *g, const char *path, struct kvi_lora **out,
                       kvi_error *err)
{
    *out = NULL;
    struct kvi_lora *a = lora_alloc(m, path);
    if (!a) {
        gguf_close(g);
        return err_set(err, KVI_E_NOMEM, "lora: out of memory");
    }
    a->g = g;
    int rc = check_keys(a, g, &a->alpha, err);
    if (!rc) rc = bind_all(a, err);
    if (rc) {
        lora_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

int lora_load(const struct kvi_model *m, const char *path, struct kvi_lora **out, kvi_error *err)
{
    *out = NULL;
    if (!m || !path || !m->layers) return err_set(err, KVI_E_INVALID, "lora: no model or no path");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return lora_load_peft(m, path, out, err);
    gguf_ctx *g = NULL;
    const int rc = gguf_open(path, false, &g, err);
    if (rc) return rc;
    return lora_finish(m, g, path, out, err);
}

int lora_load_mem(const struct kvi_model *m, const void *buf, size_t len, struct kvi_lora **out,
                  kvi_error *err)
{
    *out = NULL;
    if (!m || !buf || !m->layers) return err_set(err, KVI_E_INVALID, "lora: no model or no data");
    gguf_ctx *g = NULL;
    const int rc = gguf_open_mem(buf, len, &g, err);
    if (rc) return rc;
    return lora_finish(m, g, "(memory)", out, err);
}

void lora_free(struct kvi_lora *a)
{
    if (!a) return;
    gguf_close(a->g);
    free(a->own);
    for (int i = 0; a->pairs && a->m && i < a->m->n_layers * LORA_N_MAT; i++) free(a->pairs[i].bt);
    free(a->pairs);
    free(a);
}

kvi_lora *kvi_lora_load(const kvi_model *m, const char *path, kvi_error *err)
{
    struct kvi_lora *a = NULL;
    (void)lora_load(m, path, &a, err);
    return a;
}

int kvi_lora_free(kvi_lora *a)
{
    if (a && a->n_users > 0) return KVI_E_INVALID;
    lora_free(a);
    return 0;
}

const char *kvi_lora_path(const kvi_lora *a) { return a ? a->path : ""; }
const char *kvi_lora_name(const kvi_lora *a) { return a ? a->name : ""; }

int kvi_lora_set_name(kvi_lora *a, const char *name)
{
    const size_t n = name ? strlen(name) : 0;
    if (!a || n == 0 || n >= sizeof a->name) return KVI_E_INVALID;
    for (size_t i = 0; i < n; i++)
        if (name[i] <= ' ' || name[i] > '~' || name[i] == '/' || name[i] == '=') return KVI_E_INVALID;
    memcpy(a->name, name, n + 1);
    return 0;
}
int kvi_lora_rank(const kvi_lora *a) { return a ? a->max_rank : 0; }
float kvi_lora_alpha(const kvi_lora *a) { return a ? a->alpha : 0.0f; }
