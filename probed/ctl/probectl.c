/*
 * probectl.c - the command-line client of probed: `probectl <command> [args]`.
 *
 * Each command lives in its own file with a <command>_main(); this file only dispatches.
 */
#include <stdio.h>
#include <string.h>

#include "ctl/backtrace.h"
#include "ctl/commands.h"
#include "ctl/eval.h"
#include "ctl/ops.h"
#include "ctl/remote.h"
#include "ctl/torch.h"

struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"backtrace", backtrace_main, "print every thread's Python stack of a running process"},
    {"dump", backtrace_main, "alias of backtrace"},
    {"attach", attach_main, "start sampling a process into the daemon's database"},
    {"detach", detach_main, "stop sampling a process"},
    {"list", list_main, "the attached processes, their rate, samples and state"},
    {"query", query_main, "read-only SQL over the samples and the live stacks"},
    {"top", top_main, "the hottest functions of an attached process, live"},
    {"run", run_main, "run a command (python train.py ...) attached from its start"},
    {"flamegraph", flamegraph_main, "a flame graph (SVG or folded) of the stored samples"},
    {"eval", eval_main, "run Python code inside a running process"},
    {"repl", repl_main, "an interactive Python prompt inside a running process"},
    {"memory", memory_main, "memory now, peak and growth per minute of an attached process"},
    {"config", config_main, "read or change the daemon's settings live"},
    {"torch", torch_main, "per-step, per-module time and memory of a PyTorch job (on|off|summary)"},
    {"proxy", proxy_main, "join stdin/stdout to the daemon (the far end of `ssh -T HOST`)"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: probectl <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\nRun `probectl <command> --help` for a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("probectl %s\n", PROBED_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "probectl: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
