/*
 * model_info.c — what a model costs, without running it: hyper-parameters read
 * from a file's metadata alone, parameter counts and the weight bytes one decode
 * step streams.
 *
 * kvi_model_info_from_file() maps a GGUF file read-only and parses only its
 * header (gguf_open with use_mmap: key/values and tensor infos are validated, the
 * pages of the data section are never touched), so a 40 GB file costs a few
 * page reads. Other formats (llama2.c, Hugging Face folders) are loaded in full.
 *
 * Invariants: the hyper-parameters come from model_hparams_gguf() (model.c), the
 * loader's own reading of the metadata with its range checks, and the layer kinds
 * (sliding-window layers) from the architecture's own hparams function (arch.h:
 * model_swa_layers for gemma2/3) run on a layers array of the info's own, so the
 * planner and the loader never disagree about a shape or a window. Counts use
 * uint64_t so a 400B model does not overflow.
 */
#include "base/error.h"
#include "formats/gguf.h"
#include "model/arch.h"
#include "formats/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layer kinds of a GGUF as the loader lays them out: the architecture's
 * hparams function (which reads the sliding-window keys) on a layers array of
 * m's own (the caller frees it). An architecture kvinfer does not run, or one
 * without such keys, has global layers only (m->layers stays NULL). */
static int info_kinds_gguf(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    const model_arch *a = model_arch_find(m->arch);
    if (!a || !a->hparams) return 0;
    model_block_defaults(m); /* the defaults an architecture's keys fall back to, as loaded */
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "model info: out of memory for %d layers", m->n_layers);
    return a->hparams(m, g, err);
}

/* Fills out from a parsed GGUF header. */
static int info_from_gguf(const gguf_ctx *g, const char *file, kvi_model_info *out, kvi_error *err)
{
    struct kvi_model m;
    memset(&m, 0, sizeof m);
    int rc = model_hparams_gguf(&m, g, true, err);
    if (rc == 0) rc = info_kinds_gguf(&m, g, err);
    if (rc == 0) model_info_shape(&m, out);
    free(m.layers);
    if (rc) {
        if (err) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            err_set(err, rc, "model info: %s: %s", file, msg);
        }
        return rc;
    }

    /* Weight bytes (validated by the reader) and the type of most layer-matrix elements. */
    uint64_t count[KVI_TYPE_COUNT] = { 0 };
    size_t bytes = 0;
    int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        bytes += t->nbytes; /* each lies inside the file: the sum is at most its size */
        if (t->n_dims >= 2 && strncmp(t->name, "blk.", 4) == 0 && (unsigned)t->type < KVI_TYPE_COUNT)
            count[t->type] += (uint64_t)t->ne[0] * (uint64_t)t->ne[1];
    }
    int best = KVI_TYPE_F32;
    for (int t = 0; t < KVI_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    out->weight_type = (kvi_type)best;
    out->weight_bytes = bytes;
    out->has_weights = nt > 0;
    return 0;
}

int kvi_model_info_from_file(const char *path, kvi_model_info *out, kvi_error *err)
{
    if (!path || !out) return err_set(err, KVI_E_INVALID, "model info: no path or output");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    char magic[4] = { 0 };
    bool is_gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    if (!is_gguf) {
        /* llama2.c checkpoints and Hugging Face folders: the loader knows them. */
        kvi_load_params lp;
        kvi_load_params_default(&lp);
        lp.use_mmap = true;
        kvi_model *m = kvi_model_load(path, &lp, err);
        if (!m) return err && err->code ? err->code : KVI_E_FORMAT;
        kvi_model_get_info(m, out);
        kvi_model_free(m);
        return 0;
    }
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, true, &g, err);
    if (rc) return rc;
    rc = info_from_gguf(g, path, out, err);
    gguf_close(g);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

static uint64_t mat_elems(const kern_tensor *t)
{
    return t->data ? (uint64_t)t->n_in * (uint64_t)t->n_out : 0;
}

static size_t mat_bytes(const kern_tensor *t)
{
    return t->data ? quant_row_bytes(t->type, t->n_in) * (size_t)t->n_out : 0;
}

uint64_t kvi_model_matmul_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    uint64_t n = mat_elems(&m->output);
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        n += mat_elems(&L->wq) + mat_elems(&L->wk) + mat_elems(&L->wv) + mat_elems(&L->wo) +
             mat_elems(&L->w_gate) + mat_elems(&L->w_up) + mat_elems(&L->w_down);
    }
    return n;
}

/* Elements of the 1-D vectors: norms and attention biases. */
static uint64_t vector_elems(const kvi_model *m)
{
    uint64_t qd = (uint64_t)m->n_heads * (uint64_t)m->head_dim;
    uint64_t kd = (uint64_t)m->n_kv_heads * (uint64_t)m->head_dim;
    uint64_t n = (uint64_t)m->dim; /* output_norm */
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        n += 2 * (uint64_t)m->dim + (L->bq ? qd : 0) + (L->bk ? kd : 0) + (L->bv ? kd : 0);
    }
    return n;
}

uint64_t kvi_model_n_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    uint64_t n = kvi_model_matmul_params(m) + vector_elems(m);
    if (m->tok_embd.data != m->output.data) n += mat_elems(&m->tok_embd);
    return n;
}

size_t kvi_model_decode_bytes(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    size_t b = mat_bytes(&m->output) + (size_t)vector_elems(m) * sizeof(float);
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        b += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
             mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down);
    }
    if (m->tok_embd.data && m->tok_embd.data != m->output.data)
        b += quant_row_bytes(m->tok_embd.type, m->tok_embd.n_in); /* one embedding row */
    return b;
}
