/*
 * cmd_tokenize.c — `kvinfer tokenize` (text -> ids) and `kvinfer detokenize`
 * (ids -> text). Both load only the vocabulary (kvi_vocab_load: no weights), so
 * any GGUF with a tokenizer section works, vocabulary-only files included.
 *
 * Output: one line per token "id<TAB>'piece'" (piece escaped C-style), or with
 * --json exactly one JSON document on stdout: {"tokens": [...]} / {"text": "..."}.
 */
#include "cli/cli_opts.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tokenize_help[] =
    "usage: kvinfer tokenize [-m MODEL] [--no-bos] [--special] [--json] [-f FILE | -p TEXT | [--] TEXT...]\n"
    "\n"
    "Prints the token ids of a text, one line per token: id<TAB>'piece'.\n"
    "Any text is accepted, including empty text, leading spaces and newlines.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH   GGUF with a tokenizer section (vocabulary-only files work),\n"
    "                     llama2.c tokenizer.bin or tokenizer.json\n"
    "                     (default: ../shared/models/stories260K.gguf if it exists)\n"
    "  -p, --prompt TEXT  the text (default: the remaining arguments, joined by spaces)\n"
    "  -f, --file PATH    read the text from a file (exactly its bytes)\n"
    "  --no-bos           add no special tokens (BOS/EOS); normalisation is kept\n"
    "                     (default: add them as the model's metadata says)\n"
    "  --special          text such as <s> becomes its special token (default: off)\n"
    "  --json             print {\"tokens\": [...]} and nothing else\n"
    "  -h, --help         this help\n";

static const char detokenize_help[] =
    "usage: kvinfer detokenize [-m MODEL] [--special] [--json] [--] IDS...\n"
    "\n"
    "Prints the text of token ids, given as \"1,2,3\" or as separate arguments.\n"
    "Out-of-range ids are an error. The space SentencePiece adds after a leading\n"
    "BOS is removed.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH   GGUF with a tokenizer section, llama2.c tokenizer.bin or\n"
    "                     tokenizer.json (default: ../shared/models/stories260K.gguf\n"
    "                     if it exists)\n"
    "  --special          render special tokens such as <s> (default: off)\n"
    "  --json             print {\"text\": \"...\"} and nothing else\n"
    "  -h, --help         this help\n";

/* Loads the vocabulary of path (or the default model); NULL with an error printed. */
static kvi_model *load_vocab(const char *path)
{
    if (!path) {
        path = cli_default_model();
        if (!path) {
            cli_error("no model given: use -m MODEL.gguf");
            return NULL;
        }
        fprintf(stderr, "kvinfer: no -m given, using %s\n", path);
    }
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(path, &err);
    if (!m) {
        cli_error("cannot load the vocabulary of '%s': %s", path,
                  err.msg[0] ? err.msg : kvi_strerror(err.code));
        return NULL;
    }
    return m;
}

/* Prints a piece between single quotes, C-escaped so that every byte is visible. */
static void print_escaped_piece(const char *s, size_t len)
{
    putchar('\'');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\'': fputs("\\'", stdout); break;
        default:
            if (c < 0x20 || c == 0x7F)
                printf("\\x%02x", c);
            else
                putchar(c); /* UTF-8 bytes pass through */
        }
    }
    putchar('\'');
}

/* Joins argv[first..argc) with single spaces into a malloc'd string. */
static char *join_args(int argc, char **argv, int first, size_t *len)
{
    size_t total = 1;
    for (int i = first; i < argc; i++) total += strlen(argv[i]) + 1;
    char *s = malloc(total); /* (total) bytes */
    if (!s) return NULL;
    size_t o = 0;
    for (int i = first; i < argc; i++) {
        if (i > first) s[o++] = ' ';
        size_t l = strlen(argv[i]);
        memcpy(s + o, argv[i], l);
        o += l;
    }
    s[o] = '\0';
    *len = o;
    return s;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *prompt = NULL, *file = NULL;
    bool no_bos = false, special = false, json = false;
    cli_common c; /* -m only (cli/cli_opts.h) */
    cli_common_init(&c);
    int first_pos = argc; /* first positional argument */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if ((r = cli_opt_common(argc, argv, &i, &c, CLI_OPT_MODEL)) != 0) {
            if (r < 0) return 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--")) {
            first_pos = i + 1;
            break;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_error("tokenize: unknown option '%s' (kvinfer tokenize --help)", a);
        } else {
            first_pos = i;
            break;
        }
    }
    /* positional text: everything from first_pos on, options no longer parsed */
    bool have_pos = first_pos < argc;
    int n_sources = (prompt != NULL) + (file != NULL) + have_pos;
    if (n_sources == 0) return cli_error("tokenize: no text given: use -p TEXT, -f FILE or TEXT");
    if (n_sources > 1) return cli_error("tokenize: give the text only once (-p, -f or TEXT)");

    char *owned = NULL;
    const char *text;
    size_t len;
    if (file) {
        owned = cli_read_file(file, &len);
        if (!owned) return cli_error("cannot read '%s': %s", file, strerror(errno));
        text = owned;
    } else if (prompt) {
        text = prompt;
        len = strlen(prompt);
    } else {
        owned = join_args(argc, argv, first_pos, &len);
        if (!owned) return cli_error("out of memory");
        text = owned;
    }

    kvi_model *m = load_vocab(c.model);
    if (!m) {
        free(owned);
        return 1;
    }
    int32_t *ids = NULL, n = 0;
    int rc = cli_tokenize(m, text, len, !no_bos, special, &ids, &n);
    if (rc == 0) {
        if (json) {
            cJSON *root = cJSON_CreateObject();
            cJSON *arr = cJSON_AddArrayToObject(root, "tokens");
            for (int32_t i = 0; arr && i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            char *s = arr ? cJSON_PrintUnformatted(root) : NULL;
            if (s)
                printf("%s\n", s);
            else
                rc = cli_error("out of memory building JSON");
            free(s);
            cJSON_Delete(root);
        } else {
            char small[256];
            for (int32_t i = 0; i < n; i++) {
                int32_t l = kvi_token_to_piece(m, ids[i], small, sizeof small, true);
                printf("%d\t", (int)ids[i]);
                if (l < 0) {
                    fputs("'?'", stdout);
                } else if ((size_t)l <= sizeof small) {
                    print_escaped_piece(small, (size_t)l);
                } else {
                    char *big = malloc((size_t)l); /* (l) bytes of one long piece */
                    if (big && kvi_token_to_piece(m, ids[i], big, (size_t)l, true) == l)
                        print_escaped_piece(big, (size_t)l);
                    else
                        fputs("'?'", stdout);
                    free(big);
                }
                putchar('\n');
            }
        }
    }
    free(ids);
    kvi_model_free(m);
    free(owned);
    return rc;
}

int cmd_detokenize(int argc, char **argv)
{
    cli_common c; /* -m only (cli/cli_opts.h) */
    cli_common_init(&c);
    bool special = false, json = false;
    int32_t *ids = NULL, n = 0;
    bool seen_ids = false, only_ids = false;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        int r;
        bool is_flag = !only_ids && a[0] == '-' && a[1] != '\0' && !(a[1] >= '0' && a[1] <= '9');
        if (is_flag && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            fputs(detokenize_help, stdout);
            free(ids);
            return 0;
        } else if (is_flag && (r = cli_opt_common(argc, argv, &i, &c, CLI_OPT_MODEL)) != 0) {
            if (r < 0) rc = 1;
        } else if (is_flag && !strcmp(a, "--special")) {
            special = true;
        } else if (is_flag && !strcmp(a, "--json")) {
            json = true;
        } else if (is_flag && !strcmp(a, "--")) {
            only_ids = true;
        } else if (is_flag) {
            rc = cli_error("detokenize: unknown option '%s' (kvinfer detokenize --help)", a);
        } else {
            int32_t *more = NULL, k = 0;
            if (!cli_parse_ids(a, &more, &k)) {
                rc = cli_error("detokenize: '%s' is not a list of token ids (like 1,2,3)", a);
                break;
            }
            int32_t *grown = realloc(ids, ((size_t)n + (size_t)k + 1) * sizeof *ids);
            if (!grown) {
                free(more);
                rc = cli_error("out of memory");
                break;
            }
            ids = grown;
            if (k > 0) memcpy(ids + n, more, (size_t)k * sizeof *ids);
            n += k;
            free(more);
            seen_ids = true;
        }
    }
    if (rc == 0 && !seen_ids) rc = cli_error("detokenize: no token ids given (like 1,2,3)");
    kvi_model *m = NULL;
    if (rc == 0 && !(m = load_vocab(c.model))) rc = 1;
    if (rc == 0) rc = cli_check_ids(m, ids, n);
    char *text = NULL;
    size_t len = 0;
    if (rc == 0) {
        bool lead_bos = n > 0 && ids[0] == kvi_token_bos(m);
        text = cli_detokenize(m, ids, n, special, lead_bos, &len);
        if (!text) rc = 1;
    }
    if (rc == 0) {
        if (json) {
            char *clean = kvi_utf8_sanitize(text, len);
            cJSON *root = cJSON_CreateObject();
            char *s = NULL;
            if (clean && root && cJSON_AddStringToObject(root, "text", clean))
                s = cJSON_PrintUnformatted(root);
            if (s)
                printf("%s\n", s);
            else
                rc = cli_error("out of memory building JSON");
            free(s);
            cJSON_Delete(root);
            free(clean);
        } else {
            fwrite(text, 1, len, stdout);
            putchar('\n');
        }
    }
    free(text);
    if (m) kvi_model_free(m);
    free(ids);
    return rc;
}
