/*
 * tokenizer_pretok.c — BPE pre-tokenization: cutting text into pieces by regex.
 *
 * A tok_pretok is an ordered list of compiled PCRE2 patterns (UTF + UCP, JIT when
 * available, PCRE2_MATCH_INVALID_UTF so that invalid UTF-8 never fails a match: its
 * bytes simply match nothing and end up in the gaps). Splitting applies pattern 0
 * to the whole text, then pattern 1 to each piece of that, and so on, as llama.cpp
 * does; at every stage the matches and the unmatched gaps between them are both
 * kept as pieces, in order, so the pieces always tile the text exactly. Each pattern
 * has a behaviour (TOK_SPLIT_*): an isolated match is a piece of its own, a match
 * merged with the previous (next) piece has no cut before (after) it; an empty match
 * is a cut point (superbpe's digit grouping). Invariant: the cut offsets of a stage
 * strictly increase and end at the text's length.
 * The table gives every tokenizer.ggml.pre name of llama.cpp's llama-vocab.cpp its
 * patterns and flags (TOK_PRE_*): the originals from each model's tokenizer.json,
 * case-insensitive groups spelled out, or llama.cpp's rewrite where it has no
 * original; they are data here, run by PCRE2.
 */
#include "tokenizer/tokenizer_regex.h"

#include "base/error.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

struct tok_pretok {
    pcre2_code **re;   /* [n] compiled patterns, applied in order */
    uint8_t *behavior; /* [n] TOK_SPLIT_* of each pattern */
    size_t n;
};

/* The apostrophe suffixes, case-insensitive spelled out (the originals say (?i:'s|...)). */
#define CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* GPT-2's pattern, with the final \s+ alternative the original has. */
#define PAT_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* GPT-2's without that last alternative, as llama.cpp writes it for these vocabularies
 * (what it leaves unmatched still becomes pieces: the gaps are kept). */
#define PAT_GPT2_NS "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define PAT_LLAMA3                                                  \
    CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "            \
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)" \
          "|\\s+"
#define PAT_QWEN2                                   \
    CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Letters and marks together (Qwen 3.5). */
#define PAT_QWEN35                                                                                           \
    CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+" \
          "|\\s+(?!\\S)|\\s+"
/* Upper-then-lower words (o200k / Tekken): the originals of tokenizer.json, which PCRE2
 * runs as written (llama.cpp rewrites them for its own regex engine). */
#define UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define PAT_TEKKEN                                                                                 \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_GPT4O                                                                                           \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTR "?|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" CONTR \
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_DEEPSEEK3_MAIN                                                                            \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+" \
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define PAT_BLOOM " ?[^(\\s|.,!?…。，、।۔،)]+"

static const char *const pats_default[] = { "[\\p{P}\\$\\+<=>\\^~\\|]+", PAT_GPT2_NS, "\\p{N}+",
                                            "[0-9][0-9][0-9]" };
static const char *const pats_gpt2[] = { PAT_GPT2 };
static const char *const pats_llama3[] = { PAT_LLAMA3 };
static const char *const pats_jais2[] = {
    CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
          "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)"
          "|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"
};
static const char *const pats_qwen2[] = { PAT_QWEN2 };
static const char *const pats_qwen35[] = { PAT_QWEN35 };
static const char *const pats_falcon[] = { "[\\p{P}\\$\\+<=>\\^~\\|`]+", PAT_GPT2, "[0-9][0-9][0-9]" };
static const char *const pats_starcoder[] = { "\\p{N}", PAT_GPT2 };
static const char *const pats_deepseek_coder[] = { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                                   "[一-龥ࠀ-一가-퟿]+", "\\p{N}" };
/* (clang-format would re-cut these UTF-8 literals on every run) */
// clang-format off
static const char *const pats_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-"
    "ἕἘ-"
    "Ἕἠ-ὅὈ-Ὅὐ-"
    "ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-"
    "ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-"
    "ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
// clang-format on
/* DeepSeek V3 (and Hunyuan dense, JoyAI, HY v4): digits by three, Han and kana runs, then words */
static const char *const pats_deepseek3[] = { "\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", PAT_DEEPSEEK3_MAIN };
static const char *const pats_spark25[] = {
    "\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
     "| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+"),
    "\\p{N}"
};
static const char *const pats_youtu[] = {
    "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTR "?|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" CONTR
    "?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
};
static const char *const pats_bloom[] = { PAT_BLOOM };
static const char *const pats_viking[] = { PAT_BLOOM, "\\p{N}" };
static const char *const pats_tekken[] = { PAT_TEKKEN };
static const char *const pats_chameleon[] = { "<sentinel:[0-9]+>",      "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                                              "([\\t\\n]|    |  )",     "\\p{N}",
                                              "[\\p{P}!-/:-@\\[-`{-~]", PAT_GPT2_NS };
static const char *const pats_gpt4o[] = { PAT_GPT4O };
/* Granite embedding (multilingual, 97M): llama.cpp's lookahead form, letters with marks */
static const char *const pats_granite_emb[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+" CONTR
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*" CONTR
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
};
static const char *const pats_tiny_aya[] = { "\\d{1,3}(?=(?:\\d{3})*\\b)", PAT_GPT4O };
static const char *const pats_superbpe[] = { "\\p{N}+", "(?=(\\d{3})+(?!\\d))" };
static const char *const pats_bailingmoe[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
};
static const char *const pats_seed_coder[] = {
    CONTR
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
};
static const char *const pats_ufakzeka[] = {
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
};
/* AFMoE: a digit run cut in threes from its end (llama.cpp's custom \p{AFMoE_digits}). */
// clang-format off
static const char *const pats_afmoe[] = {
    "\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))",
    "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
    PAT_DEEPSEEK3_MAIN,
};
// clang-format on
static const char *const pats_laguna[] = { "[^\\n]+|[\\n]+", PAT_QWEN2 };
static const char *const pats_exaone_moe[] = {
    CONTR
    "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
};
static const char *const pats_minicpm5[] = {
    "\\p{N}{1,3}", CONTR
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
};
/* SentencePiece-style BPE over raw UTF-8 (Gemma 4, Sarvam): only newline runs apart */
static const char *const pats_lines[] = { "[^\\n]+|[\\n]+" };

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define PATS(a) a, N_OF(a)

typedef struct pre_entry {
    const char *name;
    const char *const *pats;
    size_t n;
    unsigned flags; /* TOK_PRE_* */
} pre_entry;

enum { IGN = TOK_PRE_IGNORE_MERGES, BOS = TOK_PRE_ADD_BOS, RAW = TOK_PRE_RAW_BYTES };

/* Every tokenizer.ggml.pre name of llama.cpp's llama-vocab.cpp with the regexes (and the
 * flags) it gives that name. */
static const pre_entry pre_table[] = {
    { "default", PATS(pats_default), 0 },
    { "llama3", PATS(pats_llama3), IGN | BOS },
    { "llama-v3", PATS(pats_llama3), IGN | BOS },
    { "llama-bpe", PATS(pats_llama3), IGN | BOS },
    { "falcon3", PATS(pats_llama3), IGN | BOS },
    { "falcon-h1", PATS(pats_llama3), IGN | BOS },
    { "pixtral", PATS(pats_llama3), IGN | BOS },
    { "midm-2.0", PATS(pats_llama3), IGN | BOS },
    { "lfm2", PATS(pats_llama3), IGN | BOS },
    { "jina-v5-nano", PATS(pats_llama3), IGN | BOS },
    { "minicpm5", PATS(pats_minicpm5), IGN },
    { "dbrx", PATS(pats_llama3), 0 },
    { "smaug-bpe", PATS(pats_llama3), 0 },
    { "jais-2", PATS(pats_jais2), 0 },
    { "glm4", PATS(pats_llama3), 0 },
    { "chatglm-bpe", PATS(pats_llama3), 0 },
    { "deepseek-llm", PATS(pats_deepseek_llm), 0 },
    { "deepseek-coder", PATS(pats_deepseek_coder), 0 },
    { "deepseek-v3", PATS(pats_deepseek3), 0 },
    { "hunyuan-dense", PATS(pats_deepseek3), 0 },
    { "joyai-llm", PATS(pats_deepseek3), 0 },
    { "hy_v4", PATS(pats_deepseek3), 0 },
    { "spark2_5", PATS(pats_spark25), 0 },
    { "youtu", PATS(pats_youtu), IGN },
    { "falcon", PATS(pats_falcon), 0 },
    { "gpt-2", PATS(pats_gpt2), 0 },
    { "mpt", PATS(pats_gpt2), 0 },
    { "olmo", PATS(pats_gpt2), 0 },
    { "jais", PATS(pats_gpt2), 0 },
    { "phi-2", PATS(pats_gpt2), 0 },
    { "jina-es", PATS(pats_gpt2), 0 },
    { "jina-de", PATS(pats_gpt2), 0 },
    { "gigachat", PATS(pats_gpt2), 0 },
    { "jina-v2-es", PATS(pats_gpt2), 0 },
    { "jina-v2-de", PATS(pats_gpt2), 0 },
    { "a.x-4.0", PATS(pats_gpt2), 0 },
    { "mellum", PATS(pats_gpt2), 0 },
    { "modern-bert", PATS(pats_gpt2), 0 },
    { "jina-v1-en", PATS(pats_gpt2), 0 },
    { "jina-v2-code", PATS(pats_gpt2), 0 },
    { "roberta-bpe", PATS(pats_gpt2), 0 },
    { "exaone4", PATS(pats_gpt2), 0 },
    { "trillion", PATS(pats_gpt2), 0 },
    { "granite-docling", PATS(pats_gpt2), 0 },
    { "starcoder", PATS(pats_starcoder), 0 },
    { "refact", PATS(pats_starcoder), 0 },
    { "command-r", PATS(pats_starcoder), 0 },
    { "smollm", PATS(pats_starcoder), 0 },
    { "codeshell", PATS(pats_starcoder), 0 },
    { "exaone", PATS(pats_starcoder), 0 },
    { "minerva-7b", PATS(pats_starcoder), 0 },
    { "mellum2", PATS(pats_starcoder), 0 },
    { "qwen2", PATS(pats_qwen2), 0 },
    { "deepseek-r1-qwen", PATS(pats_qwen2), 0 },
    { "kormo", PATS(pats_qwen2), 0 },
    { "f2llmv2", PATS(pats_qwen2), 0 },
    { "megrez", PATS(pats_qwen2), 0 },
    { "stablelm2", PATS(pats_qwen2), 0 },
    { "hunyuan", PATS(pats_qwen2), 0 },
    { "solar-open", PATS(pats_qwen2), 0 },
    { "grok-2", PATS(pats_qwen2), 0 },
    { "qwen35", PATS(pats_qwen35), 0 },
    { "poro-chat", PATS(pats_bloom), 0 },
    { "bloom", PATS(pats_bloom), 0 },
    { "gpt3-finnish", PATS(pats_bloom), 0 },
    { "viking", PATS(pats_viking), 0 },
    { "tekken", PATS(pats_tekken), IGN | BOS },
    { "chameleon", PATS(pats_chameleon), BOS },
    { "gpt-4o", PATS(pats_gpt4o), 0 },
    { "llama4", PATS(pats_gpt4o), 0 },
    { "kanana2", PATS(pats_gpt4o), 0 },
    { "talkie", PATS(pats_gpt4o), 0 },
    { "minimax-m2", PATS(pats_gpt4o), 0 },
    { "granite-embed-multi-97m", PATS(pats_granite_emb), IGN },
    { "tiny_aya", PATS(pats_tiny_aya), 0 },
    { "cohere2moe", PATS(pats_tiny_aya), 0 },
    { "superbpe", PATS(pats_superbpe), 0 },
    { "bailingmoe", PATS(pats_bailingmoe), 0 },
    { "bailingmoe2", PATS(pats_bailingmoe), 0 },
    { "llada-moe", PATS(pats_bailingmoe), 0 },
    { "seed-coder", PATS(pats_seed_coder), 0 },
    { "ufakzeka", PATS(pats_ufakzeka), 0 },
    { "afmoe", PATS(pats_afmoe), 0 },
    { "laguna", PATS(pats_laguna), 0 },
    { "exaone-moe", PATS(pats_exaone_moe), 0 },
    { "gemma4", PATS(pats_lines), RAW },
    { "granite-embed-multi-311m", PATS(pats_lines), RAW },
    { "sarvam-moe", PATS(pats_lines), RAW },
};

int tok_pretok_create_split(const char *const *patterns, const uint8_t *behaviors, size_t n, tok_pretok **out,
                            kvi_error *err)
{
    *out = NULL;
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p || !(p->re = calloc(n ? n : 1, sizeof *p->re)) || !(p->behavior = calloc(n ? n : 1, 1))) {
        if (p) free(p->re);
        free(p);
        return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for the pre-tokenizer");
    }
    for (size_t i = 0; i < n; i++) {
        int ecode;
        PCRE2_SIZE eoff;
        p->behavior[i] = behaviors ? behaviors[i] : TOK_SPLIT_ISOLATED;
        bool nomem;
        p->re[i] = tok_regex_compile(patterns[i],
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                                     &ecode, &eoff, &nomem);
        if (!p->re[i] && nomem) {
            p->n = i;
            tok_pretok_free(p);
            return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for the pre-tokenizer");
        }
        if (!p->re[i]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ecode, msg, sizeof msg);
            p->n = i;
            tok_pretok_free(p);
            return err_set(err, KVI_E_FORMAT, "tokenizer: pre-tokenizer regex %zu at offset %zu: %s", i,
                           (size_t)eoff, (const char *)msg);
        }
        pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE); /* optional: interpreted if it fails */
        p->n = i + 1;
    }
    *out = p;
    return 0;
}

int tok_pretok_create_patterns(const char *const *patterns, size_t n, tok_pretok **out, kvi_error *err)
{
    return tok_pretok_create_split(patterns, NULL, n, out, err);
}

int tok_pretok_create_named(const char *pre_name, tok_pretok **out, unsigned *flags, kvi_error *err)
{
    /* No name: llama.cpp's "default". An unknown name is refused, as llama.cpp does: a
     * wrong pre-split gives plausible-looking but wrong ids, silently. */
    const pre_entry *e = NULL;
    if (!pre_name || !pre_name[0]) e = &pre_table[0];
    for (size_t i = 0; !e && i < N_OF(pre_table); i++)
        if (strcmp(pre_name, pre_table[i].name) == 0) e = &pre_table[i];
    if (flags) *flags = e ? e->flags : 0;
    if (!e) {
        *out = NULL;
        return err_set(err, KVI_E_UNSUPPORTED,
                       "tokenizer: pre-tokenizer '%.64s' (tokenizer.ggml.pre) is not supported", pre_name);
    }
    return tok_pretok_create_patterns(e->pats, e->n, out, err);
}

int tok_pretok_create(const char *pre_name, tok_pretok **out, kvi_error *err)
{
    return tok_pretok_create_named(pre_name, out, NULL, err);
}

void tok_pretok_free(tok_pretok *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p->re);
    free(p->behavior);
    free(p);
}

/* Piece boundaries: a growable list of offsets into the text (ends of pieces). */
typedef struct cuts {
    size_t *v; /* [cap] piece end offsets, increasing, last == text length */
    size_t n, cap;
} cuts;

static int cuts_push(cuts *c, size_t end)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        size_t *nv = realloc(c->v, cap * sizeof *nv);
        if (!nv) return KVI_E_NOMEM;
        c->v = nv;
        c->cap = cap;
    }
    c->v[c->n++] = end;
    return 0;
}

/* Splits [start, end) by `re` into matches and gaps, appending their ends to out:
 * isolated, both are pieces; merged with previous, a match ends the piece before it;
 * merged with next, a match starts the piece after it. An empty match is a cut point. */
static int split_one(const pcre2_code *re, uint8_t behavior, pcre2_match_data *md, const char *text,
                     size_t start, size_t end, cuts *out)
{
    size_t pos = start, last = start;
    while (pos < end) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, end, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return tok_regex_error(rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: a cut there, then step over one character */
            if (ms > last && ms < end) {
                if (cuts_push(out, ms) != 0) return KVI_E_NOMEM;
                last = ms;
            }
            size_t step = tok_utf8_len((unsigned char)text[ms < end ? ms : end - 1]);
            pos = ms + (step ? step : 1);
            if (pos > end) pos = end;
            continue;
        }
        bool cut_before = behavior != TOK_SPLIT_MERGED_PREVIOUS,
             cut_after = behavior != TOK_SPLIT_MERGED_NEXT;
        if (ms > last && cut_before && cuts_push(out, ms) != 0) return KVI_E_NOMEM;
        if (cut_after && me < end && cuts_push(out, me) != 0) return KVI_E_NOMEM;
        last = cut_after ? me : ms;
        pos = me;
    }
    if (cuts_push(out, end) != 0) return KVI_E_NOMEM;
    return 0;
}

int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_piece_fn fn, void *ctx)
{
    if (len == 0) return 0;
    cuts a = { 0 }, b = { 0 };
    int rc = cuts_push(&a, len);
    pcre2_match_data *md = NULL;
    for (size_t k = 0; rc == 0 && k < p->n; k++) {
        pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(p->re[k], NULL);
        if (!md) {
            rc = KVI_E_NOMEM;
            break;
        }
        b.n = 0;
        size_t start = 0;
        for (size_t i = 0; rc == 0 && i < a.n; i++) {
            rc = split_one(p->re[k], p->behavior[k], md, text, start, a.v[i], &b);
            start = a.v[i];
        }
        cuts tmp = a;
        a = b;
        b = tmp;
    }
    size_t start = 0;
    for (size_t i = 0; rc == 0 && i < a.n; i++) {
        rc = fn(ctx, text + start, a.v[i] - start);
        start = a.v[i];
    }
    pcre2_match_data_free(md);
    free(a.v);
    free(b.v);
    return rc;
}

const char *tok_pretok_name_at(size_t i) { return i < N_OF(pre_table) ? pre_table[i].name : NULL; }
