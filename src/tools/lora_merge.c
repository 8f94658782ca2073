/*
 * lora_merge.c — base model + LoRA adapters written as one GGUF (lora_merge.h).
 *
 * Every key and tensor of the base file is copied as it is, except each matrix some
 * adapter adapts: it is written as F32 (or the type asked for, quantised row by row
 * with the reference quantiser from the merged F32 rows), row j of expert e (e = 0 for
 * a 2-D matrix)
 *   W'[e][j] = W[e][j] + sum_k s_k * sum_i B_k[e][j][i] * A_k[e][i]    (A_k [r][n_in])
 * accumulated in double, s_k = scale_k * alpha_k / r_k (lora.h). A and B of the pair
 * are dequantised once per matrix: A [E * r][n_in], B [E * n_out][r] floats.
 */
#include "tools/lora_merge.h"

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "model/lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The adapted matrix named `name` as (layer, matrix), or false */
static bool adapted(const struct kvi_model *m, struct kvi_lora *const *ad, int n, const char *name, int *l,
                    lora_mat *w)
{
    for (int li = 0; li < m->n_layers; li++)
        for (int wi = 0; wi < LORA_N_MAT; wi++) {
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", li, lora_mat_name((lora_mat)wi));
            if (strcmp(nm, name)) continue;
            for (int k = 0; k < n; k++)
                if (lora_pair_of(ad[k], li, (lora_mat)wi)->a.data) {
                    *l = li;
                    *w = (lora_mat)wi;
                    return true;
                }
            return false;
        }
    return false;
}

/* t's rows dequantised into float [rows][n_in] (malloc'd), or NULL */
static float *dequant_all(const kern_tensor *t)
{
    float *f = malloc((size_t)t->n_out * (size_t)t->n_in * sizeof *f);
    const size_t rb = quant_row_bytes(t->type, t->n_in);
    for (int64_t j = 0; f && j < t->n_out; j++)
        quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)j * rb, f + (size_t)j * t->n_in,
                          t->n_in);
    return f;
}

/* The merged F32 data of tensor t (layer l, matrix w) into out [rows][n_in] */
static int merge_tensor(const gguf_tensor *t, struct kvi_lora *const *ad, const float *scales, int n, int l,
                        lora_mat w, float *out)
{
    const int64_t n_in = t->ne[0], rows = t->ne[1] * t->ne[2], E = t->ne[2], per = t->ne[1];
    const size_t rb = quant_row_bytes(t->type, n_in);
    for (int64_t j = 0; j < rows; j++)
        quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)j * rb, out + (size_t)j * n_in, n_in);
    for (int k = 0; k < n; k++) {
        const lora_pair *p = lora_pair_of(ad[k], l, w);
        if (!p->a.data) continue;
        float *A = dequant_all(&p->a), *B = dequant_all(&p->b);
        if (!A || !B) {
            free(A);
            free(B);
            return KVI_E_NOMEM;
        }
        const double s = (double)scales[k] * p->ar;
        const int r = p->rank;
        for (int64_t e = 0; e < E; e++)
            for (int64_t j = 0; j < per; j++) {
                const float *b = B + (size_t)(e * per + j) * r;
                float *o = out + (size_t)(e * per + j) * n_in;
                for (int64_t c = 0; c < n_in; c++) {
                    double acc = 0.0;
                    for (int i = 0; i < r; i++) acc += (double)b[i] * A[(size_t)(e * r + i) * n_in + c];
                    o[c] = (float)(o[c] + s * acc);
                }
            }
        free(A);
        free(B);
    }
    return 0;
}

/* The type merged matrix t is written in */
static kvi_type merged_type(const gguf_tensor *t, int out_type)
{
    return out_type < 0 ? t->type : (kvi_type)out_type;
}

/* rows [nr][n_in] floats quantised to type into a malloc'd buffer (*bytes), or NULL */
static void *quantise_rows(kvi_type type, const float *rows, int64_t nr, int64_t n_in, size_t *bytes)
{
    const size_t rb = quant_row_bytes(type, n_in);
    uint8_t *q = rb ? malloc((size_t)nr * rb) : NULL;
    for (int64_t j = 0; q && j < nr; j++)
        if (quant_quantize_row(type, rows + (size_t)j * (size_t)n_in, q + (size_t)j * rb, n_in)) {
            free(q);
            q = NULL;
        }
    *bytes = (size_t)nr * rb;
    return q;
}

static int write_all(const struct kvi_model *m, const gguf_ctx *g, struct kvi_lora *const *ad,
                     const float *scales, int n, int out_type, FILE *f, kvi_error *err)
{
    gguf_writer *w = gguf_writer_create();
    if (!w) return err_set(err, KVI_E_NOMEM, "lora-merge: out of memory");
    int rc = 0;
    for (int64_t i = 0; !rc && i < gguf_n_kv(g); i++) rc = gguf_writer_copy_kv(w, g, gguf_kv_key(g, i));
    const int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; !rc && i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int l;
        lora_mat mw;
        const bool merged = adapted(m, ad, n, t->name, &l, &mw);
        const kvi_type ty = merged ? merged_type(t, out_type) : t->type;
        if (merged && (quant_block_elems(ty) <= 0 || t->ne[0] % quant_block_elems(ty) != 0 ||
                       quant_row_bytes(ty, t->ne[0]) == 0)) {
            rc = err_set(err, KVI_E_UNSUPPORTED, "lora-merge: %s: rows of %lld cannot be stored as %s",
                         t->name, (long long)t->ne[0], kvi_type_name(ty) ? kvi_type_name(ty) : "that type");
            break;
        }
        rc = gguf_writer_add_tensor(w, t->name, ty, t->n_dims, t->ne);
    }
    if (rc && !err->code) err_set(err, rc, "lora-merge: cannot describe the output");
    if (!rc) rc = gguf_writer_write_header(w, f, err);
    for (int64_t i = 0; !rc && i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int l;
        lora_mat mw;
        if (!adapted(m, ad, n, t->name, &l, &mw)) {
            rc = gguf_writer_write_tensor(w, f, i, t->data, err);
            continue;
        }
        float *buf = malloc((size_t)t->ne[0] * (size_t)t->ne[1] * (size_t)t->ne[2] * sizeof *buf);
        rc = buf ? merge_tensor(t, ad, scales, n, l, mw, buf) : KVI_E_NOMEM;
        if (rc) err_set(err, rc, "lora-merge: out of memory merging %s", t->name);
        const kvi_type ty = merged_type(t, out_type);
        if (!rc && ty == KVI_TYPE_F32) {
            rc = gguf_writer_write_tensor(w, f, i, buf, err);
        } else if (!rc) {
            size_t qb = 0;
            void *q = quantise_rows(ty, buf, t->ne[1] * t->ne[2], t->ne[0], &qb);
            rc = q ? gguf_writer_write_tensor(w, f, i, q, err)
                   : err_set(err, KVI_E_UNSUPPORTED, "lora-merge: cannot quantise %s to %s", t->name,
                             kvi_type_name(ty) ? kvi_type_name(ty) : "that type");
            free(q);
        }
        free(buf);
    }
    gguf_writer_free(w);
    return rc;
}

int lora_merge(const char *base, int n, const char *const *paths, const float *scales, int out_type,
               const char *out, kvi_error *err)
{
    if (n < 1 || n > LORA_SET_MAX)
        return err_set(err, KVI_E_INVALID, "lora-merge: 1 to %d adapters", LORA_SET_MAX);
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.use_mmap = true;
    kvi_model *m = kvi_model_load(base, &lp, err);
    if (!m) return err && err->code ? err->code : KVI_E_INVALID;
    struct kvi_lora *ad[LORA_SET_MAX] = { 0 };
    gguf_ctx *g = NULL;
    int rc = 0;
    for (int k = 0; !rc && k < n; k++) rc = lora_load(m, paths[k], &ad[k], err);
    if (!rc) rc = gguf_open(base, true, &g, err);
    FILE *f = NULL;
    if (!rc && !(f = fopen(out, "wb"))) rc = err_set(err, KVI_E_IO, "lora-merge: cannot write %s", out);
    if (!rc) rc = write_all(m, g, ad, scales, n, out_type, f, err);
    if (f && fclose(f) != 0 && !rc) rc = err_set(err, KVI_E_IO, "lora-merge: cannot write %s", out);
    if (rc && f) remove(out); /* no half-written model */
    gguf_close(g);
    for (int k = 0; k < n; k++) lora_free(ad[k]);
    kvi_model_free(m);
    return rc;
}
