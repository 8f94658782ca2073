/*
 * cmd_template.c — `kvinfer template`: renders a model's chat template for an
 * OpenAI-style chat body and prints the prompt, byte for byte and nothing else
 * (no newline added), as Hugging Face transformers would render it.
 *
 * Where the template and the bos/eos texts come from:
 *   - a GGUF: tokenizer.chat_template, and the text of the vocabulary's BOS / EOS;
 *   - a Hugging Face folder, or a tokenizer.json: the folder's chat_template.jinja
 *     when present, else tokenizer_config.json's chat_template (the "default" one
 *     of a list); bos_token / eos_token from tokenizer_config.json (a string or
 *     {"content": ...}), left undefined where it names none;
 *   - --chat-template-file F replaces the template (not bos/eos).
 * A template error (raise_exception, a type error, a limit) exits 1 with its
 * message on stderr.
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char template_help[] =
    "usage: kvinfer template -m MODEL [--chat-template-file F] -f REQUEST.json\n"
    "\n"
    "Prints the prompt the model's chat template (Jinja) renders for an OpenAI-style\n"
    "chat body, exactly as Hugging Face transformers renders it, and nothing else.\n"
    "The body's fields: messages (content a string or a list of {\"type\": \"text\"}\n"
    "parts; tool_calls whose function.arguments are JSON strings are parsed), tools,\n"
    "add_generation_prompt (absent: true), chat_template_kwargs (each key a variable,\n"
    "e.g. enable_thinking), continue_final_message (true: the prompt ends right after\n"
    "the final message's text, which the reply continues; add_generation_prompt then\n"
    "defaults to false and may not be true).\n"
    "\n"
    "options:\n"
    "  -m, --model PATH          a GGUF (tokenizer.chat_template, BOS/EOS of its vocabulary),\n"
    "                            a Hugging Face folder or its tokenizer.json (chat_template.jinja\n"
    "                            or tokenizer_config.json, whose bos_token / eos_token are used)\n"
    "  --chat-template-file F    use the Jinja template in F instead of the model's\n"
    "  -f, --file REQUEST.json   the chat body\n" CLI_CONTENT_FORMAT_HELP
    "  -h, --help                this help\n";

typedef struct tmpl_src {
    char *text; /* the template (malloc'd), NULL when none */
    char *bos, *eos;
} tmpl_src;

static char *dup_token(const cJSON *t)
{
    if (cJSON_IsString(t)) return strdup(t->valuestring);
    const cJSON *c = cJSON_GetObjectItem(t, "content");
    return cJSON_IsString(c) ? strdup(c->valuestring) : NULL;
}

/* The folder's chat_template.jinja, tokenizer_config.json's template and tokens. */
static int load_hf(const char *dir, tmpl_src *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    size_t len;
    s->text = cli_read_file(path, &len);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *cfg_text = cli_read_file(path, &len);
    if (!cfg_text) return 0; /* no config: no tokens, maybe a template file */
    cJSON *cfg = cJSON_Parse(cfg_text);
    free(cfg_text);
    if (!cfg) return cli_error("%s: not valid JSON", path);
    s->bos = dup_token(cJSON_GetObjectItem(cfg, "bos_token"));
    s->eos = dup_token(cJSON_GetObjectItem(cfg, "eos_token"));
    const cJSON *ct = cJSON_GetObjectItem(cfg, "chat_template");
    if (!s->text && cJSON_IsString(ct)) s->text = strdup(ct->valuestring);
    if (!s->text && cJSON_IsArray(ct)) {
        const cJSON *e, *pick = NULL;
        cJSON_ArrayForEach(e, ct)
        {
            const cJSON *name = cJSON_GetObjectItem(e, "name");
            if (!pick || (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))) pick = e;
        }
        const cJSON *t = cJSON_GetObjectItem(pick, "template");
        if (cJSON_IsString(t)) s->text = strdup(t->valuestring);
    }
    cJSON_Delete(cfg);
    return 0;
}

static int load_source(const char *model, tmpl_src *s)
{
    struct stat st;
    if (stat(model, &st) != 0) return cli_error("cannot open '%s': %s", model, strerror(errno));
    if (S_ISDIR(st.st_mode)) return load_hf(model, s);
    size_t l = strlen(model);
    if (l >= 5 && !strcmp(model + l - 5, ".json")) {
        char *dir = strdup(model);
        if (!dir) return cli_error("out of memory");
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            strcpy(dir, ".");
        int rc = load_hf(dir, s);
        free(dir);
        return rc;
    }
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(model, &err);
    if (!m)
        return cli_error("cannot load the vocabulary of '%s': %s", model,
                         err.msg[0] ? err.msg : kvi_strerror(err.code));
    const char *t = kvi_model_chat_template(m);
    if (t) s->text = strdup(t);
    s->bos = cli_token_text(m, kvi_token_bos(m));
    s->eos = cli_token_text(m, kvi_token_eos(m));
    kvi_model_free(m);
    return 0;
}

int cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tfile = NULL, *rfile = NULL;
    int cformat = KVI_CONTENT_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(template_help, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--chat-template-file")) {
            if (!(tfile = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(rfile = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--chat-template-content-format")) {
            if (cli_flag_content_format(cli_flag_value(argc, argv, &i), &cformat) < 0) return 1;
        } else {
            return cli_error("template: unknown argument '%s' (see kvinfer template --help)", a);
        }
    }
    if (!model && !tfile)
        return cli_error("template: no model given: use -m MODEL (or --chat-template-file F)");
    if (!rfile) return cli_error("template: no request given: use -f REQUEST.json");
    tmpl_src s = { 0 };
    int rc = model ? load_source(model, &s) : 0;
    size_t tlen = 0, rlen = 0;
    char *req = NULL, *out = NULL;
    kvi_chat_template *t = NULL;
    if (rc) goto done;
    if (tfile) {
        free(s.text);
        if (!(s.text = cli_read_file(tfile, &tlen))) {
            rc = cli_error("cannot read '%s': %s", tfile, strerror(errno));
            goto done;
        }
    } else if (!s.text) {
        rc = cli_error("'%s' has no chat template: give one with --chat-template-file F", model);
        goto done;
    } else {
        tlen = strlen(s.text);
    }
    if (!(req = cli_read_file(rfile, &rlen))) {
        rc = cli_error("cannot read '%s': %s", rfile, strerror(errno));
        goto done;
    }
    kvi_error err = { 0 };
    if (!(t = kvi_chat_template_parse(s.text, tlen, &err))) {
        rc = cli_error("%s", err.msg);
        goto done;
    }
    kvi_chat_template_set_content_format(t, (kvi_content_format)cformat);
    if (!(out = kvi_chat_template_render(t, req, s.bos, s.eos, &err))) {
        rc = cli_error("%s", err.msg);
        goto done;
    }
    if (fwrite(out, 1, strlen(out), stdout) != strlen(out)) rc = cli_error("writing to stdout failed");
done:
    free(out);
    kvi_chat_template_free(t);
    free(req);
    free(s.text);
    free(s.bos);
    free(s.eos);
    return rc;
}
