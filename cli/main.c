/*
 * main.c — entry point of the `kvinfer` command-line tool: global flags
 * (--help, --version) and dispatch to one cmd_* function per command.
 *
 * Invariant: the process exit status is the command's return value, 0 on
 * success and 1 on any error (each error printed as one line on stderr); only
 * this file decides to exit.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#define KVI_CLI_VERSION "0.1.0"

/* Measurement commands (cmd_bench.c, cmd_perplexity.c, cmd_kvplan.c). */
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_kvplan(int argc, char **argv);
int cmd_lora_merge(int argc, char **argv); /* cmd_lora_merge.c */
int cmd_quantize(int argc, char **argv);   /* cmd_quantize.c */

typedef struct cli_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary; /* one line for the command list */
} cli_command;

static const cli_command commands[] = {
    { "run", cmd_run, "generate text from a prompt (prefill + KV-cached decode), with timings" },
    { "logits", cmd_logits, "print the logits of every prompt position (one prefill pass)" },
    { "tokenize", cmd_tokenize, "print the token ids of a text" },
    { "sampler", cmd_sampler, "run llama.cpp's sampler chain on one logits case (goldens' format)" },
    { "detokenize", cmd_detokenize, "print the text of token ids" },
    { "template", cmd_template, "print the prompt a model's chat template (Jinja) renders for a chat body" },
    { "synth", cmd_synth, "write a synthetic GGUF model with random weights" },
    { "toy", cmd_toy, "a tiny worked example of prefill, decode and the KV cache" },
    { "serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching" },
    { "chat", cmd_chat, "interactive chat in the terminal, KV cache kept between turns" },
    { "loadgen", cmd_loadgen, "load generator for a running server (throughput, TTFT, ITL)" },
    { "bench", cmd_bench, "prefill/decode tokens/s (llama-bench style) against the machine's limits" },
    { "perplexity", cmd_perplexity, "perplexity of a text file; KL divergence against saved logits" },
    { "kv-plan", cmd_kvplan, "KV cache bytes per token/sequence and what fits in a memory size" },
    { "embed", cmd_embed, "embedding vectors of texts (JSON lines), pooled as the model says" },
    { "rerank", cmd_rerank, "a reranker's relevance scores of documents for a query" },
    { "lora-merge", cmd_lora_merge, "write a model with LoRA adapters merged into its matrices" },
    { "quantize", cmd_quantize, "write a model in another weight type, as llama-quantize does" },
};

static void print_help(FILE *f)
{
    fprintf(f, "kvinfer — an LLM inference engine for GGUF models (llama-family) in C11.\n"
               "A prompt is run through the network in one prefill pass, then tokens are\n"
               "decoded one at a time against a paged key/value cache.\n"
               "\n"
               "usage: kvinfer COMMAND [options]\n"
               "       kvinfer --help | --version\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\noptions of every command that loads a model:\n"
               "  --mem-limit SIZE   weights one process may hold (e.g. 8GiB): a model over it is\n"
               "                     refused, saying how many mpirun ranks would fit it\n"
               "  --pp-layers SPEC   under mpirun: each rank's layers, e.g. 0-7,8-15 (default: balanced\n"
               "                     by weight bytes); mpirun -np N kvinfer COMMAND ... splits the model\n"
               "                     into N pipeline stages, each rank reading only its layers (run,\n"
               "                     logits, serve, perplexity, chat, bench)\n"
               "  --pp-timeout S     under mpirun: seconds rank 0 waits for another rank (start-up, each\n"
               "                     step) before it fails the run and ends the job (default 300; 0: forever)\n");
    fprintf(f, "\nkvinfer COMMAND --help for details.\n");
}

/* The commands that run split over several ranks (cli_pipe.c). */
static bool pipeline_command(const char *cmd)
{
    return !strcmp(cmd, "run") || !strcmp(cmd, "logits") || !strcmp(cmd, "serve") || !strcmp(cmd, "perplexity") ||
           !strcmp(cmd, "chat") || !strcmp(cmd, "bench");
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv)
{
    if (cli_pipe_begin(&argc, &argv)) return 1;
    int rc;
    if (cli_pipe_active() && (argc < 2 || !pipeline_command(argv[1])))
        rc = cli_error("under mpirun with several ranks only run, logits, serve, perplexity, chat and bench "
                       "are supported yet");
    else if (cli_pipe_worker())
        rc = cli_apply_env() || cli_pipe_worker_main(argc - 1, argv + 1);
    else
        rc = dispatch(argc, argv);
    cli_pipe_end();
    return rc;
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_help(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        if (cli_apply_env()) return 1;
        printf("kvinfer %s (isa: %s)\n", KVI_CLI_VERSION, kvi_isa_name());
        return 0;
    }
    if (cli_apply_env()) return 1;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (!strcmp(cmd, commands[i].name)) {
            int rc = commands[i].fn(argc - 1, argv + 1);
            if (fflush(stdout) != 0 && rc == 0) rc = cli_error("writing to stdout failed");
            return rc == 0 ? 0 : 1;
        }
    }
    if (cmd[0] == '-') return cli_error("unknown option '%s' (kvinfer --help lists the commands)", cmd);
    return cli_error("unknown command '%s' (kvinfer --help lists the commands)", cmd);
}
