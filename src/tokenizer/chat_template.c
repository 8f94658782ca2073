/*
 * chat_template.c — messages to token ids in a model's chat format.
 *
 * Jinja templates are not interpreted: the family is recognised by substrings
 * of tokenizer.chat_template (see kvi_chat_family) and each family's layout is
 * written out here. A layout is a sequence of segments:
 *
 *   MARK(text)  a marker such as "<|im_start|>": its special-token id when the
 *               vocabulary has it as one token, else its text tokenized plainly;
 *   TEXT(text)  role names, newlines and message contents: tokenized with
 *               parse_special off, so a user's "<|im_end|>" stays text;
 *   BOS / EOS   the model's ids.
 *
 * Invariant: message text only ever goes through TEXT segments. Each TEXT
 * segment is tokenized on its own, as llama.cpp tokenizes the text between two
 * special tokens (so SentencePiece vocabularies put their dummy-prefix space at
 * the start of each segment, as llama.cpp does).
 *
 * Fallback (no template, or an unknown one): the chatml layout.
 */
#include "kvinfer.h"

#include "base/error.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

typedef struct ids_buf {
    int32_t *v; /* [cap] */
    int32_t n, cap;
    int rc; /* first error */
} ids_buf;

static void push(ids_buf *b, int32_t id)
{
    if (b->rc) return;
    if (b->n == b->cap) {
        int32_t cap = b->cap ? 2 * b->cap : 256;
        int32_t *nv = realloc(b->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            b->rc = KVI_E_NOMEM;
            return;
        }
        b->v = nv;
        b->cap = cap;
    }
    b->v[b->n++] = id;
}

static void text(ids_buf *b, const tok_tokenizer *m, const char *s, bool parse_special)
{
    if (b->rc || !s || !*s) return;
    const size_t len = strlen(s);
    int32_t small[64];
    int32_t n = tokenizer_encode(m, s, len, false, parse_special, small, 64);
    if (n < 0) {
        b->rc = n;
        return;
    }
    if (n <= 64) {
        for (int32_t i = 0; i < n; i++) push(b, small[i]);
        return;
    }
    int32_t *big = malloc((size_t)n * sizeof *big);
    if (!big) {
        b->rc = KVI_E_NOMEM;
        return;
    }
    int32_t n2 = tokenizer_encode(m, s, len, false, parse_special, big, n);
    for (int32_t i = 0; i < n2 && i < n; i++) push(b, big[i]);
    free(big);
}

static void mark(ids_buf *b, const tok_tokenizer *m, const char *s)
{
    int32_t one[2];
    int32_t n = tokenizer_encode(m, s, strlen(s), false, true, one, 2);
    if (n == 1)
        push(b, one[0]);
    else
        text(b, m, s, false);
}

static void special_id(ids_buf *b, int32_t id)
{
    if (id >= 0) push(b, id);
}

const char *kvi_chat_family_of(const char *tmpl)
{
    if (!tmpl) return "fallback";
    if (strstr(tmpl, "<|im_start|>")) return "chatml";
    if (strstr(tmpl, "<|start_header_id|>")) return "llama3";
    if (strstr(tmpl, "<start_of_turn>")) return "gemma";
    if (strstr(tmpl, "<|user|>")) return "phi3";
    if (strstr(tmpl, "[INST]")) return strstr(tmpl, "<<SYS>>") ? "llama2" : "mistral";
    return "fallback";
}

static bool is_role(const kvi_chat_msg *msg, const char *role)
{
    return msg->role && !strcmp(msg->role, role);
}

static void layout_chatml(ids_buf *b, const tok_tokenizer *m, const kvi_chat_msg *msgs, int n,
                          bool add_assistant)
{
    for (int i = 0; i < n; i++) {
        mark(b, m, "<|im_start|>");
        text(b, m, msgs[i].role, false);
        text(b, m, "\n", false);
        text(b, m, msgs[i].content, false);
        mark(b, m, "<|im_end|>");
        text(b, m, "\n", false);
    }
    if (add_assistant) {
        mark(b, m, "<|im_start|>");
        text(b, m, "assistant\n", false);
    }
}

static void layout_llama3(ids_buf *b, const tok_tokenizer *m, const kvi_chat_msg *msgs, int n,
                          bool add_assistant)
{
    for (int i = 0; i < n; i++) {
        mark(b, m, "<|start_header_id|>");
        text(b, m, msgs[i].role, false);
        mark(b, m, "<|end_header_id|>");
        text(b, m, "\n\n", false);
        text(b, m, msgs[i].content, false);
        mark(b, m, "<|eot_id|>");
    }
    if (add_assistant) {
        mark(b, m, "<|start_header_id|>");
        text(b, m, "assistant", false);
        mark(b, m, "<|end_header_id|>");
        text(b, m, "\n\n", false);
    }
}

static void layout_phi3(ids_buf *b, const tok_tokenizer *m, const kvi_chat_msg *msgs, int n,
                        bool add_assistant)
{
    for (int i = 0; i < n; i++) {
        const char *mk = is_role(&msgs[i], "system")      ? "<|system|>"
                         : is_role(&msgs[i], "assistant") ? "<|assistant|>"
                                                          : "<|user|>";
        mark(b, m, mk);
        text(b, m, "\n", false);
        text(b, m, msgs[i].content, false);
        mark(b, m, "<|end|>");
        text(b, m, "\n", false);
    }
    if (add_assistant) {
        mark(b, m, "<|assistant|>");
        text(b, m, "\n", false);
    }
}

/* gemma and mistral have no system role: the system text opens the first user turn. */
static void layout_gemma(ids_buf *b, const tok_tokenizer *m, const kvi_chat_msg *msgs, int n,
                         bool add_assistant)
{
    const char *sys = NULL;
    for (int i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system")) {
            sys = msgs[i].content;
            continue;
        }
        mark(b, m, "<start_of_turn>");
        text(b, m, is_role(&msgs[i], "assistant") ? "model\n" : "user\n", false);
        if (sys && !is_role(&msgs[i], "assistant")) {
            text(b, m, sys, false);
            text(b, m, "\n\n", false);
            sys = NULL;
        }
        text(b, m, msgs[i].content, false);
        mark(b, m, "<end_of_turn>");
        text(b, m, "\n", false);
    }
    if (add_assistant) {
        mark(b, m, "<start_of_turn>");
        text(b, m, "model\n", false);
    }
}

/* llama-2: "[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST] {answer} </s><s>[INST] ..."
 * mistral: "[INST] {sys}\n\n{user} [/INST]{answer}</s>[INST] ..." */
static void layout_inst(ids_buf *b, const tok_tokenizer *m, const kvi_chat_msg *msgs, int n, bool llama2)
{
    const char *sys = NULL;
    bool first_user = true;
    for (int i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system")) {
            sys = msgs[i].content;
            continue;
        }
        if (is_role(&msgs[i], "assistant")) {
            if (llama2) text(b, m, " ", false);
            text(b, m, msgs[i].content, false);
            if (llama2) text(b, m, " ", false);
            special_id(b, tokenizer_eos(m));
            if (llama2) special_id(b, tokenizer_bos(m));
            continue;
        }
        mark(b, m, "[INST]");
        text(b, m, " ", false);
        if (sys && first_user) {
            if (llama2) {
                text(b, m, "<<SYS>>\n", false);
                text(b, m, sys, false);
                text(b, m, "\n<</SYS>>\n\n", false);
            } else {
                text(b, m, sys, false);
                text(b, m, "\n\n", false);
            }
        }
        first_user = false;
        text(b, m, msgs[i].content, false);
        text(b, m, " ", false);
        mark(b, m, "[/INST]");
    }
}

int32_t tokenizer_chat_apply(const tok_tokenizer *m, const char *family, const kvi_chat_msg *msgs, int n,
                             bool add_assistant, int32_t *out, int32_t n_max, kvi_error *err)
{
    if (!m || (n > 0 && !msgs) || n < 0 || n_max < 0)
        return err_set(err, KVI_E_INVALID, "chat template: bad arguments");
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return err_set(err, KVI_E_INVALID, "chat template: message %d has no role or no content", i);
    ids_buf b = { 0 };
    if (tokenizer_add_bos(m)) special_id(&b, tokenizer_bos(m));
    if (!strcmp(family, "llama3"))
        layout_llama3(&b, m, msgs, n, add_assistant);
    else if (!strcmp(family, "phi3"))
        layout_phi3(&b, m, msgs, n, add_assistant);
    else if (!strcmp(family, "gemma"))
        layout_gemma(&b, m, msgs, n, add_assistant);
    else if (!strcmp(family, "llama2"))
        layout_inst(&b, m, msgs, n, true);
    else if (!strcmp(family, "mistral"))
        layout_inst(&b, m, msgs, n, false);
    else
        layout_chatml(&b, m, msgs, n, add_assistant);
    if (b.rc) {
        free(b.v);
        return err_set(err, b.rc, "chat template: %s",
                       b.rc == KVI_E_NOMEM ? "out of memory" : "tokenizer failed");
    }
    for (int32_t i = 0; i < b.n && i < n_max; i++) out[i] = b.v[i];
    const int32_t total = b.n;
    free(b.v);
    return total;
}
