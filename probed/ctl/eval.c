/*
 * eval.c - probectl eval and probectl repl: Python code run inside a live process, through
 * the daemon (POST /v1/eval), which loads its stub into the process the first time.
 *
 * Exit status of eval: 0 the code ran, 1 it raised (the traceback is printed), 2 bad usage,
 * 3 no reply within --timeout (the code may still be running), 4 it could not run (no such
 * process, not Python, no permission, the stub could not be loaded).
 */
#define _GNU_SOURCE
#include "ctl/eval.h"

#include <editline/readline.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"

enum { EXIT_RAISED = 1, EXIT_USAGE = 2, EXIT_TIMEOUT = 3, EXIT_FAILED = 4 };

struct eval_opts {
    const char *socket;
    bool main_thread;
    double timeout_s;
};

/* One request; the reply (caller owns) and the exit status it means. */
static json_t *eval_request(const struct eval_opts *o, int pid, const char *kind, const char *code,
                            uint32_t session, const char *mode, int *ret_exit)
{
    json_t *body = json_pack("{s:i, s:s, s:s, s:b, s:f, s:i, s:s}", "pid", pid, "code", code,
                             "kind", kind, "main_thread", o->main_thread, "timeout_s", o->timeout_s,
                             "session", (json_int_t)session, "mode", mode);
    json_t *reply = NULL;
    char err[512];
    long status = 0;
    int r = body ? client_call(client_socket_path(o->socket), "POST", "/v1/eval", body, &status,
                               &reply, NULL, NULL, err, sizeof(err))
                 : -ENOMEM;
    const char *st;

    json_decref(body);
    *ret_exit = EXIT_FAILED;
    if (r < 0) {
        fprintf(stderr, "probectl: %s%s\n", body ? err : "out of memory",
                r == -ENOENT || r == -ECONNREFUSED ? " (is probed running?)" : "");
        return NULL;
    }
    if (status != 200 || !reply) {
        fprintf(stderr, "probectl: %s\n", client_error_text(reply));
        json_decref(reply);
        return NULL;
    }
    st = json_string_value(json_object_get(reply, "status"));
    *ret_exit = !st                             ? EXIT_FAILED
                : strcmp(st, "ok") == 0         ? 0
                : strcmp(st, "incomplete") == 0 ? 0
                : strcmp(st, "exception") == 0  ? EXIT_RAISED
                : strcmp(st, "timeout") == 0    ? EXIT_TIMEOUT
                                                : EXIT_FAILED;
    return reply;
}

/* Prints what the code printed; a stub error or a timeout goes to stderr. */
static void print_reply(json_t *reply, int exit_code)
{
    const char *out = json_string_value(json_object_get(reply, "output"));
    const char *msg = json_string_value(json_object_get(reply, "message"));

    if (out && exit_code != EXIT_FAILED) {
        fputs(out, stdout);
        fflush(stdout);
    } else if (out) {
        fprintf(stderr, "probectl: %s", out);
    }
    if (exit_code == EXIT_TIMEOUT)
        fprintf(stderr, "probectl: %s\n", msg ? msg : "timed out; the code may still be running");
}

static char *read_file(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (!f) {
        fprintf(stderr, "probectl eval: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    do {
        if (len + 4096 + 1 > cap) {
            char *grown = realloc(buf, cap = cap * 2 + 8192);
            if (!grown)
                break;
            buf = grown;
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
    } while (n > 0);
    if (f != stdin)
        fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static int parse_eval_opts(int argc, char **argv, struct eval_opts *o, const char **ret_file,
                           const char *usage)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 'S'},  {"main-thread", no_argument, NULL, 'm'},
        {"timeout", required_argument, NULL, 't'}, {"file", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c;

    *o = (struct eval_opts){.timeout_s = 10};
    while ((c = getopt_long(argc, argv, "f:h", longopts, NULL)) != -1) {
        int64_t ns;

        switch (c) {
        case 'S':
            o->socket = optarg;
            break;
        case 'm':
            o->main_thread = true;
            break;
        case 't':
            if (client_parse_duration(optarg, "eval", "--timeout", 0.001, 600, &ns) < 0)
                return -1;
            o->timeout_s = (double)ns / 1e9;
            break;
        case 'f':
            if (ret_file)
                *ret_file = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            exit(0);
        default:
            return -1;
        }
    }
    return 0;
}

int eval_main(int argc, char **argv)
{
    static const char usage[] =
        "usage: probectl eval <pid> \"code\" | -f script.py [--main-thread] [--timeout S]\n"
        "  Runs Python code inside the process and prints what it prints; a final\n"
        "  expression's value is printed, as in the REPL. Names not assigned by the code\n"
        "  come from the process's __main__; `main` is that module.\n"
        "  --main-thread  run on the main thread at its next safe point (default: a thread\n"
        "                 of probed's stub, which works while the main thread is blocked)\n"
        "  --timeout S    stop waiting after S seconds (default 10); the code runs on\n"
        "  exit status: 0 ran, 1 raised, 2 usage, 3 timed out, 4 could not run\n";
    const char *file = NULL;
    struct eval_opts o;
    char *code = NULL;
    json_t *reply;
    int pid, rc;

    if (parse_eval_opts(argc, argv, &o, &file, usage) < 0)
        return EXIT_USAGE;
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "eval")) < 0)
        return EXIT_USAGE;
    if (file && optind + 1 == argc)
        code = read_file(file);
    else if (!file && optind + 2 == argc)
        code = strdup(argv[optind + 1]);
    else {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    if (!code)
        return EXIT_FAILED;
    reply =
        eval_request(&o, pid, "run", code, 0, o.main_thread ? "eval --main-thread" : "eval", &rc);
    if (reply)
        print_reply(reply, rc);
    json_decref(reply);
    free(code);
    return rc;
}

/* ---- repl ---- */

/* Ctrl-C while a statement runs becomes an interrupt request; the handler only writes a byte. */
struct repl_run {
    const struct eval_opts *o;
    int pid;
    uint32_t session;
    const char *code;
    json_t *reply;
    int exit_code;
    int done_fd; /* written when the request returns */
};

static int sigint_pipe[2] = {-1, -1}; /* main-level: the SIGINT handler's only way out */

static void on_sigint(int sig)
{
    char c = (char)sig;
    ssize_t r = write(sigint_pipe[1], &c, 1);
    (void)r;
}

static void *repl_request(void *arg)
{
    struct repl_run *run = arg;
    char c = 1;
    ssize_t r;

    run->reply =
        eval_request(run->o, run->pid, "run", run->code, run->session, "repl", &run->exit_code);
    r = write(run->done_fd, &c, 1);
    (void)r;
    return NULL;
}

static void drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

/* Runs @code in the session, forwarding Ctrl-C to the target while it runs. */
static void repl_execute(const struct eval_opts *o, int pid, uint32_t session, const char *code)
{
    struct repl_run run = {.o = o, .pid = pid, .session = session, .code = code};
    int done[2];
    pthread_t th;

    if (pipe2(done, O_CLOEXEC) < 0)
        return;
    run.done_fd = done[1];
    drain(sigint_pipe[0]);
    if (pthread_create(&th, NULL, repl_request, &run) != 0) {
        close(done[0]);
        close(done[1]);
        return;
    }
    for (;;) {
        struct pollfd p[2] = {{.fd = done[0], .events = POLLIN},
                              {.fd = sigint_pipe[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        if (p[1].revents) {
            int ignored;
            drain(sigint_pipe[0]);
            json_decref(eval_request(o, pid, "interrupt", "", session, "interrupt", &ignored));
        }
    }
    pthread_join(th, NULL);
    close(done[0]);
    close(done[1]);
    if (run.reply)
        print_reply(run.reply, run.exit_code);
    json_decref(run.reply);
}

/* Whether @code is a whole statement, as the target's own compiler sees it (as the REPL
 * asks it: without the newline of the last line, so that a block waits for an empty line). */
static bool repl_complete(const struct eval_opts *o, int pid, uint32_t session, char *code)
{
    size_t len = strlen(code);
    bool had_newline = len > 0 && code[len - 1] == '\n';
    int rc;
    json_t *reply;

    if (had_newline)
        code[len - 1] = '\0';
    reply = eval_request(o, pid, "complete", code, session, "repl", &rc);
    if (had_newline)
        code[len - 1] = '\n';
    const char *st = json_string_value(json_object_get(reply, "status"));
    bool complete = !st || strcmp(st, "incomplete") != 0;

    json_decref(reply);
    return complete;
}

static char *append_line(char *buf, const char *line)
{
    size_t a = buf ? strlen(buf) : 0, b = strlen(line);
    char *grown = realloc(buf, a + b + 2);

    if (!grown)
        return buf;
    memcpy(grown + a, line, b);
    grown[a + b] = '\n';
    grown[a + b + 1] = '\0';
    return grown;
}

static void history_path(char *buf, size_t size)
{
    const char *home = getenv("HOME");
    snprintf(buf, size, "%s/.probed_history", home ? home : ".");
}

int repl_main(int argc, char **argv)
{
    static const char usage[] =
        "usage: probectl repl <pid> [--main-thread] [--timeout S]\n"
        "  An interactive Python prompt inside the process: line editing and history\n"
        "  (~/.probed_history), multi-line blocks, one namespace for the session (names it\n"
        "  lacks come from __main__). Ctrl-C interrupts the running statement (at its next\n"
        "  bytecode), Ctrl-D leaves; the process keeps running throughout.\n";
    struct eval_opts o;
    char hist[4096], *buf = NULL;
    struct sigaction sa = {.sa_handler = on_sigint};
    uint32_t session;
    int pid, rc;
    json_t *hello;

    if (parse_eval_opts(argc, argv, &o, NULL, usage) < 0)
        return EXIT_USAGE;
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "repl")) < 0 ||
        optind + 1 != argc)
        return EXIT_USAGE;
    session = ((uint32_t)getpid() << 16 ^ (uint32_t)time(NULL)) | 1u;
    hello = eval_request(&o, pid, "run",
                         "import sys; print('Python %s in pid %d' % (sys.version.split()[0], "
                         "__import__('os').getpid()))",
                         session, "repl", &rc);
    if (!hello)
        return rc;
    print_reply(hello, rc);
    json_decref(hello);
    if (pipe2(sigint_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return EXIT_FAILED;
    sigaction(SIGINT, &sa, NULL);
    history_path(hist, sizeof(hist));
    read_history(hist);
    for (;;) {
        char *line = readline(buf ? "... " : ">>> ");
        if (!line) { /* Ctrl-D */
            putchar('\n');
            break;
        }
        if (!buf && line[strspn(line, " \t")] == '\0') {
            free(line);
            continue;
        }
        buf = append_line(buf, line);
        free(line);
        /* a block ends with an empty line; a single line is done when it compiles */
        if (buf && (buf[strlen(buf) - 2] == '\n' || repl_complete(&o, pid, session, buf))) {
            size_t len = strlen(buf);
            while (len > 0 && buf[len - 1] == '\n')
                buf[--len] = '\0';
            add_history(buf);
            repl_execute(&o, pid, session, buf);
            free(buf);
            buf = NULL;
        }
    }
    write_history(hist);
    free(buf);
    return 0;
}
