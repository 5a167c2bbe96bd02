/*
 * probectl.c - the command-line client of probed: `probectl <command> [args]`.
 *
 * Each command lives in its own file with a <command>_main(); this file only dispatches, after
 * the options every command takes before its name: -H HOST and --transport TEMPLATE send every
 * call to HOST's daemon (ctl/transport.h), --socket PATH to the daemon listening there.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl/backtrace.h"
#include "ctl/client.h"
#include "ctl/cluster.h"
#include "ctl/crashes.h"
#include "ctl/debug.h"
#include "ctl/commands.h"
#include "ctl/eval.h"
#include "ctl/export.h"
#include "ctl/mcp.h"
#include "ctl/web.h"
#include "ctl/ops.h"
#include "ctl/record.h"
#include "ctl/top.h"
#include "ctl/remote.h"
#include "ctl/torch.h"
#include "ctl/ncclras.h"
#include "ctl/nodes.h"
#include "ctl/transport.h"

struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *help;
    bool local_only; /* makes no sense on another node's daemon (-H) */
};

static const struct command commands[] = {
    {"backtrace", backtrace_main, "print every thread's Python stack of a running process"},
    {"dump", backtrace_main, "alias of backtrace"},
    {"attach", attach_main, "start sampling a process into the daemon's database"},
    {"detach", detach_main, "stop sampling a process"},
    {"list", list_main, "the attached processes, their rate, samples and state"},
    {"query", query_main, "read-only SQL over the samples and the live stacks"},
    {"top", top_main, "the hottest functions of an attached process, live"},
    {"record", record_main,
     "sample pids (or a command) for a while and write the profile: svg, folded, speedscope, "
     "chrometrace, pprof"},
    {"run", run_main, "run a command (python train.py ...) attached from its start", true},
    {"flamegraph", flamegraph_main,
     "a flame graph of the stored samples: svg, folded, speedscope, chrometrace, pprof"},
    {"eval", eval_main, "run Python code inside a running process"},
    {"repl", repl_main, "an interactive Python prompt inside a running process"},
    {"memory", memory_main, "memory now, peak and growth per minute of an attached process"},
    {"config", config_main, "read or change the daemon's settings live"},
    {"export", export_main,
     "a self-contained SQLite copy of your data, views included, for sqlite3"},
    {"status", status_main, "the daemon: version, database, samples written and lost, sources"},
    {"torch", torch_main,
     "a PyTorch job: per-step, per-module trace (on|off|summary), profile (ops, GPU kernels), GPU "
     "memory"},
    {"crashes", crashes_main, "how attached processes ended: status, signal, OOM, last stacks"},
    {"catch", catch_main,
     "record a process's uncaught exceptions and fatal signals as they happen"},
    {"pause", pause_main, "stop a thread at its next Python line in pdb (or debugpy: --dap)"},
    {"debug", debug_main, "join the terminal to a process's pdb session"},
    {"hang", hang_main, "every rank's stack at one instant, grouped: who holds everyone up"},
    {"nccl", nccl_main,
     "a job's NCCL communicators from NCCL's own RAS: per rank counts, who is behind or gone"},
    {"cluster", cluster_main,
     "a job on many nodes: list, attach, detach, query, flamegraph, stragglers"},
    {"mcp", mcp_main, "a Model Context Protocol server on stdio, for AI assistants", true},
    {"web", web_main, "the web view: targets, live stacks, flame graphs, SQL (as you)"},
    {"proxy", proxy_main, "join stdin/stdout to the daemon (the far end of `ssh -T HOST`)", true},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: probectl [--socket PATH | -H HOST [--transport TEMPLATE]] <command>"
                 " [options]\n\n"
                 "  --socket PATH         the daemon's socket (default $PROBED_SOCKET, else\n"
                 "                        /run/probed/probed.sock)\n"
                 "  -H, --host HOST       ask HOST's daemon, through the transport\n"
                 "  --transport TEMPLATE  how to reach it, {host} standing for the host\n"
                 "                        (default $PROBED_TRANSPORT, else\n"
                 "                        '" TRANSPORT_DEFAULT "')\n"
                 "\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\nRun `probectl help <command>` for a command's options; -V: the version.\n");
}

/* The edits (insertions, deletions, substitutions) from @a to @b, up to 3 (more: 3). */
static int edits(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[32], prev, cur;

    if (la >= sizeof(row) / sizeof(row[0]) || lb >= sizeof(row) / sizeof(row[0]))
        return 3;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            cur = row[j];
            row[j] = prev + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < row[j])
                row[j] = row[j - 1] + 1;
            if (cur + 1 < row[j])
                row[j] = cur + 1;
            prev = cur;
        }
    }
    return row[lb] < 3 ? row[lb] : 3;
}

/* The command @name is most likely a typo of (at most 2 edits, or its start), or NULL. */
static const char *nearest_command(const char *name)
{
    const char *best = NULL;
    int best_d = 3;

    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        int d = strlen(name) >= 3 && strncmp(commands[i].name, name, strlen(name)) == 0
                    ? 1
                    : edits(name, commands[i].name);

        if (d < best_d) {
            best_d = d;
            best = commands[i].name;
        }
    }
    return best;
}

#define HELP_MAX 16384 /* a command's --help text, read for its options */

/* What `@cmd --help` prints (run in a child, its stdout into a pipe) into @buf; its length. */
static size_t help_text(const struct command *cmd, char *buf, size_t len)
{
    int fds[2];
    size_t n = 0;
    ssize_t got;
    pid_t pid;

    if (len == 0 || pipe(fds) < 0)
        return 0;
    if ((pid = fork()) == 0) {
        static char help_opt[] = "--help";
        char name[32], *again[] = {name, help_opt, NULL};

        snprintf(name, sizeof(name), "%s", cmd->name);
        close(fds[0]);
        dup2(fds[1], STDOUT_FILENO);
        _exit(cmd->main(2, again) == 0 && fflush(stdout) == 0 ? 0 : 1);
    }
    close(fds[1]);
    while (pid > 0 && n + 1 < len && (got = read(fds[0], buf + n, len - 1 - n)) > 0)
        n += (size_t)got;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    buf[n] = '\0';
    return n;
}

/*
 * probectl __complete WORD... : what the shell may put for the last word (bash's and zsh's
 * completion, packaging/completion/, call it): a command's name, or one of the options its
 * --help names (the usage text is the one list of a command's options: test_cli.py checks
 * that getopt takes each and the man page names each). Nothing for a pid or a file: the
 * shell's own completion then.
 */
static int complete_words(int argc, char **argv)
{
    const char *last = argc > 0 ? argv[argc - 1] : "";
    size_t n = strlen(last);
    int i = 0;

    while (i < argc - 1 && argv[i][0] == '-') /* the options before the command */
        i += strcmp(argv[i], "-H") == 0 || strcmp(argv[i], "--host") == 0 ||
                     strcmp(argv[i], "--socket") == 0 || strcmp(argv[i], "--transport") == 0
                 ? 2
                 : 1;
    if (i >= argc - 1) { /* the command itself */
        for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
            if (strncmp(commands[c].name, last, n) == 0)
                printf("%s\n", commands[c].name);
        if (strncmp("help", last, n) == 0)
            printf("help\n");
        return 0;
    }
    if (last[0] != '-')
        return 0;
    for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++) {
        static char text[HELP_MAX];
        char seen[HELP_MAX] = "\n";

        if (strcmp(argv[i], commands[c].name) != 0)
            continue;
        help_text(&commands[c], text, sizeof(text));
        for (char *p = text; (p = strstr(p, "--")) != NULL;) {
            char word[64], key[70];
            size_t k = 0;

            if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '-')) {
                p += 2;
                continue;
            }
            while (k + 1 < sizeof(word) && (isalnum((unsigned char)p[k]) || p[k] == '-'))
                word[k] = p[k], k++;
            word[k] = '\0';
            p += k ? k : 2;
            snprintf(key, sizeof(key), "\n%s\n", word);
            if (k <= 2 || strstr(seen, key) || strncmp(word, last, n) != 0 ||
                strlen(seen) + k + 2 >= sizeof(seen))
                continue;
            strcat(seen, word);
            strcat(seen, "\n");
            printf("%s\n", word);
        }
    }
    return 0;
}

/* The value of option @argv[*i] if it is @shrt or @lng ("--x V" or "--x=V"), advancing *i;
 * NULL when it is another. */
static const char *global_opt(int argc, char **argv, int *i, const char *shrt, const char *lng)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);

    if ((shrt && strcmp(a, shrt) == 0) || strcmp(a, lng) == 0) {
        if (*i + 1 >= argc)
            return "";
        return argv[++*i];
    }
    if (strncmp(a, lng, n) == 0 && a[n] == '=')
        return a + n + 1;
    return NULL;
}

int main(int argc, char **argv)
{
    const char *host = NULL, *template = NULL, *socket = NULL, *v;
    char err[512];
    int i = 1;

    for (; i < argc && argv[i][0] == '-'; i++) {
        if ((v = global_opt(argc, argv, &i, "-H", "--host")))
            host = v;
        else if ((v = global_opt(argc, argv, &i, NULL, "--socket")))
            socket = v;
        else if ((v = global_opt(argc, argv, &i, NULL, "--transport")))
            template = v;
        else
            break;
        if (!*v) {
            fprintf(stderr, "probectl: %s needs a value\n", argv[i]);
            return 2;
        }
    }
    if (template && !host) {
        fprintf(stderr, "probectl: --transport goes with -H HOST\n");
        return 2;
    }
    if (socket && host) {
        fprintf(stderr, "probectl: --socket (this node's daemon) or -H HOST, not both\n");
        return 2;
    }
    if (socket)
        setenv("PROBED_SOCKET", socket, 1); /* what every command's client_socket_path reads */
    if (host && !nodes_host_name_ok(host)) {
        fprintf(stderr,
                "probectl: -H '%s' is not a host name (letters, digits, '.', '-', '_', ':', '@';"
                " not starting with '-')\n",
                host);
        return 2;
    }
    if (host) {
        template = transport_template(template);
        if (transport_template_check(template, err, sizeof(err)) < 0) {
            fprintf(stderr, "probectl: %s\n", err);
            return 2;
        }
        client_use_remote(host, template);
    }
    argc -= i - 1;
    argv += i - 1;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "__complete") == 0)
        return complete_words(argc - 2, argv + 2);
    if (strcmp(argv[1], "help") == 0 && argc == 3) { /* help CMD: CMD --help */
        static char help_opt[] = "--help";
        char *again[] = {argv[2], help_opt, NULL};

        for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
            if (strcmp(argv[2], commands[c].name) == 0)
                return commands[c].main(2, again);
        fprintf(stderr, "probectl help: no command '%s'\n", argv[2]);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("probectl %s\n", PROBED_VERSION);
        return 0;
    }
    for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
        if (strcmp(argv[1], commands[c].name) == 0) {
            if (host && commands[c].local_only) {
                fprintf(stderr, "probectl: %s runs on this node only; run it on %s instead\n",
                        argv[1], host);
                return 2;
            }
            return commands[c].main(argc - 1, argv + 1);
        }
    if (argv[1][0] == '-') {
        fprintf(stderr,
                "probectl: unknown option '%s' (before the command: --socket, -H,"
                " --transport; -V, --help)\n",
                argv[1]);
        return 2;
    }
    if ((v = nearest_command(argv[1])) != NULL)
        fprintf(stderr, "probectl: unknown command '%s': did you mean `%s`?\n", argv[1], v);
    else
        fprintf(stderr, "probectl: unknown command '%s' (probectl --help lists them)\n", argv[1]);
    return 2;
}
