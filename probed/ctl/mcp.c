/* mcp.c - see mcp.h. */
#define _GNU_SOURCE
#include "ctl/mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/jsontext.h"
#include "common/units.h"
#include "ctl/client.h"

/* The protocol versions spoken, newest first: a client asking for one of them gets it, any
 * other gets the newest (and decides). */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

#define TOOL_TIMEOUT_S 120 /* a command a tool runs (hang across nodes, an eval) */
#define ROWS_DEFAULT 200   /* rows of a query returned unless asked */
#define ROWS_MAX 5000
#define STACKS_DEFAULT 40 /* flame graph stacks returned, the heaviest */

extern const char mcp_query_doc[]; /* docs/query.md, built in (CMakeLists.txt) */

struct mcp {
    const char *socket; /* --socket, or NULL: client_socket_path()'s default */
    char self[4096];    /* this probectl, for the tools that run one of its commands */
    bool allow_actions;
};

/* A tool's answer: text for the model, structured content beside it when there is some. */
struct answer {
    json_t *structured; /* owned; NULL: none */
    char *text;         /* malloc'd */
    bool error;
};

static void answer_text(struct answer *a, bool error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer_text(struct answer *a, bool error, const char *fmt, ...)
{
    va_list ap;

    free(a->text);
    va_start(ap, fmt);
    if (vasprintf(&a->text, fmt, ap) < 0)
        a->text = NULL;
    va_end(ap);
    a->error = error;
}

/* ---- arguments: typed, bounded, checked before anything runs ---- */

static bool arg_int(json_t *args, const char *name, long dflt, long min, long max, long *ret,
                    struct answer *a)
{
    json_t *v = json_object_get(args, name);

    if (!v) {
        if (dflt < min) {
            answer_text(a, true, "argument '%s' is required", name);
            return false;
        }
        *ret = dflt;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        answer_text(a, true, "argument '%s' must be an integer from %ld to %ld", name, min, max);
        return false;
    }
    *ret = (long)json_integer_value(v);
    return true;
}

static bool arg_bool(json_t *args, const char *name, bool *ret, struct answer *a)
{
    json_t *v = json_object_get(args, name);

    *ret = false;
    if (v && !json_is_boolean(v)) {
        answer_text(a, true, "argument '%s' must be true or false", name);
        return false;
    }
    *ret = v && json_is_true(v);
    return true;
}

/* A string argument; @dflt NULL: required. A duration is checked by the daemon or command. */
static bool arg_str(json_t *args, const char *name, const char *dflt, size_t max, const char **ret,
                    struct answer *a)
{
    json_t *v = json_object_get(args, name);

    *ret = dflt;
    if (!v && dflt)
        return true;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max) {
        answer_text(a, true, "argument '%s' must be a string of 1 to %zu characters", name, max);
        return false;
    }
    *ret = json_string_value(v);
    return true;
}

/* ---- the daemon's API ---- */

/* One call; the reply (caller owns), or NULL with the reason in @a. */
static json_t *api(struct mcp *m, const char *method, const char *path, json_t *body,
                   char **ret_raw, size_t *ret_raw_len, struct answer *a)
{
    char err[512];
    json_t *reply = NULL;
    long status = 0;

    if (client_call(client_socket_path(m->socket), method, path, body, &status, &reply, ret_raw,
                    ret_raw_len, err, sizeof(err)) < 0) {
        answer_text(a, true, "%s", err);
        return NULL;
    }
    if (status != 200) {
        answer_text(a, true, "%s", client_error_text(reply));
        json_decref(reply);
        if (ret_raw) {
            free(*ret_raw);
            *ret_raw = NULL;
        }
        return NULL;
    }
    return reply ? reply : json_object();
}

/* The rows of @sql (scoped to @pid when > 0), at most @max of them, as the answer. */
static void query_answer(struct mcp *m, const char *sql, long pid, long max, struct answer *a)
{
    json_t *body = json_pack("{s:s}", "sql", sql), *reply, *rows, *kept;
    size_t n;

    if (pid > 0)
        json_object_set_new(body, "pid", json_integer(pid));
    reply = api(m, "POST", "/v1/query", body, NULL, NULL, a);
    json_decref(body);
    if (!reply)
        return;
    rows = json_object_get(reply, "rows");
    n = json_array_size(rows);
    kept = json_array();
    for (size_t i = 0; i < n && i < (size_t)max; i++)
        json_array_append(kept, json_array_get(rows, i));
    a->structured =
        json_pack("{s:O, s:o, s:I, s:b}", "columns", json_object_get(reply, "columns"), "rows",
                  kept, "row_count", (json_int_t)n, "truncated", n > (size_t)max);
    a->text = jsontext_dumps(a->structured, JSON_COMPACT);
    json_decref(reply);
}

/* ---- commands run as the user: this probectl, its output taken ---- */

/* Runs `probectl ARGV...` (NULL-terminated) and answers with what it printed: stdout, and
 * stderr when it failed. A JSON object printed is the structured content as well, and so is
 * a JSON array, as the member @key of one. */
static void run_self(struct mcp *m, const char *const *argv, const char *key, struct answer *a)
{
    int out[2];
    pid_t pid;
    char *buf = malloc(MCP_OUTPUT_MAX + 1);
    size_t len = 0;
    int status = 0;
    time_t deadline = time(NULL) + TOOL_TIMEOUT_S;
    bool cut = false, late = false;

    if (!buf || pipe2(out, O_CLOEXEC) < 0) {
        free(buf);
        answer_text(a, true, "cannot run probectl: %s", strerror(errno));
        return;
    }
    pid = fork();
    if (pid < 0) {
        close(out[0]), close(out[1]), free(buf);
        answer_text(a, true, "cannot run probectl: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        const char *full[32] = {argv[0]};
        size_t n = 1;

        /* -H: the command asks the same node's daemon, through the same transport */
        if (client_remote_host()) {
            full[n++] = "-H";
            full[n++] = client_remote_host();
            if (client_remote_template()) {
                full[n++] = "--transport";
                full[n++] = client_remote_template();
            }
        }
        for (size_t i = 1; argv[i] && n < sizeof(full) / sizeof(full[0]) - 1; i++)
            full[n++] = argv[i];
        full[n] = NULL;
        dup2(null, 0);
        dup2(out[1], 1);
        dup2(out[1], 2); /* what went wrong is the answer too */
        execv(m->self, (char *const *)full);
        _exit(127);
    }
    close(out[1]);
    for (;;) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        char chunk[4096];
        ssize_t r;
        int left = (int)(deadline - time(NULL));

        if (left <= 0) {
            late = true;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(&p, 1, left * 1000) <= 0)
            continue;
        r = read(out[0], chunk, sizeof(chunk));
        if (r <= 0)
            break;
        if (len + (size_t)r > MCP_OUTPUT_MAX) {
            r = (ssize_t)(MCP_OUTPUT_MAX - len);
            cut = true;
        }
        memcpy(buf + len, chunk, (size_t)r);
        len += (size_t)r;
    }
    close(out[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    buf[len] = '\0';
    a->error = late || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (late)
        answer_text(a, true, "%s\n(stopped after %d s)", buf, TOOL_TIMEOUT_S);
    else if (cut)
        answer_text(a, a->error, "%s\n(output cut at %d bytes)", buf, MCP_OUTPUT_MAX);
    else {
        a->text = buf;
        buf = NULL;
        if (!a->error && (a->text[0] == '{' || (key && a->text[0] == '[')))
            a->structured = json_loads(a->text, 0, NULL);
        if (a->structured && json_is_array(a->structured))
            a->structured = json_pack("{s:o}", key, a->structured);
    }
    free(buf);
}

/* ---- the tools ---- */

typedef void tool_fn(struct mcp *m, json_t *args, struct answer *a);

static void tool_list_targets(struct mcp *m, json_t *args, struct answer *a)
{
    json_t *reply = api(m, "GET", "/v1/targets", NULL, NULL, NULL, a), *t, *out;
    size_t i;

    (void)args;
    if (!reply)
        return;
    out = json_array();
    json_array_foreach(json_object_get(reply, "targets"), i, t)
    {
        json_t *stats = json_object_get(t, "stats");
        json_t *o = json_pack(
            "{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "pid", json_object_get(t, "pid"), "cmdline",
            json_object_get(t, "cmdline"), "python", json_object_get(t, "python_version"), "mode",
            json_object_get(t, "mode"), "state", json_object_get(t, "state"), "rate_hz",
            json_object_get(t, "rate_hz"), "samples", json_object_get(stats, "samples"), "torn",
            json_object_get(stats, "torn"));

        if (o && json_object_get(t, "rank"))
            json_object_set(o, "rank", json_object_get(t, "rank"));
        if (o && json_is_true(json_object_get(t, "nccl"))) /* attach --nccl */
            json_object_set(o, "nccl", json_true());
        if (o)
            json_array_append_new(out, o);
    }
    a->structured = json_pack("{s:o}", "targets", out);
    a->text = jsontext_dumps(a->structured, JSON_COMPACT);
    json_decref(reply);
}

static void tool_backtrace(struct mcp *m, json_t *args, struct answer *a)
{
    long pid, locals;
    bool native, tasks;
    char path[128];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a) ||
        !arg_int(args, "locals", 0, 0, 64, &locals, a) || !arg_bool(args, "native", &native, a) ||
        !arg_bool(args, "tasks", &tasks, a))
        return;
    if (tasks && (native || locals)) {
        answer_text(a, true, "tasks takes neither native nor locals");
        return;
    }
    snprintf(path, sizeof(path), "/v1/backtrace?pid=%ld%s", pid, tasks ? "&tasks=1" : "");
    if (locals)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&locals=%ld", locals);
    if (native)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&native=1");
    if (!(a->structured = api(m, "GET", path, NULL, NULL, NULL, a)))
        return;
    a->text = jsontext_dumps(a->structured, JSON_COMPACT);
}

static void tool_query(struct mcp *m, json_t *args, struct answer *a)
{
    const char *sql;
    long pid, max;

    if (arg_str(args, "sql", NULL, 64 * 1024, &sql, a) &&
        arg_int(args, "pid", 0, 0, 1L << 22, &pid, a) &&
        arg_int(args, "max_rows", ROWS_DEFAULT, 1, ROWS_MAX, &max, a))
        query_answer(m, sql, pid, max, a);
}

/* The window argument as whole seconds: 30s, 5m, 1h30m, or a number of seconds. */
static bool arg_window(json_t *args, long *ret_s, struct answer *a)
{
    const char *w;
    int64_t ns;

    if (!arg_str(args, "window", "5m", 32, &w, a))
        return false;
    if ((ns = units_duration_ns(w)) <= 0) {
        answer_text(a, true, "window must be a duration like 30s, 5m, 1h30m or 1d");
        return false;
    }
    *ret_s = ns < 1000000000 ? 1 : (long)(ns / 1000000000);
    return true;
}

static void tool_hot_functions(struct mcp *m, json_t *args, struct answer *a)
{
    long pid, limit, window_s;
    bool idle;
    char sql[2048];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a) ||
        !arg_int(args, "limit", 20, 1, 500, &limit, a) || !arg_window(args, &window_s, a) ||
        !arg_bool(args, "idle", &idle, a))
        return;
    /* self: the innermost frame; total: anywhere on the stack, once per sample (as `top`) */
    snprintf(sql, sizeof(sql),
             "WITH win AS (SELECT stack_id FROM samples WHERE stack_id <> 0%s AND"
             " ts_ns > ago('%lds') AND target_id IN (SELECT id FROM targets WHERE pid = %ld)),"
             " tot AS (SELECT count(*) AS all_n FROM win),"
             " per_stack AS (SELECT stack_id, count(*) AS n FROM win GROUP BY stack_id),"
             " funcs AS (SELECT stack_id, func, file, kind, min(depth) = 0 AS is_self FROM stacks"
             " WHERE stack_id IN (SELECT stack_id FROM per_stack) AND kind <> 'task'"
             " GROUP BY stack_id, func, file, kind)"
             " SELECT func, file, kind, sum(CASE WHEN is_self THEN n ELSE 0 END) AS self_samples,"
             " sum(n) AS total_samples,"
             " round(100.0 * sum(CASE WHEN is_self THEN n ELSE 0 END) / max(all_n, 1), 2)"
             " AS self_pct, round(100.0 * sum(n) / max(all_n, 1), 2) AS total_pct"
             " FROM funcs JOIN per_stack USING (stack_id), tot GROUP BY func, file, kind"
             " ORDER BY self_samples DESC, total_samples DESC LIMIT %ld",
             idle ? "" : " AND state & 1", window_s, pid, limit);
    query_answer(m, sql, pid, limit, a);
}

struct folded_line {
    const char *stack;
    long long n;
};

static int by_count(const void *x, const void *y)
{
    const struct folded_line *p = x, *q = y;

    return p->n < q->n ? 1 : p->n > q->n ? -1 : strcmp(p->stack, q->stack);
}

static void tool_flamegraph(struct mcp *m, json_t *args, struct answer *a)
{
    long pid, top, window_s = 0;
    bool idle, tasks;
    char path[192], *raw = NULL, *line, *save = NULL;
    size_t raw_len = 0, n = 0, cap = 64;
    struct folded_line *lines;
    long long total = 0;
    json_t *reply, *stacks;

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a) ||
        !arg_int(args, "top", STACKS_DEFAULT, 1, 1000, &top, a) ||
        !arg_bool(args, "idle", &idle, a) || !arg_bool(args, "tasks", &tasks, a) ||
        (json_object_get(args, "window") && !arg_window(args, &window_s, a)))
        return;
    snprintf(path, sizeof(path), "/v1/flamegraph?pid=%ld&format=folded%s%s", pid,
             idle ? "&idle=1" : "", tasks ? "&tasks=1" : "");
    if (window_s)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&since=%lds", window_s);
    if (!(reply = api(m, "GET", path, NULL, &raw, &raw_len, a)))
        return;
    json_decref(reply);
    lines = malloc(cap * sizeof(*lines));
    for (line = raw ? strtok_r(raw, "\n", &save) : NULL; line && lines;
         line = strtok_r(NULL, "\n", &save)) {
        char *sp = strrchr(line, ' ');

        if (!sp)
            continue;
        *sp = '\0';
        if (n == cap) {
            struct folded_line *more = realloc(lines, (cap *= 2) * sizeof(*lines));

            if (!more)
                break;
            lines = more;
        }
        lines[n] = (struct folded_line){.stack = line, .n = atoll(sp + 1)};
        total += lines[n++].n;
    }
    if (!lines) {
        free(raw);
        answer_text(a, true, "out of memory");
        return;
    }
    qsort(lines, n, sizeof(*lines), by_count);
    stacks = json_array();
    for (size_t i = 0; i < n && i < (size_t)top; i++)
        json_array_append_new(stacks, json_pack("{s:s, s:I}", "stack", lines[i].stack, "samples",
                                                (json_int_t)lines[i].n));
    a->structured = json_pack("{s:I, s:I, s:o}", "total_samples", (json_int_t)total,
                              "distinct_stacks", (json_int_t)n, "stacks", stacks);
    a->text = jsontext_dumps(a->structured, JSON_COMPACT);
    free(lines);
    free(raw);
}

static void tool_memory(struct mcp *m, json_t *args, struct answer *a)
{
    long pid;
    char p[24];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    run_self(m, (const char *const[]){"probectl", "memory", p, NULL}, NULL, a);
}

static void tool_torch_summary(struct mcp *m, json_t *args, struct answer *a)
{
    long pid, top;
    char p[24], t[24];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a) ||
        !arg_int(args, "top", 10, 1, 200, &top, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    snprintf(t, sizeof(t), "%ld", top);
    run_self(m, (const char *const[]){"probectl", "torch", p, "summary", "--top", t, NULL}, NULL,
             a);
}

static void tool_collectives(struct mcp *m, json_t *args, struct answer *a)
{
    long pid, limit;
    char sql[512], where[48] = "";

    if (!arg_int(args, "pid", 0, 0, 1L << 22, &pid, a) ||
        !arg_int(args, "limit", 50, 1, ROWS_MAX, &limit, a))
        return;
    if (pid)
        snprintf(where, sizeof(where), " WHERE pid = %ld", pid);
    snprintf(sql, sizeof(sql),
             "SELECT pid, rank, op, group_name, seq, bytes, dtype, state, latency_ms, ts"
             " FROM comm_metrics%s ORDER BY ts_ns DESC LIMIT %ld",
             where, limit);
    query_answer(m, sql, pid, limit, a);
}

static void tool_hang(struct mcp *m, json_t *args, struct answer *a)
{
    const char *hosts = NULL, *argv[6] = {"probectl", "hang"};
    size_t k = 2;
    bool native;

    if ((json_object_get(args, "hosts") && !arg_str(args, "hosts", NULL, 4096, &hosts, a)) ||
        !arg_bool(args, "native", &native, a))
        return;
    if (hosts && (hosts[0] == '-' || strpbrk(hosts, " \t\n"))) {
        answer_text(a, true, "hosts is a comma-separated list of host names");
        return;
    }
    if (native)
        argv[k++] = "--native";
    if (hosts) { /* else this node's daemon */
        argv[k++] = "--hosts";
        argv[k++] = hosts;
    }
    run_self(m, argv, NULL, a);
}

static void tool_nccl(struct mcp *m, json_t *args, struct answer *a)
{
    long pid;
    char p[24];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    run_self(m, (const char *const[]){"probectl", "nccl", p, "--json", NULL}, NULL, a);
}

static void tool_crashes(struct mcp *m, json_t *args, struct answer *a)
{
    long pid;
    char p[24];

    if (!arg_int(args, "pid", 0, 0, 1L << 22, &pid, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    run_self(m, (const char *const[]){"probectl", "crashes", "--json", pid ? p : NULL, NULL},
             "crashes", a);
}

static void tool_attach(struct mcp *m, json_t *args, struct answer *a)
{
    long pid, rate;
    bool native, nccl;
    char p[24], r[24];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a) ||
        !arg_int(args, "rate_hz", 100, 1, 10000, &rate, a) ||
        !arg_bool(args, "native", &native, a) || !arg_bool(args, "nccl", &nccl, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    snprintf(r, sizeof(r), "%ld", rate);
    /* an option given after a NULL is not read: the one set comes first */
    run_self(m,
             (const char *const[]){"probectl", "attach", p, "--rate", r,
                                   native ? "--native"
                                   : nccl ? "--nccl"
                                          : NULL,
                                   native && nccl ? "--nccl" : NULL, NULL},
             NULL, a);
}

static void tool_detach(struct mcp *m, json_t *args, struct answer *a)
{
    long pid;
    char p[24];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    run_self(m, (const char *const[]){"probectl", "detach", p, NULL}, NULL, a);
}

static void tool_eval(struct mcp *m, json_t *args, struct answer *a)
{
    long pid;
    const char *code;
    char p[24];

    if (!arg_int(args, "pid", -1, 1, 1L << 22, &pid, a) ||
        !arg_str(args, "code", NULL, 64 * 1024, &code, a))
        return;
    snprintf(p, sizeof(p), "%ld", pid);
    run_self(m, (const char *const[]){"probectl", "eval", p, "--", code, NULL}, NULL, a);
}

#define PID_PROP                                                                                   \
    "\"pid\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"the process\"}"

static const struct tool {
    const char *name, *title, *description;
    const char *properties, *required; /* JSON: the input schema's */
    tool_fn *fn;
    bool action; /* changes a process: only with --allow-actions */
} tools[] = {
    {"list_targets", "Attached processes",
     "The processes probed samples for you: pid, command line, Python version, mode, state, "
     "rate, samples and torn reads, rank where set.",
     "{}", "[]", tool_list_targets, false},
    {"backtrace", "Live stacks",
     "Every thread's Python stack of a running process, read now without stopping it (native "
     "C/C++ frames on request, which holds the threads for milliseconds; local variables of the "
     "innermost frames on request), or its asyncio tasks with what each awaits.",
     "{" PID_PROP ", \"locals\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 64,"
     " \"description\": \"local variables of this many innermost frames\"},"
     " \"native\": {\"type\": \"boolean\", \"description\": \"mixed native and Python frames\"},"
     " \"tasks\": {\"type\": \"boolean\", \"description\": \"the asyncio tasks instead\"}}",
     "[\"pid\"]", tool_backtrace, false},
    {"query", "SQL over the samples",
     "One read-only SQLite statement over probed's database and live tables (see the resource "
     "probed://docs/query.md and probed://schema): samples, stacks, function_stats, "
     "thread_states, memory_usage, torch_trace, comm_metrics, gpu_metrics, python.backtrace, "
     "python.tasks ... ago('5m') and now() - interval '5 min' bound time. The daemon's time "
     "and size limits apply.",
     "{\"sql\": {\"type\": \"string\", \"description\": \"one SELECT statement\"},"
     " \"pid\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"scope every table to"
     " this process\"}, \"max_rows\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 5000}}",
     "[\"sql\"]", tool_query, false},
    {"hot_functions", "Hottest functions",
     "The functions that took the most samples of a process over a recent window: self (the "
     "innermost frame) and total (anywhere on the stack), on the CPU unless idle is asked.",
     "{" PID_PROP ", \"window\": {\"type\": \"string\", \"description\": \"30s, 5m, 2h; default"
     " 5m\"}, \"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 500},"
     " \"idle\": {\"type\": \"boolean\", \"description\": \"count waiting threads too\"}}",
     "[\"pid\"]", tool_hot_functions, false},
    {"flamegraph", "Flame graph (folded)",
     "A process's stored samples as folded stacks (root first, frames ';'-separated), the "
     "heaviest first: where its time went.",
     "{" PID_PROP ", \"window\": {\"type\": \"string\", \"description\": \"only the last 30s,"
     " 5m, 2h; default: everything stored\"}, \"top\": {\"type\": \"integer\", \"minimum\": 1,"
     " \"maximum\": 1000}, \"idle\": {\"type\": \"boolean\"}, \"tasks\": {\"type\": \"boolean\","
     " \"description\": \"rooted by asyncio task\"}}",
     "[\"pid\"]", tool_flamegraph, false},
    {"memory", "Memory",
     "A process's memory now (RSS, PSS, USS, swap), peak and growth, threads "
     "by CPU, and allocation growth by function when tracking is on.",
     "{" PID_PROP "}", "[\"pid\"]", tool_memory, false},
    {"torch_summary", "Torch summary",
     "With the torch trace on: step times and the modules that take them, forward and backward, "
     "memory, tracked variables.",
     "{" PID_PROP ", \"top\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 200}}",
     "[\"pid\"]", tool_torch_summary, false},
    {"collectives", "Collectives",
     "The latest torch.distributed collectives recorded (op, group, sequence, bytes, state, "
     "latency), of one process or all.",
     "{\"pid\": {\"type\": \"integer\", \"minimum\": 1}, \"limit\": {\"type\": \"integer\","
     " \"minimum\": 1, \"maximum\": 5000}}",
     "[]", tool_collectives, false},
    {"hang", "Who holds everyone up",
     "Every attached rank's stacks read at one instant (on this node, or across hosts), grouped "
     "by stack, the odd group first: the rank the others wait for.",
     "{\"hosts\": {\"type\": \"string\", \"description\": \"comma-separated nodes (their daemons"
     " are reached as probectl -H reaches them)\"}, \"native\": {\"type\": \"boolean\"}}",
     "[]", tool_hang, false},
    {"nccl", "NCCL's own account",
     "A job's NCCL communicators as NCCL's RAS tells them (NCCL 2.24+), asked of one of its "
     "processes with nothing loaded into it: every rank on every node, its count of each "
     "collective, and findings: the rank behind (the collective the others wait in), ranks that "
     "did not answer, ranks in error or aborted.",
     "{" PID_PROP "}", "[\"pid\"]", tool_nccl, false},
    {"crashes", "How processes ended",
     "Exit status, signal, OOM kill, caught exceptions and fatal signals of attached processes, "
     "with their last stacks.",
     "{\"pid\": {\"type\": \"integer\", \"minimum\": 1}}", "[]", tool_crashes, false},
    {"attach", "Attach", "Start sampling a process (changes what probed does, not the process).",
     "{" PID_PROP ", \"rate_hz\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10000},"
     " \"native\": {\"type\": \"boolean\"}, \"nccl\": {\"type\": \"boolean\"}}",
     "[\"pid\"]", tool_attach, true},
    {"detach", "Detach", "Stop sampling a process.", "{" PID_PROP "}", "[\"pid\"]", tool_detach,
     true},
    {"eval", "Run Python in a process",
     "Runs Python code inside the running process (recorded by the daemon like any eval) and "
     "returns what it prints and its last expression's value.",
     "{" PID_PROP ", \"code\": {\"type\": \"string\"}}", "[\"pid\", \"code\"]", tool_eval, true},
};
#define N_TOOLS (sizeof(tools) / sizeof(tools[0]))

static json_t *tools_list(const struct mcp *m)
{
    json_t *out = json_array();

    for (size_t i = 0; i < N_TOOLS; i++) {
        const struct tool *t = &tools[i];
        json_t *props, *req;

        if (t->action && !m->allow_actions)
            continue;
        props = json_loads(t->properties, 0, NULL);
        req = json_loads(t->required, 0, NULL);
        json_array_append_new(
            out,
            json_pack("{s:s, s:s, s:s, s:{s:s, s:o, s:o, s:b}, s:{s:b, s:b}}", "name", t->name,
                      "title", t->title, "description", t->description, "inputSchema", "type",
                      "object", "properties", props, "required", req, "additionalProperties", false,
                      "annotations", "readOnlyHint", !t->action, "openWorldHint", false));
    }
    return json_pack("{s:o}", "tools", out);
}

/* The tools/call result, or NULL with a JSON-RPC error in *ret_err (an unknown tool). */
static json_t *tools_call(struct mcp *m, json_t *params, json_t **ret_err)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments"), *res;
    struct answer a = {0};
    const struct tool *t = NULL;
    const char *bad;
    size_t i;
    json_t *v;

    for (i = 0; name && i < N_TOOLS && !t; i++)
        if (strcmp(tools[i].name, name) == 0)
            t = &tools[i];
    if (t && t->action && !m->allow_actions) {
        answer_text(&a, true,
                    "%s changes a process: this server was started without --allow-actions", name);
    } else if (!t) {
        *ret_err = json_pack("{s:i, s:s}", "code", -32602, "message", "unknown tool");
        return NULL;
    } else if (args && !json_is_object(args)) {
        answer_text(&a, true, "arguments must be an object");
    } else {
        json_t *props = json_loads(t->properties, 0, NULL), *none = json_object();
        const char *unknown = NULL;

        /* an argument the schema does not name is said, not ignored */
        json_object_foreach(args, bad, v)
        {
            if (!unknown && !json_object_get(props, bad))
                unknown = bad;
        }
        if (unknown)
            answer_text(&a, true, "unknown argument '%s' for %s", unknown, t->name);
        else
            t->fn(m, args ? args : none, &a);
        json_decref(props);
        json_decref(none);
    }
    res = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text",
                    a.text ? a.text : "", "isError", a.error);
    if (a.structured && json_is_object(a.structured))
        json_object_set(res, "structuredContent", a.structured);
    json_decref(a.structured);
    free(a.text);
    return res;
}

/* ---- resources ---- */

static json_t *resources_list(void)
{
    return json_pack(
        "{s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]}", "resources", "uri", "probed://schema",
        "name", "schema", "mimeType", "application/json", "description",
        "Every table and view you may query, with its columns (live tables too)", "uri",
        "probed://docs/query.md", "name", "query.md", "mimeType", "text/markdown", "description",
        "How to query probed: every table and view, what its columns mean, examples");
}

#define SCHEMA_NAMES_MAX 256

/* The columns of table or view @name (a query of none of its rows), or NULL. */
static json_t *columns_of(struct mcp *m, const char *name)
{
    char sql[320];
    struct answer a = {0};
    json_t *cols;

    snprintf(sql, sizeof(sql), "SELECT * FROM %s LIMIT 0", name);
    query_answer(m, sql, 0, 1, &a);
    cols = a.structured ? json_incref(json_object_get(a.structured, "columns")) : NULL;
    json_decref(a.structured);
    free(a.text);
    return cols;
}

/* Every table and view this user may query, with its columns: the views every connection has
 * (temp), the tables root reads (main; refused to others), the live tables. */
static json_t *schema_json(struct mcp *m)
{
    static const char *const live[] = {"python.backtrace", "python.tasks", "python.torch_trace",
                                       "python.variables"};
    static const char *const lists[] = {
        "SELECT name, type FROM temp.sqlite_master WHERE type IN ('table', 'view')"
        " AND name NOT LIKE 'sqlite_%' ORDER BY name",
        "SELECT name, type FROM main.sqlite_master WHERE type = 'table'"
        " AND name NOT LIKE 'sqlite_%' ORDER BY name"};
    json_t *out = json_array(), *row;
    size_t i, n = 0;

    for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++) {
        struct answer a = {0};

        query_answer(m, lists[k], 0, SCHEMA_NAMES_MAX, &a);
        json_array_foreach(a.structured ? json_object_get(a.structured, "rows") : NULL, i, row)
        {
            const char *name = json_string_value(json_array_get(row, 0));
            char qualified[160];
            json_t *cols;

            if (!name || strlen(name) > 100 || n++ >= SCHEMA_NAMES_MAX)
                continue;
            snprintf(qualified, sizeof(qualified), "%s%s", k ? "main." : "", name);
            if ((cols = columns_of(m, qualified)) != NULL)
                json_array_append_new(out, json_pack("{s:s, s:O, s:o}", "name", qualified, "type",
                                                     json_array_get(row, 1), "columns", cols));
        }
        json_decref(a.structured);
        free(a.text);
    }
    for (i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        json_t *cols = columns_of(m, live[i]);

        if (cols)
            json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "name", live[i], "type",
                                                 "live table", "columns", cols));
    }
    return out;
}

static json_t *resources_read(struct mcp *m, json_t *params, json_t **ret_err)
{
    const char *uri = json_string_value(json_object_get(params, "uri"));
    json_t *schema, *res;
    char *text;

    if (uri && strcmp(uri, "probed://docs/query.md") == 0)
        return json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType",
                         "text/markdown", "text", mcp_query_doc);
    if (!uri || strcmp(uri, "probed://schema") != 0) {
        *ret_err = json_pack("{s:i, s:s}", "code", -32002, "message", "resource not found");
        return NULL;
    }
    schema = schema_json(m);
    if (json_array_size(schema) == 0) {
        json_decref(schema);
        *ret_err = json_pack("{s:i, s:s}", "code", -32603, "message",
                             "the daemon answered no table (is it running?)");
        return NULL;
    }
    text = json_dumps(schema, JSON_COMPACT);
    json_decref(schema);
    res = json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType", "application/json",
                    "text", text ? text : "[]");
    free(text);
    return res;
}

/* ---- the protocol ---- */

bool mcp_speaks(const char *version)
{
    for (size_t i = 0; version && i < sizeof(versions) / sizeof(versions[0]); i++)
        if (strcmp(version, versions[i]) == 0)
            return true;
    return false;
}

static json_t *initialize(json_t *params)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    const char *v = mcp_speaks(asked) ? asked : versions[0];

    return json_pack(
        "{s:s, s:{s:{s:b}, s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v, "capabilities",
        "tools", "listChanged", false, "resources", "listChanged", false, "serverInfo", "name",
        "probed", "title", "probed: Python and PyTorch jobs, live", "version", PROBED_VERSION,
        "instructions",
        "probed samples running Python processes from outside. Start with list_targets; "
        "backtrace shows what each thread does now; hot_functions and flamegraph where time "
        "went; query runs SQL (read probed://docs/query.md first); hang finds the rank the "
        "others wait for.");
}

json_t *mcp_handle(struct mcp *m, json_t *msg)
{
    json_t *id = json_object_get(msg, "id"), *params = json_object_get(msg, "params");
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *result = NULL, *err = NULL, *reply;

    if (json_is_array(msg))
        return json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                         -32600, "message", "batches are not taken");
    if (!json_is_object(msg) || !method) {
        if (json_is_object(msg) && !method && id)
            return NULL; /* a response to us: we ask nothing */
        err = json_pack("{s:i, s:s}", "code", -32600, "message", "invalid request");
    } else if (!id) {
        return NULL; /* notifications/initialized, cancelled: nothing to answer */
    } else if (strcmp(method, "initialize") == 0) {
        result = initialize(params);
    } else if (strcmp(method, "ping") == 0) {
        result = json_object();
    } else if (strcmp(method, "tools/list") == 0) {
        result = tools_list(m);
    } else if (strcmp(method, "tools/call") == 0) {
        result = tools_call(m, params, &err);
    } else if (strcmp(method, "resources/list") == 0) {
        result = resources_list();
    } else if (strcmp(method, "resources/templates/list") == 0) {
        result = json_pack("{s:[]}", "resourceTemplates");
    } else if (strcmp(method, "resources/read") == 0) {
        result = resources_read(m, params, &err);
    } else {
        err = json_pack("{s:i, s:s}", "code", -32601, "message", "method not found");
    }
    reply = json_pack("{s:s, s:O}", "jsonrpc", "2.0", "id", id ? id : json_null());
    json_object_set_new(reply, result ? "result" : "error", result ? result : err);
    return reply;
}

/* One line of @in into @buf (@size bytes, NUL-terminated, without its newline): its length,
 * size or more when it was longer (the rest read and dropped: memory stays bounded), -1 at
 * the end of input. */
static ssize_t read_line(FILE *in, char *buf, size_t size)
{
    size_t n = 0;
    int ch;

    while ((ch = getc(in)) != EOF && ch != '\n')
        if (n < size - 1)
            buf[n++] = (char)ch;
        else
            n = size; /* past the bound: keep reading to the line's end */
    if (ch == EOF && n == 0)
        return -1;
    buf[n < size ? n : size - 1] = '\0';
    return (ssize_t)n;
}

static void send_message(json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);

    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    free(text);
}

struct mcp *mcp_new(const char *socket, bool allow_actions, char *err, size_t err_len)
{
    struct mcp *m = calloc(1, sizeof(*m));
    ssize_t len;

    if (!m) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    m->socket = socket;
    m->allow_actions = allow_actions;
    len = readlink("/proc/self/exe", m->self, sizeof(m->self) - 1);
    if (len <= 0) {
        snprintf(err, err_len, "/proc/self/exe: %s", strerror(errno));
        free(m);
        return NULL;
    }
    m->self[len] = '\0';
    if (socket)
        setenv("PROBED_SOCKET", socket, 1); /* the commands the tools run */
    return m;
}

void mcp_free(struct mcp *m)
{
    free(m);
}

int mcp_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"allow-actions", no_argument, NULL, 'A'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL;
    bool allow_actions = false;
    char *line = NULL, err[512];
    struct mcp *m;
    ssize_t len;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'A':
            allow_actions = true;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl mcp [--allow-actions] [--socket PATH]\n"
                   "  A Model Context Protocol server on stdin/stdout for AI assistants, as you:\n"
                   "  tools that read (targets, backtrace, query, hot functions, flame graph,\n"
                   "  memory, torch, collectives, hang, crashes) and, with --allow-actions,\n"
                   "  attach, detach and eval. Over HTTP: probectl web serves it at /mcp.\n"
                   "  See docs/mcp.md for clients' configuration.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "probectl mcp: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!(m = mcp_new(socket, allow_actions, err, sizeof(err)))) {
        fprintf(stderr, "probectl mcp: %s\n", err);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (!(line = malloc(MCP_LINE_MAX + 1))) {
        mcp_free(m);
        return 1;
    }
    while ((len = read_line(stdin, line, MCP_LINE_MAX + 1)) >= 0) {
        json_error_t jerr;
        json_t *msg, *reply;

        if (len > MCP_LINE_MAX) {
            reply = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                              -32600, "message", "message too large");
        } else if (len == 0) {
            continue;
        } else if (!(msg = json_loads(line, 0, &jerr))) {
            reply = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                              -32700, "message", jerr.text);
        } else {
            reply = mcp_handle(m, msg);
            json_decref(msg);
        }
        if (reply)
            send_message(reply);
        json_decref(reply);
    }
    free(line);
    mcp_free(m);
    return 0;
}
