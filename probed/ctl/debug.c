/* debug.c - see debug.h. */
#define _GNU_SOURCE
#include "ctl/debug.h"

#include <editline/readline.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bgthread.h"
#include "ctl/client.h"

#define RUNNING_POLL_MS 1000 /* each read of a running thread's output waits this long */
#define PROMPT_WAIT_MS 8000  /* after a line: pdb's answer, unless the thread runs on */

static const char *command = "debug"; /* or "pause": what errors are prefixed with */

static json_t *debug_call(const char *socket, int pid, json_t *fields, long *status)
{
    json_t *reply;

    json_object_set_new(fields, "pid", json_integer(pid));
    reply = client_post(socket, "/v1/debug", fields, NULL, command, false, status);
    json_decref(fields);
    return reply;
}

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---- pause ---- */

int pause_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"thread", required_argument, NULL, 't'},
                                             {"listen", required_argument, NULL, 'l'},
                                             {"dap", no_argument, NULL, 'd'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"insecure-listen", no_argument, NULL, 'I'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *listen = NULL;
    json_t *body, *reply;
    long status, thread = 0;
    char *end;
    int c, pid, dap = 0, insecure = 0;

    command = "pause";
    while ((c = getopt_long(argc, argv, "t:l:dh", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            thread = strtol(optarg, &end, 10);
            if (*end || thread <= 0 || thread > 0x7fffffff) {
                fprintf(stderr, "probectl pause: --thread takes a thread id\n");
                return 2;
            }
            break;
        case 'l':
            listen = optarg;
            break;
        case 'd':
            dap = 1;
            break;
        case 'I':
            insecure = 1;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl pause PID [--thread TID] [--listen HOST:PORT] [--dap]\n"
                   "  The thread (the main one by default; another needs Python 3.9+) stops at\n"
                   "  its next Python line in a pdb session: join it with probectl debug PID.\n"
                   "  --listen  serve the session on a TCP address of the process's instead\n"
                   "            (nc HOST PORT); nothing listens unless asked. A loopback\n"
                   "            address (127.0.0.1, ::1; --insecure-listen for another), and\n"
                   "            only your own connections are taken there\n"
                   "  --dap     a Debug Adapter Protocol server (debugpy) for VS Code's attach,\n"
                   "            on --listen or 127.0.0.1 and a free port; the main thread\n"
                   "            waits there for the client (docs/debug.md)\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind + 1 != argc || (pid = client_parse_pid(argv[optind], "pause")) < 0) {
        if (optind + 1 != argc)
            fprintf(stderr, "probectl pause: expected PID\n");
        return 2;
    }
    if (dap && thread) {
        fprintf(stderr, "probectl pause: --dap pauses the main thread (the client picks others)\n");
        return 2;
    }
    body = json_pack("{s:s, s:i, s:b}", "action", "pause", "thread", (int)thread, "dap", dap);
    if (listen)
        json_object_set_new(body, "listen", json_string(listen));
    if (insecure)
        json_object_set_new(body, "insecure_listen", json_true());
    reply = debug_call(socket, pid, body, &status);
    if (!reply)
        return 1;
    if (dap)
        printf("pid %d: debugpy listens on %s: attach VS Code (or any DAP client) to it; the"
               " main thread waits for it at its next Python line\n",
               pid, str(reply, "listen"));
    else if (str(reply, "listen"))
        printf("pid %d: %s stops at its next Python line; its pdb is served on %s\n", pid,
               thread ? "the thread" : "the main thread", str(reply, "listen"));
    else
        printf("pid %d: %s stops at its next Python line; join it: probectl debug %d\n", pid,
               thread ? "the thread" : "the main thread", pid);
    json_decref(reply);
    return 0;
}

/* ---- debug ---- */

static int sigint_pipe[2] = {-1, -1};

static void on_sigint(int sig)
{
    char ch = (char)sig;
    ssize_t r = write(sigint_pipe[1], &ch, 1);
    (void)r;
}

static bool take_sigint(void)
{
    char buf[16];
    bool got = false;

    while (read(sigint_pipe[0], buf, sizeof(buf)) > 0)
        got = true;
    return got;
}

/* Prints pdb's output but its last line, the prompt, which goes to *ret_prompt (the caller
 * frees it). */
static void show(const char *out, char **ret_prompt)
{
    const char *nl = out ? strrchr(out, '\n') : NULL;
    const char *last = nl ? nl + 1 : out ? out : "";

    fwrite(out ? out : "", 1, (size_t)(last - (out ? out : "")), stdout);
    fflush(stdout);
    if (ret_prompt) {
        free(*ret_prompt);
        *ret_prompt = strdup(*last ? last : "(Pdb) ");
    } else {
        fputs(last, stdout);
    }
}

static json_t *io(const char *socket, int pid, const char *line, int wait_ms)
{
    long status;
    json_t *body = json_pack("{s:s, s:i}", "action", "io", "wait_ms", wait_ms);

    if (line)
        json_object_set_new(body, "input", json_string(line));
    return debug_call(socket, pid, body, &status);
}

/* A line for pdb. When it was the process's last (leaving a post-mortem session, `continue`
 * to the end), the stub goes with the process before it answers: the session is asked once
 * more, and a process that is gone ends it quietly. */
static json_t *io_line(const char *socket, int pid, const char *line, bool *ret_gone)
{
    char err[512];
    long status;
    json_t *reply = NULL, *body = json_pack("{s:s, s:i, s:i, s:s}", "action", "io", "pid", pid,
                                            "wait_ms", PROMPT_WAIT_MS, "input", line);
    int r = client_call_when_free(client_socket_path(socket), "POST", "/v1/debug", body, NULL,
                                  &status, &reply, err, sizeof(err));

    json_decref(body);
    *ret_gone = false;
    if (r == 0 && status >= 200 && status <= 299)
        return reply;
    json_decref(reply);
    reply = io(socket, pid, NULL, 0);
    *ret_gone = !reply;
    return reply;
}

static void simple(const char *socket, int pid, const char *action)
{
    long status;
    json_decref(debug_call(socket, pid, json_pack("{s:s}", "action", action), &status));
}

/* A script on stdin (`printf 'where\ncontinue\n' | probectl debug PID`) that has ended while
 * the thread runs: nothing more will be typed, so the session ends as Ctrl-D ends it on a
 * terminal (the process goes on). Lines read ahead into stdin's buffer are still to come. */
static bool script_ended(void)
{
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int ch;

    if (isatty(STDIN_FILENO) || stdin->_IO_read_ptr < stdin->_IO_read_end)
        return false;
    if (poll(&p, 1, 0) != 1)
        return false;
    if (!(p.revents & POLLIN))
        return (p.revents & (POLLHUP | POLLERR)) != 0;
    if ((ch = fgetc(stdin)) == EOF)
        return true;
    ungetc(ch, stdin);
    return false;
}

/* The next line of pdb's input, NULL at its end. A script on stdin is read through stdio, as
 * script_ended() peeks at it: editline reads the descriptor itself, and the lines stdio had read
 * ahead would be lost to it (CI: `where` never ran, as the input looked ended). */
static char *next_line(const char *prompt)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;

    if (isatty(STDIN_FILENO))
        return readline(prompt);
    if ((n = getline(&line, &cap, stdin)) < 0) {
        free(line);
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n')
        line[n - 1] = '\0';
    return line;
}

/*
 * While its user reads and types at the prompt, probectl asks after the session now and then
 * (a keepalive, which takes nothing: pdb's output and the news of the session's end stay the
 * reading loop's), for the target ends a session no client asked about for its stale_s
 * (debug.py: one left by a probectl that was killed, or whose terminal went away) and lets the
 * paused thread go on.
 */
struct keepalive {
    struct bgthread bg;
    const char *socket;
    int pid;
    int64_t every_ns;
};

static int64_t mono_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *keepalive_run(void *arg)
{
    struct keepalive *k = arg;

    pthread_mutex_lock(&k->bg.lock);
    /* stopping is read before each wait too: a stop that came before this thread first ran
     * (the user typed at once, on a busy machine) signalled no one, and a wait would hold
     * keepalive_stop() for all of every_ns (CI: probectl stuck after `continue`) */
    while (!k->bg.stopping) {
        bgthread_wait_until(&k->bg, mono_now_ns() + k->every_ns);
        if (k->bg.stopping)
            break;
        pthread_mutex_unlock(&k->bg.lock);
        {
            char err[256];
            long status;
            json_t *reply = NULL,
                   *body = json_pack("{s:s, s:i}", "action", "keepalive", "pid", k->pid);
            client_call_when_free(client_socket_path(k->socket), "POST", "/v1/debug", body, NULL,
                                  &status, &reply, err,
                                  sizeof(err)); /* quiet: a miss is harmless */
            json_decref(body);
            json_decref(reply);
        }
        pthread_mutex_lock(&k->bg.lock);
    }
    pthread_mutex_unlock(&k->bg.lock);
    return NULL;
}

/* Starts asking every third of @stale_s (the session's, from its last reply); false: not
 * started (the session then lasts as long as the user types within stale_s). */
static bool keepalive_start(struct keepalive *k, const char *socket, int pid, double stale_s)
{
    *k = (struct keepalive){.socket = socket,
                            .pid = pid,
                            .every_ns = stale_s > 0.3 ? (int64_t)(stale_s * 1e9 / 3) : 100000000};
    return bgthread_start(&k->bg, "probectl-alive", keepalive_run, k) == 0;
}

static void keepalive_stop(struct keepalive *k)
{
    bgthread_stop(&k->bg);
}

/* Reads a running thread's output until it stops at the prompt (Ctrl-C pauses it again) or the
 * session ends; the last reply. */
static json_t *until_paused(const char *socket, int pid, json_t *reply)
{
    bool left = false;

    while (reply && (strcmp(str(reply, "state") ?: "", "running") == 0 ||
                     strcmp(str(reply, "state") ?: "", "armed") == 0)) {
        bool armed = strcmp(str(reply, "state") ?: "", "armed") == 0;
        show(str(reply, "output"), NULL);
        json_decref(reply);
        if (take_sigint()) /* never stopped yet: give up; else stop it again */
            simple(socket, pid, armed ? "detach" : "interrupt");
        else if (!left && script_ended() && (left = true))
            simple(socket, pid, "detach");
        reply = io(socket, pid, NULL, RUNNING_POLL_MS);
    }
    return reply;
}

int debug_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct sigaction sa = {.sa_handler = on_sigint};
    const char *socket = NULL;
    char *prompt = NULL;
    json_t *reply;
    long status;
    int c, pid, rc = 0;
    bool gone;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'S') {
            socket = optarg;
        } else if (c == 'h') {
            printf("usage: probectl debug PID\n"
                   "  Joins the terminal to the process's pdb session (probectl pause; without\n"
                   "  one, the main thread is paused first). Line editing and history here;\n"
                   "  Ctrl-C while the thread runs stops it again; Ctrl-D (or detach, quit)\n"
                   "  leaves: breakpoints cleared, no trace function left, the process goes on.\n");
            return 0;
        } else {
            return 2;
        }
    }
    if (optind + 1 != argc || (pid = client_parse_pid(argv[optind], "debug")) < 0) {
        if (optind + 1 != argc)
            fprintf(stderr, "probectl debug: expected PID\n");
        return 2;
    }
    if (pipe2(sigint_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return 1;
    sigaction(SIGINT, &sa, NULL);
    reply = io(socket, pid, NULL, 0);
    if (reply && strcmp(str(reply, "state") ?: "", "none") == 0) {
        json_decref(reply);
        reply = debug_call(socket, pid, json_pack("{s:s}", "action", "pause"), &status);
        if (reply)
            printf("pid %d: the main thread stops at its next Python line (Ctrl-C to give up)\n",
                   pid);
        json_decref(reply);
        reply = reply ? io(socket, pid, NULL, RUNNING_POLL_MS) : NULL;
    }
    for (;;) {
        char *line;

        reply = until_paused(socket, pid, reply);
        if (!reply) {
            rc = 1;
            break;
        }
        if (strcmp(str(reply, "state") ?: "", "paused") != 0) { /* ended */
            show(str(reply, "output"), NULL);
            printf("pid %d: the debugger session ended (%s)\n", pid, str(reply, "how") ?: "?");
            break;
        }
        show(str(reply, "output"), &prompt);
        json_t *stale = json_object_get(reply, "stale_s");
        struct keepalive alive;
        bool keeping = keepalive_start(&alive, socket, pid,
                                       json_is_number(stale) ? json_number_value(stale) : 60);
        json_decref(reply);
        take_sigint();
        line = next_line(prompt);
        if (keeping)
            keepalive_stop(&alive);
        if (!line) /* Ctrl-D */
            printf("\n");
        else if (*line)
            add_history(line);
        reply = io_line(socket, pid, line ? line : "detach", &gone);
        free(line);
        if (gone) {
            printf("pid %d: the debugger session ended (the process exited)\n", pid);
            break;
        }
    }
    json_decref(reply);
    free(prompt);
    return rc;
}
