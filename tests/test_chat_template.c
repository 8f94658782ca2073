/*
 * test_chat_template.c — chat templates: family detection from template text,
 * and the phi-3 layout on llama.cpp's phi-3 vocabulary
 * (../shared/golden/tokenizer/ggml-vocab-phi-3.gguf), whose special ids are
 * Phi-3's published ones: <|assistant|> 32001, <|end|> 32007, <|user|> 32010,
 * <|system|> 32006. A message's own "<|end|>" text must stay text.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <string.h>

static int count(const int32_t *v, int n, int32_t id)
{
    int c = 0;
    for (int i = 0; i < n; i++) c += v[i] == id;
    return c;
}

int main(void)
{
    CHECK(!strcmp(kvi_chat_family_of("{% for m in messages %}<|im_start|>{{m.role}}"), "chatml"), "chatml");
    CHECK(!strcmp(kvi_chat_family_of("<|start_header_id|>' + message['role']"), "llama3"), "llama3");
    CHECK(!strcmp(kvi_chat_family_of("{{ '<start_of_turn>' + role }}"), "gemma"), "gemma");
    CHECK(!strcmp(kvi_chat_family_of("{{'<|user|>' + '\n'}}"), "phi3"), "phi3");
    CHECK(!strcmp(kvi_chat_family_of("[INST] <<SYS>>\\n"), "llama2"), "llama2");
    CHECK(!strcmp(kvi_chat_family_of("{{ '[INST] ' + content + ' [/INST]' }}"), "mistral"), "mistral");
    CHECK(!strcmp(kvi_chat_family_of(NULL), "fallback") && !strcmp(kvi_chat_family_of("{{ x }}"), "fallback"),
          "fallback");

    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(shared_path("golden/tokenizer/ggml-vocab-phi-3.gguf"), &err);
    CHECK(m != NULL, "phi-3 vocab: %s", err.msg);
    if (m) {
        const kvi_chat_msg msgs[] = { { "system", "Be brief." }, { "user", "Hi <|end|> there" } };
        int32_t ids[256];
        int32_t n = kvi_chat_apply_family(m, "phi3", msgs, 2, true, ids, 256, &err);
        CHECK(n > 8 && n <= 256, "phi3: %d ids (%s)", n, err.msg);
        if (n > 0 && n <= 256) {
            int first = kvi_model_add_bos(m) ? 1 : 0;
            CHECK(!first || ids[0] == kvi_token_bos(m), "BOS first");
            CHECK(ids[first] == 32006, "<|system|> opens: %d", ids[first]);
            CHECK(count(ids, n, 32010) == 1, "one <|user|>");
            CHECK(count(ids, n, 32007) == 2,
                  "two <|end|> markers; the message's own text is not special (%d)", count(ids, n, 32007));
            int last = -1;
            for (int i = 0; i < n; i++)
                if (ids[i] == 32001) last = i;
            /* then only the newline's tokens ("\n", with SentencePiece's dummy space) */
            CHECK(count(ids, n, 32001) == 1 && last >= n - 3, "<|assistant|> opening at the end (%d of %d)",
                  last, n);
        }
        /* the count without a buffer equals the count with one */
        CHECK(kvi_chat_apply_family(m, "phi3", msgs, 2, true, NULL, 0, &err) == n, "count-only call");
        const kvi_chat_msg bad[] = { { "user", NULL } };
        CHECK(kvi_chat_apply_family(m, "phi3", bad, 1, true, ids, 256, &err) == KVI_E_INVALID,
              "NULL content");
        /* chatml markers are not in this vocabulary: plain text, never the phi-3 specials */
        n = kvi_chat_apply_family(m, "chatml", msgs, 2, true, ids, 256, &err);
        CHECK(n > 0 && count(ids, n, 32007) == 0 && count(ids, n, 32010) == 0, "fallback layout as text");
        kvi_model_free(m);
    }
    return test_main_end();
}
