/* crashes.c - see crashes.h. */
#define _GNU_SOURCE
#include "ctl/crashes.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/units.h"
#include "ctl/backtrace.h"
#include "ctl/client.h"

#define CRASHES_MAX 100 /* the latest shown */

static json_t *rows_of(const char *socket, const char *sql, json_t **keep)
{
    json_t *body = json_pack("{s:s}", "sql", sql);

    *keep = client_request(socket, "POST", "/v1/query", body);
    json_decref(body);
    return *keep ? json_object_get(*keep, "rows") : NULL;
}

/* The last stacks of crash @id: [{tid, thread, frames: [{function, file, line, kind}]}]. */
static json_t *stacks_of(const char *socket, long long id)
{
    char sql[512];
    json_t *keep, *rows, *row, *threads = json_array(), *cur = NULL;
    size_t i;

    snprintf(sql, sizeof(sql),
             "SELECT tid, thread, depth, kind, func, file, lineno FROM crash_stacks"
             " WHERE crash_id = %lld ORDER BY tid, depth",
             id);
    rows = rows_of(socket, sql, &keep);
    json_array_foreach(rows, i, row)
    {
        long long tid = client_int(row, 0);
        if (!cur || json_integer_value(json_object_get(cur, "tid")) != tid) {
            cur = json_pack("{s:I, s:O, s:[]}", "tid", (json_int_t)tid, "thread",
                            json_array_get(row, 1), "frames");
            json_array_append_new(threads, cur);
        }
        json_array_append_new(json_object_get(cur, "frames"),
                              json_pack("{s:O, s:O, s:O, s:O}", "kind", json_array_get(row, 3),
                                        "function", json_array_get(row, 4), "file",
                                        json_array_get(row, 5), "line", json_array_get(row, 6)));
    }
    json_decref(keep);
    return threads;
}

/* An exception's frames (innermost first in the record), printed as Python prints a
 * traceback: the innermost last, each with its locals. */
static void print_frames(json_t *frames, const char *indent)
{
    for (size_t i = json_array_size(frames); i-- > 0;) {
        json_t *f = json_array_get(frames, i), *l;
        size_t k;

        printf("%s%s (%s:%lld)\n", indent, json_string_value(json_object_get(f, "function")),
               json_string_value(json_object_get(f, "file")),
               (long long)json_integer_value(json_object_get(f, "line")));
        json_array_foreach(json_object_get(f, "locals"), k, l)
            printf("%s    %s = %s\n", indent, json_string_value(json_object_get(l, "name")),
                   json_string_value(json_object_get(l, "value")));
    }
}

/* What `catch` saw: an exception's traceback and what led to it, or every thread's stacks at
 * a fatal signal. */
static void print_detail(json_t *c)
{
    json_t *d = json_object_get(c, "detail"), *link;
    const char *kind = json_string_value(json_object_get(c, "kind"));
    size_t i;

    if (!json_is_object(d))
        return;
    if (strcmp(kind, "exception") == 0) {
        json_t *chain = json_object_get(d, "chain");
        for (i = json_array_size(chain); i-- > 0;) { /* the first cause first, as Python does */
            link = json_array_get(chain, i);
            printf("  %s: %s\n", json_string_value(json_object_get(link, "type")),
                   json_string_value(json_object_get(link, "message")));
            print_frames(json_object_get(link, "frames"), "    ");
            printf("  %s\n",
                   strcmp(json_string_value(json_object_get(link, "relation")) ?: "", "cause") == 0
                       ? "which was the direct cause of:"
                       : "during whose handling another happened:");
        }
        printf("  %s: %s (traceback, innermost last, with locals)\n",
               json_string_value(json_object_get(d, "type")),
               json_string_value(json_object_get(d, "message")));
        print_frames(json_object_get(d, "frames"), "    ");
    } else if (json_is_object(json_object_get(d, "stacks"))) {
        printf("  every thread as it failed (read in %.1f ms):\n",
               json_number_value(json_object_get(d, "read_ms")));
        backtrace_print_text(json_object_get(d, "stacks"));
    } else if (json_is_string(json_object_get(d, "error"))) {
        printf("  stacks: %s\n", json_string_value(json_object_get(d, "error")));
    }
}

static void print_crash(json_t *c)
{
    json_t *t, *f;
    size_t i, k;
    const char *kernel = json_string_value(json_object_get(c, "kernel"));
    json_t *rank = json_object_get(c, "rank");

    printf("%s  pid %lld", json_string_value(json_object_get(c, "ts")),
           (long long)json_integer_value(json_object_get(c, "pid")));
    if (json_is_integer(rank))
        printf(" (rank %lld)", (long long)json_integer_value(rank));
    printf("  %s\n  %s\n", json_string_value(json_object_get(c, "cmdline")),
           json_string_value(json_object_get(c, "message")));
    print_detail(c);
    if (json_is_string(json_object_get(c, "core_path")))
        printf("  core: %s (probectl backtrace --core %s)\n",
               json_string_value(json_object_get(c, "core_path")),
               json_string_value(json_object_get(c, "core_path")));
    for (const char *p = kernel; p && *p;) {
        const char *nl = strchr(p, '\n');
        printf("  kernel: %.*s\n", (int)(nl ? nl - p : (long)strlen(p)), p);
        p = nl ? nl + 1 : p + strlen(p);
    }
    if (json_is_object(json_object_get(c, "detail"))) { /* catch's: what it saw is better */
        printf("\n");
        return;
    }
    json_array_foreach(json_object_get(c, "last_stacks"), i, t)
    {
        printf("  last sampled stack of thread %lld \"%s\":\n",
               (long long)json_integer_value(json_object_get(t, "tid")),
               json_string_value(json_object_get(t, "thread")) ?: "?");
        json_array_foreach(json_object_get(t, "frames"), k, f)
        {
            if (strcmp(json_string_value(json_object_get(f, "kind")) ?: "", "python") == 0)
                printf("    %s (%s:%lld)\n", json_string_value(json_object_get(f, "function")),
                       json_string_value(json_object_get(f, "file")),
                       (long long)json_integer_value(json_object_get(f, "line")));
            else
                printf("    %s [%s]\n", json_string_value(json_object_get(f, "function")),
                       json_string_value(json_object_get(f, "file")));
        }
    }
    printf("\n");
}

int crashes_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"since", required_argument, NULL, 's'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *since = NULL;
    char sql[1024], pid_cond[64] = "", since_cond[96] = "";
    json_t *keep, *rows, *row, *out = json_array();
    int c, pid = 0, as_json = 0;
    size_t i;

    while ((c = getopt_long(argc, argv, "s:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            since = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl crashes [PID] [--since 1h] [--json]\n"
                   "  How attached processes ended: exit status, signal, the OOM killer, with\n"
                   "  the kernel's lines and each thread's last sampled stack (latest %d).\n",
                   CRASHES_MAX);
            json_decref(out);
            return 0;
        default:
            json_decref(out);
            return 2;
        }
    }
    if (optind < argc && (pid = client_parse_pid(argv[optind++], "crashes")) < 0)
        return json_decref(out), 2;
    if (optind != argc || (since && units_duration_ns(since) <= 0)) {
        fprintf(stderr, "probectl crashes: expected [PID] [--since DURATION like 1h]\n");
        json_decref(out);
        return 2;
    }
    if (pid)
        snprintf(pid_cond, sizeof(pid_cond), " AND pid = %d", pid);
    if (since)
        snprintf(since_cond, sizeof(since_cond), " AND ts_ns > ago('%s')", since);
    snprintf(sql, sizeof(sql),
             "SELECT crash_id, ts, pid, rank, cmdline, kind, exit_code, signal, core_dumped,"
             " message, kernel, ts_ns, tid, detail, core_path FROM crash_report WHERE 1%s%s"
             " ORDER BY ts_ns DESC, crash_id DESC LIMIT %d",
             pid_cond, since_cond, CRASHES_MAX);
    rows = rows_of(socket, sql, &keep);
    if (!rows) {
        json_decref(out);
        return 1;
    }
    json_array_foreach(rows, i, row)
    {
        json_t *cr =
            json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:b, s:O, s:O, s:O}", "id",
                      json_array_get(row, 0), "ts", json_array_get(row, 1), "pid",
                      json_array_get(row, 2), "rank", json_array_get(row, 3), "cmdline",
                      json_array_get(row, 4), "kind", json_array_get(row, 5), "exit_code",
                      json_array_get(row, 6), "signal", json_array_get(row, 7), "core_dumped",
                      client_int(row, 8) != 0, "message", json_array_get(row, 9), "kernel",
                      json_array_get(row, 10), "ts_ns", json_array_get(row, 11));
        const char *detail = json_string_value(json_array_get(row, 13));
        json_object_set(cr, "tid", json_array_get(row, 12));
        json_t *jd = detail ? json_loads(detail, 0, NULL) : NULL;
        json_object_set_new(cr, "detail", jd ? jd : json_null());
        json_object_set(cr, "core_path", json_array_get(row, 14));
        json_object_set_new(cr, "last_stacks", stacks_of(socket, client_int(row, 0)));
        json_array_append_new(out, cr);
    }
    json_decref(keep);
    if (as_json) {
        json_dumpf(out, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        printf("\n");
    } else if (json_array_size(out) == 0) {
        printf("no attached process of yours has ended%s%s\n", since ? " in the last " : "",
               since ? since : "");
    } else {
        json_array_foreach(out, i, row) print_crash(row);
    }
    json_decref(out);
    return 0;
}

/* ---- probectl catch ---- */

static json_t *catch_call(const char *socket, json_t *body, long *status, bool quiet_404)
{
    return client_post(socket, "/v1/catch", body, NULL, "catch", quiet_404, status);
}

int catch_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"no-signals", no_argument, NULL, 'n'},
                                             {"postmortem", no_argument, NULL, 'p'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *action = "on";
    json_t *body, *reply;
    long status = 0;
    int c, pid, signals = 1, postmortem = 0;

    while ((c = getopt_long(argc, argv, "nph", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            signals = 0;
            break;
        case 'p':
            postmortem = 1;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl catch PID [on|off] [--no-signals] [--postmortem]\n"
                   "  Records in crashes, as they happen: every uncaught exception of the\n"
                   "  process (any thread), with its traceback and each frame's locals; and at a\n"
                   "  fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) every thread's\n"
                   "  Python and native stacks, read while the failing thread waits (at most\n"
                   "  %d ms). What the process does next is unchanged: the hooks and handlers\n"
                   "  that were there run after ours. `off` removes ours. See them with\n"
                   "  probectl crashes PID.\n"
                   "  --postmortem  the failing thread then waits in pdb on its traceback (the\n"
                   "                process stays up) until you leave it: probectl debug PID\n",
                   2000);
            return 0;
        default:
            return 2;
        }
    }
    if (optind >= argc || optind + 2 < argc) {
        fprintf(stderr, "probectl catch: expected PID [on|off]\n");
        return 2;
    }
    if ((pid = client_parse_pid(argv[optind], "catch")) < 0)
        return 2;
    if (optind + 1 < argc)
        action = argv[optind + 1];
    if (strcmp(action, "on") != 0 && strcmp(action, "off") != 0) {
        fprintf(stderr, "probectl catch: '%s': expected on or off\n", action);
        return 2;
    }
    body = json_pack("{s:i, s:s, s:b, s:b}", "pid", pid, "action", action, "signals", signals,
                     "postmortem", postmortem);
    reply = catch_call(socket, body, &status, strcmp(action, "on") == 0);
    if (!reply && status == 404 && strcmp(action, "on") == 0 &&
        client_ensure_attached(socket, pid) == 0) {
        reply = catch_call(socket, body, &status, false);
        if (!reply)
            client_detach_quietly(socket, pid);
    }
    json_decref(body);
    if (!reply)
        return 1;
    if (strcmp(action, "off") == 0)
        printf("pid %d: catch off (its hooks and handlers removed)\n", pid);
    else
        printf(
            "pid %d: catching uncaught exceptions (every thread)%s; see: probectl crashes %d%s\n",
            pid,
            json_integer_value(json_object_get(reply, "signals")) > 0
                ? " and fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT)"
                : "",
            pid,
            json_is_true(json_object_get(reply, "postmortem"))
                ? "; a failing thread waits in pdb for probectl debug"
                : "");
    json_decref(reply);
    return 0;
}
