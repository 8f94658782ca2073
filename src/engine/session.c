/*
 * session.c — a sequence's tokens and KV blocks saved to a file and restored.
 *
 * The file's layout, its header decoder and the (de)serialisation of the KV
 * blocks and key tail are the KV layer's (kv/kv_session.h: "session I/O lives
 * with the KV cache"). This file adds what needs the model and the engine: the
 * checksum of the model's hyper-parameters that names the network (hparams_sum),
 * the context size, each token checked against the vocabulary, the final
 * checksum, and the prefix index of the restored sequence.
 *
 * Loading trusts nothing, in this order: the header (kv_sess_decode: every field
 * against the engine it is loaded into, the file size against the sizes the
 * header implies), the tokens, the KV data (checksum pass: kv_sess_check_kv) and
 * the final checksum against the content, all before any block is taken from
 * the pool (kv_sess_restore); a failure leaves the sequence empty.
 */
#include "kvinfer.h"

#include "engine/engine_int.h"
#include "engine/engine_pipe.h"
#include "base/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_session.h"
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names the model: a restored cache is only valid for the same network. */
static uint64_t hparams_sum(const kvi_model *m)
{
    const int32_t v[] = { m->n_vocab,  m->dim,     m->n_layers, m->n_heads,          m->n_kv_heads,
                          m->head_dim, m->ffn_dim, m->n_rot,    m->rope_neox ? 1 : 0 };
    uint64_t h = kv_sess_fnv(KV_SESS_FNV0, v, sizeof v);
    h = kv_sess_fnv(h, &m->rope_theta, sizeof m->rope_theta);
    h = kv_sess_fnv(h, &m->rms_eps, sizeof m->rms_eps);
    h = kv_sess_fnv(h, m->arch, strnlen(m->arch, sizeof m->arch));
    if (m->n_recurrent > 0) { /* hybrid: the state's shape and which layers keep one */
        const int32_t r[] = { m->n_recurrent, m->ssm_conv, m->ssm_dk, m->ssm_hk, m->ssm_hv };
        h = kv_sess_fnv(h, r, sizeof r);
        for (int l = 0; l < m->n_layers; l++) h = kv_sess_fnv(h, &m->layers[l].recurrent, sizeof(bool));
    }
    return h;
}

int kvi_seq_save(const kvi_seq *s, const char *path, kvi_error *err)
{
    if (!s || !path) return err_set(err, KVI_E_INVALID, "session: no sequence or path");
    kvi_engine *e = engine_seq_engine(s);
    int l0, l1;
    if (engine_pipe_range(e, &l0, &l1))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "session: saving a session of a pipeline is not supported yet");
    const kv_pool *p = engine_kv_pool(e);
    const kv_table *t = engine_seq_table((kvi_seq *)s);
    uint8_t h[KV_SESS_HEADER];
    kv_sess_encode(p, t, hparams_sum(kvi_engine_model(e)), h);

    FILE *f = fopen(path, "wb");
    if (!f) return err_set(err, KVI_E_IO, "session: cannot create %s: %s", path, strerror(errno));
    uint64_t sum = KV_SESS_FNV0;
    bool ok = kv_sess_write(f, h, sizeof h, &sum);
    uint8_t tb[4];
    for (int32_t i = 0; ok && i < t->n_pos; i++) {
        kv_sess_put_u32(tb, (uint32_t)t->tokens[i]);
        ok = kv_sess_write(f, tb, 4, &sum);
    }
    ok = ok && kv_sess_write_kv(f, p, t, &sum);
    uint8_t tail[8];
    kv_sess_put_u64(tail, sum);
    ok = ok && fwrite(tail, 1, 8, f) == 8;
    if (fclose(f) != 0) ok = false;
    if (!ok) return err_set(err, KVI_E_IO, "session: cannot write %s", path);
    return 0;
}

/* The file's size and header, decoded and checked against engine e. */
static int load_header(FILE *f, const char *path, kvi_engine *e, kv_sess_info *in, uint64_t *sum,
                       kvi_error *err)
{
    uint8_t h[KV_SESS_HEADER];
    if (fseek(f, 0, SEEK_END) != 0) return err_set(err, KVI_E_IO, "session: cannot seek in %s", path);
    const long fsize = ftell(f);
    rewind(f);
    if (fsize < 0 || !kv_sess_read(f, h, sizeof h, sum))
        return err_set(err, KVI_E_FORMAT, "session: %s is truncated (no %d-byte header)", path,
                       KV_SESS_HEADER);
    const kv_sess_expect x = { .p = engine_kv_pool(e),
                               .model_sum = hparams_sum(kvi_engine_model(e)),
                               .n_ctx = kvi_engine_n_ctx(e) };
    return kv_sess_decode(h, (int64_t)fsize, &x, path, in, err);
}

/* tokens[n_pos] from the file, each inside the vocabulary of m. */
static int load_tokens(FILE *f, const char *path, const kvi_model *m, int32_t n_pos, int32_t *tokens,
                       uint64_t *sum, kvi_error *err)
{
    for (int32_t i = 0; i < n_pos; i++) {
        uint8_t tb[4];
        if (!kv_sess_read(f, tb, 4, sum))
            return err_set(err, KVI_E_FORMAT, "session: %s is truncated in its tokens", path);
        tokens[i] = (int32_t)kv_sess_get_u32(tb);
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab)
            return err_set(err, KVI_E_FORMAT,
                           "session: %s: token %d at position %d is outside the vocabulary", path, tokens[i],
                           i);
    }
    return 0;
}

/* The final checksum against sum, the FNV of every byte before it. */
static int load_checksum(FILE *f, const char *path, uint64_t sum, kvi_error *err)
{
    uint8_t tail[8];
    if (fread(tail, 1, 8, f) != 8 || kv_sess_get_u64(tail) != sum)
        return err_set(err, KVI_E_FORMAT, "session: %s: checksum mismatch (corrupted file)", path);
    return 0;
}

int kvi_seq_load(kvi_seq *s, const char *path, bool *shifted, kvi_error *err)
{
    if (!s || !path) return err_set(err, KVI_E_INVALID, "session: no sequence or path");
    kvi_engine *e = engine_seq_engine(s);
    int l0, l1;
    if (engine_pipe_range(e, &l0, &l1))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "session: restoring a session into a pipeline is not supported yet");
    kv_pool *p = engine_kv_pool(e);
    kv_table *t = engine_seq_table(s);
    if (t->n_pos != 0 || t->n_blocks != 0)
        return err_set(err, KVI_E_INVALID, "session: the sequence to restore into is not empty");

    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, KVI_E_IO, "session: cannot open %s: %s", path, strerror(errno));
    int32_t *tokens = NULL; /* [n_pos] */
    uint8_t *blk = NULL;    /* [kv_sess_scratch_bytes] one block or the tail being checked */
    uint64_t sum = KV_SESS_FNV0;
    kv_sess_info in;
    int rc = load_header(f, path, e, &in, &sum, err);
    if (rc == 0) {
        tokens = malloc(((size_t)in.n_pos + 1) * sizeof *tokens);
        blk = malloc(kv_sess_scratch_bytes(p));
        if (!tokens || !blk) rc = err_set(err, KVI_E_NOMEM, "session: out of memory");
    }
    if (rc == 0) rc = load_tokens(f, path, kvi_engine_model(e), in.n_pos, tokens, &sum, err);
    /* checksum pass over the blocks before anything is taken from the pool */
    if (rc == 0) rc = kv_sess_check_kv(f, p, &in, blk, &sum, path, err);
    if (rc == 0) rc = load_checksum(f, path, sum, err);
    if (rc == 0) rc = kv_sess_restore(f, p, t, &in, path, err);
    if (rc == 0) {
        if (in.n_pos > 0) memcpy(t->tokens, tokens, (size_t)in.n_pos * sizeof *tokens);
        t->n_pos = in.n_pos;
        t->no_index = (in.flags & 1u) != 0;
        kv_table_window_release(p, t); /* window layers keep only what they will read */
        if (shifted) *shifted = t->no_index;
        if (engine_prefix_cache_on(e)) kv_prefix_index_table(p, t, 0);
    }
    free(tokens);
    free(blk);
    fclose(f);
    return rc;
}
