/*
 * cli_util.c — small helpers shared by every `kvinfer` command (see cli.h):
 * error printing, strict number / size / id-list parsing, whole-file reading,
 * fetching the value of a flag, and printing a JSON document.
 *
 * Invariants: every parser accepts a whole string or nothing (no trailing junk,
 * no silent wrap-around, no partial output on failure); buffers returned are
 * malloc'd and owned by the caller.
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int cli_error(const char *fmt, ...)
{
    /* Messages can quote file contents (token texts, names): control bytes become
     * '?' so that an error is always exactly one line on stderr. */
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) buf[0] = 0;
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    fprintf(stderr, "kvinfer: error: %s\n", buf);
    return 1;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s || is_space(*s)) return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return false;
    if ((int64_t)v < min || (int64_t)v > max) return false;
    *out = (int64_t)v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
    /* strtoull accepts "-1" (wrapping): reject signs explicitly */
    if (!s || !*s || is_space(*s) || *s == '-' || *s == '+') return false;
    errno = 0;
    char *end = NULL;
    /* decimal, or hexadecimal with 0x (never octal: "010" is ten) */
    int base = (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10;
    unsigned long long v = strtoull(s, &end, base);
    if (errno != 0 || end == s || *end != '\0') return false;
    *out = (uint64_t)v;
    return true;
}

bool cli_parse_f32(const char *s, float *out)
{
    if (!s || !*s || is_space(*s)) return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0') return false;
    if (!isfinite(v) || fabs(v) > 3.0e38) return false;
    *out = (float)v;
    return true;
}

bool cli_parse_size(const char *s, size_t *out)
{
    if (!s || !*s || is_space(*s) || *s == '-' || *s == '+') return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || !isfinite(v) || v < 0) return false;
    double mul = 1.0;
    /* suffix: k/K, M, G, T, with optional "i" and optional "B"; all binary (1024) */
    const char *p = end;
    if (*p) {
        switch (*p) {
        case 'k':
        case 'K': mul = 1024.0; break;
        case 'm':
        case 'M': mul = 1024.0 * 1024.0; break;
        case 'g':
        case 'G': mul = 1024.0 * 1024.0 * 1024.0; break;
        case 't':
        case 'T': mul = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
        case 'b':
        case 'B': mul = 1.0; break;
        default: return false;
        }
        if (*p != 'b' && *p != 'B') {
            p++;
            if (*p == 'i') p++;
            if (*p == 'B' || *p == 'b') p++;
        } else {
            p++;
        }
        if (*p) return false;
    }
    double bytes = v * mul;
    if (bytes >= 18446744073709551616.0 || bytes > (double)SIZE_MAX) return false;
    if (bytes != floor(bytes)) bytes = floor(bytes);
    *out = (size_t)bytes;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, int32_t *n)
{
    if (!s || !ids || !n) return false;
    size_t len = strlen(s);
    /* at most one id per two characters, plus one */
    size_t cap = len / 2 + 1;
    int32_t *arr = malloc(cap * sizeof *arr); /* (cap) token ids */
    if (!arr) return false;
    size_t count = 0;
    const char *p = s;
    while (is_space(*p)) p++;
    bool bracket = false;
    if (*p == '[') {
        bracket = true;
        p++;
    }
    bool need_sep = false; /* true right after a number */
    for (;;) {
        while (is_space(*p)) p++;
        if (*p == '\0' || *p == ']') break;
        if (*p == ',') {
            if (!need_sep) goto fail; /* ",," or leading comma */
            need_sep = false;
            p++;
            continue;
        }
        if (*p < '0' || *p > '9') {
            if (!(*p == '-' && p[1] >= '0' && p[1] <= '9')) goto fail;
        }
        /* numbers separated only by spaces are allowed: "1 2 3" */
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno != 0 || end == p || v < INT32_MIN || v > INT32_MAX) goto fail;
        if (count >= cap) goto fail;
        arr[count++] = (int32_t)v;
        need_sep = true;
        p = end;
        if (*p && !is_space(*p) && *p != ',' && *p != ']') goto fail;
    }
    if (*p == ']') {
        if (!bracket) goto fail;
        p++;
        while (is_space(*p)) p++;
    } else if (bracket) {
        goto fail;
    }
    if (*p != '\0') goto fail;
    if (count > 0 && !need_sep) goto fail; /* trailing comma */
    *ids = arr;
    *n = (int32_t)count;
    return true;
fail:
    free(arr);
    return false;
}

char *cli_token_text(const kvi_model *m, int32_t id)
{
    if (id < 0) return NULL;
    char buf[256];
    int32_t n = kvi_token_to_piece(m, id, buf, sizeof buf, true);
    if (n < 0 || (size_t)n >= sizeof buf) return NULL;
    buf[n] = 0;
    return strdup(buf);
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1); /* (cap + 1) bytes, NUL-terminated */
    if (!buf) {
        fclose(f);
        errno = ENOMEM;
        return NULL;
    }
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                free(buf);
                fclose(f);
                errno = e;
                return NULL;
            }
            break;
        }
        if (cap > SIZE_MAX / 2 - 1) {
            free(buf);
            fclose(f);
            errno = ENOMEM;
            return NULL;
        }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            fclose(f);
            errno = ENOMEM;
            return NULL;
        }
        buf = nb;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

const char *cli_flag_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        cli_error("flag %s needs a value", argv[*i]);
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

int cli_flag_content_format(const char *v, int *out)
{
    if (!v) return -1;
    const int f = kvi_content_format_parse(v);
    if (f < 0)
        return cli_error("--chat-template-content-format must be auto, string or openai (got '%s')", v), -1;
    *out = f;
    return 1;
}

int cli_flag_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!v) return -1;
    if (cli_parse_i64(v, lo, hi, out)) return 1;
    cli_error("%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]", flag, v, lo, hi);
    return -1;
}

int cli_flag_i32(const char *flag, const char *v, int32_t lo, int32_t hi, int32_t *out)
{
    int64_t x;
    if (cli_flag_i64(flag, v, lo, hi, &x) < 0) return -1;
    *out = (int32_t)x;
    return 1;
}

int cli_print_json(cJSON *root, const char *oom_msg)
{
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) return cli_error("%s", oom_msg);
    puts(s);
    free(s);
    return 0;
}

const char *cli_default_model(void)
{
    static const char path[] = "../shared/models/stories260K.gguf";
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    return path;
}

int cli_tokenize(const kvi_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t **ids, int32_t *n)
{
    /* a first guess; kvi_tokenize reports the real count when it is larger */
    size_t guess = len + 8;
    if (guess > (size_t)INT32_MAX) return cli_error("text too long to tokenize (%zu bytes)", len);
    int32_t cap = (int32_t)guess;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *buf = malloc((size_t)cap * sizeof *buf); /* (cap) token ids */
        if (!buf) return cli_error("out of memory tokenizing %zu bytes", len);
        int32_t r = kvi_tokenize(m, text, len, add_special, parse_special, buf, cap);
        if (r < 0) {
            free(buf);
            return cli_error("tokenization failed: %s", kvi_strerror(r));
        }
        if (r <= cap) {
            *ids = buf;
            *n = r;
            return 0;
        }
        free(buf);
        cap = r;
    }
    return cli_error("tokenization failed: the token count changed between calls");
}

char *cli_detokenize(const kvi_model *m, const int32_t *ids, int32_t n, bool render_special,
                     bool remove_leading_space, size_t *len)
{
    size_t cap = (size_t)(n > 0 ? n : 0) * 8 + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *buf = malloc(cap); /* (cap) bytes, NUL-terminated by kvi_detokenize */
        if (!buf) {
            cli_error("out of memory detokenizing %d tokens", (int)n);
            return NULL;
        }
        int32_t r = kvi_detokenize(m, ids, n, buf, cap, render_special, remove_leading_space);
        if (r < 0) {
            free(buf);
            cli_error("detokenization failed: %s", kvi_strerror(r));
            return NULL;
        }
        if ((size_t)r < cap) {
            buf[r] = '\0';
            if (len) *len = (size_t)r;
            return buf;
        }
        free(buf);
        cap = (size_t)r + 1;
    }
    cli_error("detokenization failed: the text length changed between calls");
    return NULL;
}

int cli_check_ids(const kvi_model *m, const int32_t *ids, int32_t n)
{
    int32_t n_vocab = kvi_n_vocab(m);
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return cli_error("token id %d (at index %d) is out of range: the vocabulary has %d tokens",
                             (int)ids[i], (int)i, (int)n_vocab);
    }
    return 0;
}

int cli_ctx_exceeded(int32_t n_prompt, int n_ctx)
{
    return cli_error("context_length_exceeded: the prompt has %d tokens but the context holds %d "
                     "(-c sets the context size)",
                     (int)n_prompt, n_ctx);
}

int cli_n_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 && n <= 4096 ? (int)n : 1;
}

bool cli_parse_kv_type(const char *flag, const char *s, kvi_type *out)
{
    kvi_type t;
    if (kvi_type_from_name(s, &t) != 0 || (t != KVI_TYPE_F32 && t != KVI_TYPE_F16 && t != KVI_TYPE_Q8_0 &&
                                           t != KVI_TYPE_Q4_0 && t != KVI_TYPE_KV_Q4)) {
        cli_error("%s: unknown KV cache type '%s' (use f32, f16, q8_0, q4_0 or q4)", flag, s);
        return false;
    }
    *out = t;
    return true;
}

void cli_human_bytes(char *buf, size_t cap, double b)
{
    const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    int u = 0;
    while (b >= 1024.0 && u < 5) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", b, units[u]);
}

kvi_model *cli_load_model(const char *path, bool use_mmap, const char *tokenizer_path)
{
    if (!path) {
        path = cli_default_model();
        if (!path) {
            cli_error("no model given and ../shared/models/stories260K.gguf not found: use -m MODEL.gguf");
            return NULL;
        }
        fprintf(stderr, "kvinfer: no -m given, using %s\n", path);
    }
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.use_mmap = use_mmap;
    lp.tokenizer_path = tokenizer_path;
    const char *repack = getenv("KVINFER_REPACK");
    if (repack && !strcmp(repack, "0")) lp.repack = false;
    char why[sizeof((kvi_error){ 0 }).msg + 128];
    if (cli_pipe_load_params(path, &lp, why, sizeof why)) {
        cli_error("cannot load model '%s': %s", path, why);
        return NULL;
    }
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, &lp, &err);
    if (!m) {
        cli_error("cannot load model '%s': %s", path, err.msg[0] ? err.msg : kvi_strerror(err.code));
        return NULL;
    }
    if (!kvi_model_has_weights(m)) {
        kvi_model_free(m);
        cli_error("'%s' holds no weights (a vocabulary-only file?): this command needs a model", path);
        return NULL;
    }
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    if (info.n_unread_tensors > 0)
        fprintf(stderr,
                "kvinfer: note: %d tensors of the file's vision part or multi-token-prediction block left "
                "unread (the %s text model runs)\n",
                info.n_unread_tensors, info.arch);
    return m;
}

int cli_prompt_ids(const kvi_model *m, const char *text, const char *file, const char *ids_str,
                   bool parse_special, int32_t **ids, int32_t *n)
{
    if ((text != NULL) + (file != NULL) + (ids_str != NULL) > 1)
        return cli_error("give the prompt only once: -p TEXT, -f FILE or --tokens IDS");
    if (ids_str) {
        int32_t *arr = NULL, k = 0;
        if (!cli_parse_ids(ids_str, &arr, &k))
            return cli_error("--tokens: '%s' is not a list of token ids (like 1,2,3)", ids_str);
        if (k == 0) {
            free(arr);
            return cli_error("--tokens: the list of token ids is empty");
        }
        if (cli_check_ids(m, arr, k) != 0) {
            free(arr);
            return 1;
        }
        *ids = arr;
        *n = k;
        return 0;
    }
    char *owned = NULL;
    size_t len = 0;
    if (file) {
        owned = cli_read_file(file, &len);
        if (!owned) return cli_error("cannot read prompt file '%s': %s", file, strerror(errno));
        if (len > 0 && owned[len - 1] == '\n') owned[--len] = '\0';
        text = owned;
    } else if (text) {
        len = strlen(text);
    } else {
        text = "";
    }
    int32_t *arr = NULL, k = 0;
    int rc = cli_tokenize(m, text, len, true, parse_special, &arr, &k);
    free(owned);
    if (rc != 0) return rc;
    if (k == 0) {
        free(arr);
        return cli_error("the prompt is empty and the model adds no BOS token: give a prompt with -p");
    }
    *ids = arr;
    *n = k;
    return 0;
}

void cli_engine_params_default(kvi_engine_params *p)
{
    kvi_engine_params_default(p);
    const char *chunk = getenv("KVINFER_FWD_CHUNK");
    int64_t v;
    if (chunk && cli_parse_i64(chunk, 1, INT32_MAX, &v)) p->fwd_chunk = (int32_t)v;
}

int cli_apply_env(void)
{
    kvi_cpu_params cp;
    kvi_cpu_params_default(&cp);
    const char *isa = getenv("KVINFER_ISA");
    /* as before: an unknown KVINFER_ISA leaves the best path */
    if (isa && (!strcasecmp(isa, "avx2") || !strcasecmp(isa, "scalar"))) cp.isa = isa;
    const char *amx = getenv("KVINFER_AMX");
    if (amx && !strcmp(amx, "0")) cp.amx = false;
    const char *amx_f16 = getenv("KVINFER_AMX_F16");
    if (amx_f16 && !strcmp(amx_f16, "1")) cp.amx_f16 = true;
    kvi_error err = { 0 };
    if (kvi_cpu_configure(&cp, &err)) return cli_error("%s", err.msg);
    return 0;
}
