/*
 * quantize.c — a GGUF file written again in another weight type (quantize.h).
 *
 * Flow: open the input (mapped); order its tensors as llama-quantize does
 * (quantize_mix.h); choose every tensor's type first (the counters of the mix
 * advance in that pass, as llama.cpp's do); write the header (input keys minus the
 * split keys, then general.quantization_version = 2, general.file_type and the
 * quantize.imatrix.* keys at the end, as llama.cpp appends them); then each
 * tensor: copied when its type stays, else converted to f32 (F32 input is used in
 * place) and quantised row by row on the thread pool (quant_ggml.h).
 * Buffers: f32 [nelements] for non-F32 input, out [row bytes * rows], both grown
 * to the largest tensor and reused. Invariants: the output bytes do not depend on
 * the thread count (rows are independent); nothing is printed.
 */
#include "tools/quantize.h"

#include "base/error.h"
#include "base/threadpool.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "formats/quant_ggml.h"
#include "tools/quantize_mix.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int ftype;
} FTYPES[] = {
    { "Q4_0", QFT_Q4_0 },       { "Q4_1", QFT_Q4_1 },       { "MXFP4_MOE", QFT_MXFP4_MOE },
    { "MXFP4", QFT_MXFP4_MOE }, { "Q5_0", QFT_Q5_0 },       { "Q5_1", QFT_Q5_1 },
    { "IQ2_XXS", QFT_IQ2_XXS }, { "IQ2_XS", QFT_IQ2_XS },   { "IQ2_S", QFT_IQ2_S },
    { "IQ2_M", QFT_IQ2_M },     { "IQ1_S", QFT_IQ1_S },     { "IQ1_M", QFT_IQ1_M },
    { "TQ1_0", QFT_TQ1_0 },     { "TQ2_0", QFT_TQ2_0 },     { "Q2_K", QFT_Q2_K },
    { "Q2_K_S", QFT_Q2_K_S },   { "IQ3_XXS", QFT_IQ3_XXS }, { "IQ3_S", QFT_IQ3_S },
    { "IQ3_M", QFT_IQ3_M },     { "Q3_K", QFT_Q3_K_M },     { "IQ3_XS", QFT_IQ3_XS },
    { "Q3_K_S", QFT_Q3_K_S },   { "Q3_K_M", QFT_Q3_K_M },   { "Q3_K_L", QFT_Q3_K_L },
    { "IQ4_NL", QFT_IQ4_NL },   { "IQ4_XS", QFT_IQ4_XS },   { "Q4_K", QFT_Q4_K_M },
    { "Q4_K_S", QFT_Q4_K_S },   { "Q4_K_M", QFT_Q4_K_M },   { "Q5_K", QFT_Q5_K_M },
    { "Q5_K_S", QFT_Q5_K_S },   { "Q5_K_M", QFT_Q5_K_M },   { "Q6_K", QFT_Q6_K },
    { "Q8_0", QFT_Q8_0 },       { "F16", QFT_F16 },         { "BF16", QFT_BF16 },
    { "F32", QFT_F32 },
};

int quantize_ftype_from_name(const char *s)
{
    for (size_t i = 0; i < sizeof FTYPES / sizeof FTYPES[0]; i++)
        if (!strcasecmp(s, FTYPES[i].name)) return FTYPES[i].ftype;
    return -1;
}

kvi_type quantize_ftype_default(int ft)
{
    static const struct {
        int ft;
        kvi_type t;
    } map[] = {
        { QFT_Q4_0, KVI_TYPE_Q4_0 },     { QFT_Q4_1, KVI_TYPE_Q4_1 },       { QFT_Q5_0, KVI_TYPE_Q5_0 },
        { QFT_Q5_1, KVI_TYPE_Q5_1 },     { QFT_Q8_0, KVI_TYPE_Q8_0 },       { QFT_F16, KVI_TYPE_F16 },
        { QFT_BF16, KVI_TYPE_BF16 },     { QFT_F32, KVI_TYPE_F32 },         { QFT_MXFP4_MOE, KVI_TYPE_MXFP4 },
        { QFT_Q2_K_S, KVI_TYPE_Q2_K },   { QFT_Q2_K, KVI_TYPE_Q2_K },       { QFT_IQ3_XS, KVI_TYPE_IQ3_S },
        { QFT_Q3_K_S, KVI_TYPE_Q3_K },   { QFT_Q3_K_M, KVI_TYPE_Q3_K },     { QFT_Q3_K_L, KVI_TYPE_Q3_K },
        { QFT_Q4_K_S, KVI_TYPE_Q4_K },   { QFT_Q4_K_M, KVI_TYPE_Q4_K },     { QFT_Q5_K_S, KVI_TYPE_Q5_K },
        { QFT_Q5_K_M, KVI_TYPE_Q5_K },   { QFT_Q6_K, KVI_TYPE_Q6_K },       { QFT_TQ1_0, KVI_TYPE_TQ1_0 },
        { QFT_TQ2_0, KVI_TYPE_TQ2_0 },   { QFT_IQ2_XXS, KVI_TYPE_IQ2_XXS }, { QFT_IQ2_XS, KVI_TYPE_IQ2_XS },
        { QFT_IQ2_S, KVI_TYPE_IQ2_XS },  { QFT_IQ2_M, KVI_TYPE_IQ2_S },     { QFT_IQ3_XXS, KVI_TYPE_IQ3_XXS },
        { QFT_IQ1_S, KVI_TYPE_IQ1_S },   { QFT_IQ1_M, KVI_TYPE_IQ1_M },     { QFT_IQ4_NL, KVI_TYPE_IQ4_NL },
        { QFT_IQ4_XS, KVI_TYPE_IQ4_XS }, { QFT_IQ3_S, KVI_TYPE_IQ3_S },     { QFT_IQ3_M, KVI_TYPE_IQ3_S },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].ft == ft) return map[i].t;
    return KVI_TYPE_COUNT;
}

void quantize_params_init(quantize_params *p)
{
    memset(p, 0, sizeof *p);
    p->ftype = QFT_Q4_K_M;
    p->output_type = KVI_TYPE_COUNT;
    p->embd_type = KVI_TYPE_COUNT;
}

/* ---- the model's hyper-parameters the mix reads ---------------------------- */

/* {arch}.key as an integer (first element of an array); def when absent. */
static int64_t arch_int(const gguf_ctx *g, const char *arch, const char *key, int64_t def)
{
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v;
    if (gguf_get_int(g, k, &v, NULL) == 0) return v;
    int32_t a;
    if (gguf_get_arr_i32(g, k, &a, 1, NULL) == 0) return a;
    return def;
}

static void read_hparams(const gguf_ctx *g, qmix_state *s)
{
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch) arch = "";
    s->n_layer = (int)arch_int(g, arch, "block_count", 0);
    const int64_t nh = arch_int(g, arch, "attention.head_count", 0);
    const int64_t nkv = arch_int(g, arch, "attention.head_count_kv", nh);
    s->n_gqa = nkv > 0 ? (int)(nh / nkv) : 0;
    s->n_expert = (int)arch_int(g, arch, "expert_count", 0);
    s->falcon = !strcmp(arch, "falcon");
    s->is_70b = !strcmp(arch, "llama") && s->n_layer == 80;
}

/* ---- tensor order ---------------------------------------------------------- */

static int layer_num(const char *n)
{
    int l = -1;
    if (sscanf(n, "blk.%d.", &l) != 1) l = -1;
    return l;
}

typedef struct sort_item {
    int layer; /* N of "blk.N.", -1 for the other tensors */
    const char *name;
    int64_t idx; /* in the input file */
} sort_item;

static int cmp_tensor(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* q->order: the input's tensors as llama-quantize visits them. */
static bool sort_tensors(const gguf_ctx *g, int64_t *order, int64_t n)
{
    sort_item *it = malloc((size_t)(n ? n : 1) * sizeof *it);
    if (!it) return false;
    for (int64_t i = 0; i < n; i++) {
        const char *name = gguf_tensor_at(g, i)->name;
        it[i] = (sort_item){ layer_num(name), name, i };
    }
    qsort(it, (size_t)n, sizeof *it, cmp_tensor);
    for (int64_t i = 0; i < n; i++) order[i] = it[i].idx;
    free(it);
    return true;
}

/* ---- the work on the pool --------------------------------------------------- */

typedef struct qjob {
    kvi_type type;
    const float *src; /* [ne2][ne1][ne0] */
    uint8_t *dst;     /* [ne2 * ne1] rows */
    int64_t ne0, ne1, rows;
    const float *imatrix; /* NULL or [ne2][ne0] */
} qjob;

static void qjob_run(void *ctx, int ith, int nth)
{
    const qjob *j = ctx;
    const size_t rb = quant_row_bytes(j->type, j->ne0);
    const int64_t r0 = j->rows * ith / nth, r1 = j->rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        const float *im = j->imatrix ? j->imatrix + (r / j->ne1) * j->ne0 : NULL;
        quant_ggml_rows(j->type, j->src + r * j->ne0, j->dst + (size_t)r * rb, 1, j->ne0, im);
    }
}

/* ---- the file --------------------------------------------------------------- */

typedef struct qrun {
    gguf_ctx *in;
    const quantize_params *p;
    int64_t *order;  /* [n] tensor indices in write order */
    kvi_type *types; /* [n] output type, by position in order */
    int64_t n;
    float *f32; /* [cap_f32] */
    size_t cap_f32;
    uint8_t *out; /* [cap_out] */
    size_t cap_out;
    tpool *pool;
} qrun;

static bool grow(void **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return true;
    void *p = realloc(*buf, need);
    if (!p) return false;
    *buf = p;
    *cap = need;
    return true;
}

static bool skip_key(const char *k, bool imatrix)
{
    return !strcmp(k, "general.quantization_version") || !strcmp(k, "general.file_type") ||
           !strcmp(k, "split.no") || !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count") ||
           (imatrix && !strncmp(k, "quantize.imatrix.", 17));
}

static int write_keys(gguf_writer *w, const qrun *q)
{
    const quantize_params *p = q->p;
    const imatrix_data *im = p->imatrix;
    int rc = 0;
    for (int64_t i = 0; i < gguf_n_kv(q->in) && !rc; i++) {
        const char *k = gguf_kv_key(q->in, i);
        if (!skip_key(k, im != NULL)) rc = gguf_writer_copy_kv(w, q->in, k);
    }
    if (!rc) rc = gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", (uint32_t)p->ftype);
    if (!rc && im) {
        /* llama-quantize passes these as 127-character overrides */
        char s[128];
        snprintf(s, sizeof s, "%s", p->imatrix_path ? p->imatrix_path : "");
        rc = gguf_writer_set_str(w, "quantize.imatrix.file", s);
        if (!rc && im->dataset) {
            snprintf(s, sizeof s, "%s", im->dataset);
            rc = gguf_writer_set_str(w, "quantize.imatrix.dataset", s);
        }
        if (!rc) rc = gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n_entries);
        if (!rc && im->chunk_count > 0)
            rc = gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", (uint32_t)im->chunk_count);
    }
    return rc;
}

/* The imatrix of tensor t, or NULL; an error for a size that does not fit. */
static int find_imatrix(const qrun *q, const gguf_tensor *t, const float **out, kvi_error *err)
{
    *out = NULL;
    if (!q->p->imatrix) return 0;
    const imatrix_entry *e = imatrix_find(q->p->imatrix, t->name);
    if (!e) return 0;
    if (e->n == t->ne[0] * t->ne[2]) {
        *out = e->values;
        return 0;
    }
    if (!strcmp(t->name, "token_embd.weight") || !strcmp(t->name, "per_layer_token_embd.weight")) return 0;
    return err_set(err, KVI_E_FORMAT, "quantize: imatrix size %lld differs from tensor size %lld for %s",
                   (long long)e->n, (long long)(t->ne[0] * t->ne[2]), t->name);
}

/* Tensor t as f32: its own data (F32) or converted into q->f32. */
static int as_f32(qrun *q, const gguf_tensor *t, int64_t nel, const float **out, kvi_error *err)
{
    if (t->type == KVI_TYPE_F32) {
        *out = t->data;
        return 0;
    }
    if (t->type != KVI_TYPE_F16 && t->type != KVI_TYPE_BF16 && !q->p->allow_requantize)
        return err_set(err, KVI_E_UNSUPPORTED, "quantize: requantizing from type %s is disabled (%s)",
                       kvi_type_name(t->type), t->name);
    if (!grow((void **)&q->f32, &q->cap_f32, (size_t)nel * sizeof(float)))
        return err_set(err, KVI_E_NOMEM, "quantize: out of memory for %s", t->name);
    const size_t rb = quant_row_bytes(t->type, t->ne[0]);
    for (int64_t r = 0; r < nel / t->ne[0]; r++)
        quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, q->f32 + r * t->ne[0],
                          t->ne[0]);
    *out = q->f32;
    return 0;
}

static int write_tensor(qrun *q, gguf_writer *w, FILE *f, int64_t k, kvi_error *err)
{
    const gguf_tensor *t = gguf_tensor_at(q->in, q->order[k]);
    const kvi_type nt = q->types[k];
    if (q->p->progress) q->p->progress(q->p->progress_user, (int)k, (int)q->n, t->name, t->type, nt);
    if (nt == t->type) return gguf_writer_write_tensor(w, f, k, t->data, err);
    const float *im = NULL;
    int rc = find_imatrix(q, t, &im, err);
    if (!im && !rc && qmix_requires_imatrix(t->name, nt, q->p->ftype))
        rc = err_set(err, KVI_E_INVALID, "quantize: missing importance matrix for %s in type %s", t->name,
                     kvi_type_name(nt));
    if (rc) return rc;
    if (!quant_ggml_supported(nt))
        return err_set(err, KVI_E_UNSUPPORTED, "quantize: writing type %s is not implemented (%s)",
                       kvi_type_name(nt), t->name);
    const int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    const float *src = NULL;
    if ((rc = as_f32(q, t, nel, &src, err))) return rc;
    const int64_t rows = nel / t->ne[0];
    if (!grow((void **)&q->out, &q->cap_out, quant_row_bytes(nt, t->ne[0]) * (size_t)rows))
        return err_set(err, KVI_E_NOMEM, "quantize: out of memory for %s", t->name);
    qjob j = { nt, src, q->out, t->ne[0], t->ne[1], rows, im };
    tpool_run(q->pool, qjob_run, &j);
    return gguf_writer_write_tensor(w, f, k, q->out, err);
}

/* Chooses every tensor's type (in order) and declares it to the writer. */
static int plan(qrun *q, gguf_writer *w, kvi_error *err)
{
    const quantize_params *p = q->p;
    qmix_state s = { .p = p, .has_imatrix = p->imatrix != NULL, .tied = true };
    read_hparams(q->in, &s);
    regex_t re[64];
    if (p->n_overrides > 64)
        return err_set(err, KVI_E_INVALID, "quantize: more than 64 --tensor-type patterns");
    int nre = 0, rc = 0;
    for (; nre < p->n_overrides; nre++) {
        char pat[256];
        snprintf(pat, sizeof pat, "%s", p->overrides[nre].pattern);
        for (char *c = pat; *c; c++) *c = (char)tolower((unsigned char)*c);
        if (regcomp(&re[nre], pat, REG_EXTENDED | REG_NOSUB)) {
            rc = err_set(err, KVI_E_INVALID, "quantize: bad --tensor-type pattern '%s'",
                         p->overrides[nre].pattern);
            break;
        }
    }
    s.re = re;
    for (int64_t k = 0; k < q->n; k++) qmix_note(&s, gguf_tensor_at(q->in, q->order[k])->name);
    for (int64_t k = 0; k < q->n && !rc; k++) {
        const gguf_tensor *t = gguf_tensor_at(q->in, q->order[k]);
        rc = qmix_type(&s, t->name, t->ne, t->n_dims, t->type, &q->types[k], err);
        if (!rc && quant_row_bytes(q->types[k], t->ne[0]) == 0)
            rc = err_set(err, KVI_E_UNSUPPORTED, "quantize: %s: row of %lld in %s", t->name,
                         (long long)t->ne[0], kvi_type_name(q->types[k]));
        if (!rc && !p->imatrix && qmix_allows(p, t->name, t->n_dims) &&
            qmix_requires_imatrix(t->name, q->types[k], p->ftype))
            rc = err_set(err, KVI_E_INVALID,
                         "quantize: this quantization requires an importance matrix (%s in %s)", t->name,
                         kvi_type_name(q->types[k]));
        if (!rc) rc = gguf_writer_add_tensor(w, t->name, q->types[k], t->n_dims, t->ne);
    }
    for (int i = 0; i < nre; i++) regfree(&re[i]);
    return rc;
}

static int run(qrun *q, const char *out_path, kvi_error *err)
{
    gguf_writer *w = gguf_writer_create();
    if (!w) return err_set(err, KVI_E_NOMEM, "quantize: out of memory");
    int rc = write_keys(w, q);
    if (rc && !err->msg[0]) err_set(err, rc, "quantize: cannot copy the metadata");
    if (!rc) rc = plan(q, w, err);
    FILE *f = NULL;
    if (!rc && !(f = fopen(out_path, "wb")))
        rc = err_set(err, KVI_E_IO, "quantize: cannot create %s", out_path);
    if (!rc) rc = gguf_writer_write_header(w, f, err);
    for (int64_t k = 0; k < q->n && !rc; k++) rc = write_tensor(q, w, f, k, err);
    if (f && fclose(f) && !rc) rc = err_set(err, KVI_E_IO, "quantize: cannot write %s", out_path);
    if (rc && f) remove(out_path);
    gguf_writer_free(w);
    return rc;
}

int quantize_file(const char *in_path, const char *out_path, const quantize_params *p, kvi_error *err)
{
    kvi_error local = { 0 };
    if (!err) err = &local;
    err->msg[0] = '\0';
    if (quantize_ftype_default(p->ftype) == KVI_TYPE_COUNT)
        return err_set(err, KVI_E_INVALID, "quantize: invalid file type %d", p->ftype);
    qrun q = { .p = p };
    int rc = gguf_open(in_path, true, &q.in, err);
    if (rc) return rc;
    q.n = gguf_n_tensors(q.in);
    q.order = malloc((size_t)(q.n ? q.n : 1) * sizeof *q.order);
    q.types = malloc((size_t)(q.n ? q.n : 1) * sizeof *q.types);
    q.pool = tpool_create(p->nthread);
    if (!q.order || !q.types || !q.pool) rc = err_set(err, KVI_E_NOMEM, "quantize: out of memory");
    if (!rc) {
        rc = sort_tensors(q.in, q.order, q.n) ? run(&q, out_path, err)
                                              : err_set(err, KVI_E_NOMEM, "quantize: out of memory");
    }
    tpool_free(q.pool);
    free(q.order);
    free(q.types);
    free(q.f32);
    free(q.out);
    gguf_close(q.in);
    return rc;
}
