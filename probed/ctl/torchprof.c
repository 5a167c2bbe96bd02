/* torchprof.c - see torchprof.h. */
#define _GNU_SOURCE
#include "ctl/torchprof.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/flameout.h"

#define POLL_MS 250
#define PAGE_ROWS 20000 /* events read per query while writing the trace file */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *profile_call(const char *socket, json_t *body, long *status, bool quiet_404)
{
    return client_post(socket, "/v1/torch", body, "being drained", "torch", quiet_404, status);
}

json_t *torch_post_attaching(const char *socket, int pid, json_t *body)
{
    long status = 0;
    json_t *reply = profile_call(socket, body, &status, true);

    if (!reply && status == 404 && client_ensure_attached(socket, pid) == 0) {
        reply = profile_call(socket, body, &status, false);
        if (!reply) /* nothing done: no attach left behind either */
            client_detach_quietly(socket, pid);
    }
    return reply;
}

/* Arms the profile (attaching first when the process is not): the daemon's reply, or NULL
 * after printing why. */
static json_t *arm(const char *socket, int pid, const struct torch_profile_options *o)
{
    json_t *body = json_pack("{s:i, s:s}", "pid", pid, "action", "profile"), *reply;

    json_object_set_new(body, o->steps ? "steps" : "duration_ms",
                        json_integer(o->steps ? o->steps : o->duration_ms));
    reply = torch_post_attaching(socket, pid, body);
    json_decref(body);
    return reply;
}

static void cancel(const char *socket, int pid)
{
    json_t *body = json_pack("{s:i, s:s, s:b}", "pid", pid, "action", "profile", "cancel", 1);
    long status;

    json_decref(profile_call(socket, body, &status, false));
    json_decref(body);
}

/* The profile's torch_profiles row (state, steps, events, dropped, error, activities,
 * profiler, duration_ns), or NULL while the daemon has not stored one; *keep is freed by the
 * caller. */
static json_t *profile_row(const char *socket, int pid, long long target, long long number,
                           json_t **keep)
{
    char sql[512];
    json_t *rows;

    snprintf(sql, sizeof(sql),
             "SELECT state, steps, events, dropped, error, activities, profiler, duration_ns"
             " FROM torch_profiles WHERE target_id = %lld AND profile = %lld",
             target, number);
    rows = client_rows(socket, pid, sql, keep);
    return rows ? json_array_get(rows, 0) : NULL;
}

static bool finished(const char *state)
{
    return state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "cancelled") == 0);
}

/* Waits for the profile to end and be stored: its row, or NULL after printing why (and
 * cancelling it on a timeout or Ctrl-C). */
static json_t *await_profile(const char *socket, int pid, long long target, long long number,
                             const struct torch_profile_options *o, json_t **keep)
{
    long long deadline = now_ms() + o->timeout_ms;
    char shown[32] = "";
    bool tty = isatty(STDERR_FILENO);

    for (;;) {
        json_t *row = profile_row(socket, pid, target, number, keep);
        const char *state = json_string_value(json_array_get(row, 0));

        if (!*keep)
            return NULL; /* the query failed: printed */
        if (finished(state))
            return row;
        if (tty && state && strcmp(state, shown) != 0)
            fprintf(stderr, "probectl torch: profile %lld %s\n", number, state);
        if (state)
            snprintf(shown, sizeof(shown), "%s", state);
        if (interrupted || now_ms() > deadline) {
            cancel(socket, pid);
            if (interrupted)
                fprintf(stderr, "probectl torch: interrupted: profile %lld of pid %d cancelled\n",
                        number, pid);
            else
                fprintf(stderr,
                        "probectl torch: profile %lld of pid %d is still %s after %lld s:"
                        " cancelled. It starts and stops at step boundaries (an optimizer step,"
                        " or the model called again in inference): is the job stepping?"
                        " (--timeout)\n",
                        number, pid, state ? state : "armed", o->timeout_ms / 1000);
            json_decref(*keep);
            *keep = NULL;
            return NULL;
        }
        json_decref(*keep);
        *keep = NULL;
        usleep(POLL_MS * 1000);
    }
}

/* One summary table: @sql's rows (name, calls, total ms, mean us, module), under @title. */
static void print_table(const char *socket, int pid, const char *title, const char *sql)
{
    json_t *keep, *rows = client_rows(socket, pid, sql, &keep), *row;
    size_t i;

    if (!rows || json_array_size(rows) == 0) {
        json_decref(keep);
        return;
    }
    printf("\n%s\n%-48s %7s %11s %10s  %s\n", title, "NAME", "CALLS", "TOTAL ms", "MEAN us",
           "MODULE (most time)");
    json_array_foreach(rows, i, row)
    {
        const char *module = json_string_value(json_array_get(row, 4));
        printf("%-48.48s %7lld %11.3f %10.1f  %s\n", json_string_value(json_array_get(row, 0)),
               client_int(row, 1), client_num(row, 2), client_num(row, 3), module ? module : "-");
    }
    json_decref(keep);
}

/* The steps' wall times and, per GPU, its busy share of them (torch_profile_steps). */
static void print_steps(const char *socket, int pid, long long target, long long number)
{
    char sql[512];
    json_t *keep, *rows, *row;
    size_t i;

    snprintf(sql, sizeof(sql),
             "SELECT device, count(*), avg(duration_ns) / 1e6, min(duration_ns) / 1e6,"
             " max(duration_ns) / 1e6, 100.0 * sum(busy_ns) / sum(duration_ns), sum(kernels)"
             " FROM torch_profile_steps WHERE target_id = %lld AND profile = %lld"
             " GROUP BY device ORDER BY device",
             target, number);
    rows = client_rows(socket, pid, sql, &keep);
    json_array_foreach(rows, i, row)
    {
        if (json_is_integer(json_array_get(row, 0)))
            printf("GPU %lld: busy %.1f %% of the steps' time (%lld kernels, memcpys and memsets;"
                   " steps %.2f ms mean, %.2f-%.2f)\n",
                   client_int(row, 0), client_num(row, 5), client_int(row, 6), client_num(row, 2),
                   client_num(row, 3), client_num(row, 4));
        else
            printf("steps: %.2f ms mean (%.2f-%.2f)%s\n", client_num(row, 2), client_num(row, 3),
                   client_num(row, 4),
                   json_array_size(rows) > 1 ? " without device work" : ", no device work");
    }
    json_decref(keep);
}

static void print_summary(const char *socket, int pid, long long target, long long number,
                          json_t *row, int top)
{
    const char *state = json_string_value(json_array_get(row, 0));
    char sql[1024];
    const char *by_name =
        "SELECT name, count(*), sum(duration_ns) / 1e6, avg(duration_ns) / 1e3,"
        " (SELECT module FROM %s m WHERE m.target_id = e.target_id AND m.profile = e.profile AND"
        " m.name = e.name AND m.module IS NOT NULL GROUP BY module ORDER BY sum(duration_ns) DESC"
        " LIMIT 1) FROM %s e WHERE target_id = %lld AND profile = %lld%s GROUP BY name"
        " ORDER BY sum(duration_ns) DESC LIMIT %d";

    printf("pid %d: profile %lld %s: %lld step%s in %.1f ms, %lld events (%s profiler, %s)%s\n",
           pid, number, state, client_int(row, 1), client_int(row, 1) == 1 ? "" : "s",
           client_num(row, 7) / 1e6, client_int(row, 2), json_string_value(json_array_get(row, 6)),
           json_string_value(json_array_get(row, 5)),
           client_int(row, 3) ? ", some dropped (the limit of one profile)" : "");
    print_steps(socket, pid, target, number);
    snprintf(sql, sizeof(sql), by_name, "gpu_kernels", "gpu_kernels", target, number,
             " AND kind <> 'gpu_user_annotation'", top);
    print_table(socket, pid, "GPU kernels, memcpys and memsets (device time):", sql);
    /* Kineto's device-side spans of the nn.Module and record_function ranges: what each ran on
     * the GPU, first kernel to last (they overlap the kernels above, and each other) */
    snprintf(sql, sizeof(sql), by_name, "gpu_kernels", "gpu_kernels", target, number,
             " AND kind = 'gpu_user_annotation'", top);
    print_table(socket, pid,
                "GPU time of module and record_function ranges (first kernel to last):", sql);
    snprintf(sql, sizeof(sql), by_name, "torch_ops", "torch_ops", target, number,
             " AND kind = 'cpu_op'", top);
    print_table(socket, pid, "CPU ops (host time, an op's time includes the ops it calls):", sql);
    printf("\n  see: probectl query \"SELECT * FROM gpu_kernels WHERE pid = %d AND profile ="
           " %lld\"; torch_ops likewise\n",
           pid, number);
}

/* A JSON string for the trace file (names are the job's: anything may be in them); NULL is
 * null. */
static void put_string(FILE *f, const char *s)
{
    json_t *j = s ? json_string(s) : json_null();
    char *text = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;

    fputs(text ? text : "null", f);
    free(text);
    json_decref(j);
}

/* The profile's rows as a Chrome trace (chrome://tracing, Perfetto, speedscope): the job's
 * threads under "pid N", each GPU's streams under "GPU d"; times in microseconds since the
 * profile began. 0, or -1 after printing why. */
static int write_trace(const char *socket, int pid, long long target, long long number,
                       const char *path)
{
    FILE *f = fopen(path, "w");
    long long last = -1, start_ns = -1, n = 0;
    char sql[512];
    bool more = true;

    if (!f) {
        fprintf(stderr, "probectl torch: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", f);
    while (more) {
        json_t *keep, *rows, *row;
        size_t i;

        snprintf(sql, sizeof(sql),
                 "SELECT seq, kind, name, module, stage, step, ts_ns, duration_ns, tid, device,"
                 " stream FROM torch_profile_events WHERE target_id = %lld AND profile = %lld"
                 " AND seq > %lld ORDER BY seq LIMIT %d",
                 target, number, last, PAGE_ROWS);
        rows = client_rows(socket, pid, sql, &keep);
        if (!rows) {
            fclose(f);
            return -1;
        }
        more = json_array_size(rows) == PAGE_ROWS;
        json_array_foreach(rows, i, row)
        {
            bool device = json_is_integer(json_array_get(row, 9));
            long long ts = client_int(row, 6);

            if (start_ns < 0)
                start_ns = ts; /* rows come in time order */
            last = client_int(row, 0);
            fputs(n++ ? ",\n" : "\n", f);
            fputs("{\"ph\": \"X\", \"name\": ", f);
            put_string(f, json_string_value(json_array_get(row, 2)));
            fputs(", \"cat\": ", f);
            put_string(f, json_string_value(json_array_get(row, 1)));
            if (device)
                fprintf(f, ", \"pid\": \"GPU %lld\", \"tid\": \"stream %lld\"", client_int(row, 9),
                        client_int(row, 10));
            else
                fprintf(f, ", \"pid\": \"pid %d\", \"tid\": %lld", pid, client_int(row, 8));
            fprintf(f, ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"module\": ",
                    (double)(ts - start_ns) / 1e3, client_num(row, 7) / 1e3);
            put_string(f, json_string_value(json_array_get(row, 3)));
            fputs(", \"stage\": ", f);
            put_string(f, json_string_value(json_array_get(row, 4)));
            if (json_is_integer(json_array_get(row, 5)))
                fprintf(f, ", \"step\": %lld", client_int(row, 5));
            fputs("}}", f);
        }
        json_decref(keep);
    }
    fprintf(f, "\n], \"otherData\": {\"pid\": %d, \"profile\": %lld, \"start_unix_ns\": %lld}}\n",
            pid, number, start_ns);
    if (fclose(f) != 0) {
        fprintf(stderr, "probectl torch: writing %s: %s\n", path, strerror(errno));
        return -1;
    }
    printf("wrote %s: %lld events (open it in https://ui.perfetto.dev or chrome://tracing)\n", path,
           n);
    return 0;
}

int torch_profile(const char *socket, int pid, const struct torch_profile_options *o)
{
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    json_t *reply = arm(socket, pid, o), *keep = NULL, *row;
    long long target, number;
    int rc = 1;

    if (!reply)
        return 1;
    target = (long long)json_integer_value(json_object_get(reply, "target_id"));
    number =
        (long long)json_integer_value(json_object_get(json_object_get(reply, "profile"), "number"));
    json_decref(reply);
    if (!target || !number) {
        fprintf(stderr, "probectl torch: the daemon did not say which profile it armed\n");
        return 1;
    }
    fprintf(stderr,
            "probectl torch: profile %lld of pid %d armed: it starts at the next step boundary\n",
            number, pid);
    sigaction(SIGINT, &sa, &old);
    row = await_profile(socket, pid, target, number, o, &keep);
    sigaction(SIGINT, &old, NULL);
    if (!row)
        return 1;
    if (strcmp(json_string_value(json_array_get(row, 0)), "done") != 0) {
        fprintf(stderr, "probectl torch: profile %lld of pid %d %s%s%s\n", number, pid,
                json_string_value(json_array_get(row, 0)),
                json_is_string(json_array_get(row, 4)) ? ": " : "",
                json_is_string(json_array_get(row, 4)) ? json_string_value(json_array_get(row, 4))
                                                       : "");
        json_decref(keep);
        return 1;
    }
    print_summary(socket, pid, target, number, row, o->top);
    json_decref(keep);
    rc = o->output ? (write_trace(socket, pid, target, number, o->output) < 0) : 0;
    return rc;
}

/* The frame a stack is best known by: its innermost, "function (file:line)". */
static void innermost(json_t *frames, char *out, size_t size)
{
    json_t *f = json_array_get(frames, json_array_size(frames) - 1);
    const char *func = json_string_value(json_array_get(f, 1));
    const char *file = json_string_value(json_array_get(f, 2));

    if (file)
        snprintf(out, size, "%s (%s:%lld)", func ? func : "?", file,
                 (long long)json_integer_value(json_array_get(f, 3)));
    else
        snprintf(out, size, "%s", func ? func : "?");
}

int torch_memory(const char *socket, int pid, long long record_ms, const char *output,
                 const char *format, int top)
{
    json_t *body = json_pack("{s:i, s:s, s:I}", "pid", pid, "action", "memory", "record_ms",
                             (json_int_t)record_ms),
           *reply, *keep = NULL, *rows, *row;
    struct flame_sums sums;
    long long target, snapshot;
    double total = 0;
    char sql[512], where[160];
    size_t i;
    int rc = 0;

    fprintf(stderr, "probectl torch: recording pid %d's GPU allocations for %.1f s\n", pid,
            (double)record_ms / 1e3);
    reply = torch_post_attaching(socket, pid, body);
    json_decref(body);
    if (!reply)
        return 1;
    target = (long long)json_integer_value(json_object_get(reply, "target_id"));
    snapshot = (long long)json_integer_value(json_object_get(reply, "snapshot"));
    json_decref(reply);
    snprintf(where, sizeof(where), "target_id = %lld AND snapshot = %lld", target, snapshot);
    snprintf(sql, sizeof(sql),
             "SELECT frames, bytes, blocks, device FROM gpu_memory WHERE %s ORDER BY bytes DESC",
             where);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return 1;
    json_array_foreach(rows, i, row) total += client_num(row, 1);
    printf("pid %d: GPU memory snapshot %lld: %.1f MiB in %zu stacks (allocations' Python stacks"
           " recorded for %.1f s; older blocks under <allocated before recording>)\n",
           pid, snapshot, total / 1048576.0, json_array_size(rows), (double)record_ms / 1e3);
    printf("%12s %8s %7s  %s\n", "MiB", "BLOCKS", "DEVICE", "ALLOCATED AT (innermost frame)");
    flame_sums_init(&sums);
    json_array_foreach(rows, i, row)
    {
        json_t *frames = json_loads(json_string_value(json_array_get(row, 0)), 0, NULL);
        char at[512];

        if (!frames)
            continue; /* never from torchtrace.py */
        if ((int)i < top) {
            innermost(frames, at, sizeof(at));
            printf("%12.2f %8lld %7lld  %s\n", client_num(row, 1) / 1048576.0, client_int(row, 2),
                   client_int(row, 3), at);
        }
        flame_sums_add(&sums, frames, NULL, (int64_t)client_int(row, 1));
        json_decref(frames);
    }
    if (output)
        rc = flame_sums_write(&sums, format, "live GPU memory (bytes) by allocating stack", output,
                              "torch") < 0;
    if (output && !rc)
        printf("wrote %s\n", output);
    flame_sums_free(&sums);
    json_decref(keep);
    return rc;
}
