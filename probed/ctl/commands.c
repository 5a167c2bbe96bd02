/* commands.c - see commands.h. */
#define _GNU_SOURCE
#include "ctl/commands.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/flameout.h"
#include "ctl/output.h"

/* Options every command takes. */
#define COMMON_LONGOPTS                                                                            \
    {"socket", required_argument, NULL, 'S'},                                                      \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* A stretch of samples the database would not take (a full disk): said under the target. */
static void print_gap(const json_t *pid, const json_t *gap)
{
    time_t from, to;
    char a[32], b[32];

    if (!json_is_object(gap))
        return;
    from = (time_t)(json_integer_value(json_object_get(gap, "from_ns")) / 1000000000LL);
    to = (time_t)(json_integer_value(json_object_get(gap, "to_ns")) / 1000000000LL);
    strftime(a, sizeof(a), "%Y-%m-%d %H:%M:%S", localtime(&from));
    strftime(b, sizeof(b), "%H:%M:%S", localtime(&to));
    printf("pid %lld: gap: %lld samples lost from %s to %s (%s)\n",
           (long long)json_integer_value(pid),
           (long long)json_integer_value(json_object_get(gap, "samples")), a, b,
           json_string_value(json_object_get(gap, "why")));
}

/* @bytes as 512K, 6.0G ("-": not known). */
static const char *size_text(json_t *bytes, char buf[16])
{
    double b = (double)json_integer_value(bytes);

    if (!json_is_integer(bytes))
        return "-";
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, 16, "%.1fG", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, 16, "%.0fM", b / (1024.0 * 1024));
    else
        snprintf(buf, 16, "%.0fK", b / 1024.0);
    return buf;
}

/* ---- attach / detach / list ---- */

int attach_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"rate", required_argument, NULL, 'r'},
                                             {"duration", required_argument, NULL, 'd'},
                                             {"children", no_argument, NULL, 'c'},
                                             {"native", optional_argument, NULL, 'n'},
                                             {"no-native", no_argument, NULL, 'N'},
                                             {"nccl", no_argument, NULL, 'C'},
                                             {"no-nccl", no_argument, NULL, 'D'},
                                             {"json", no_argument, NULL, 'j'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *duration = NULL, *native_backend = NULL;
    int64_t duration_ns = 0;
    json_t *body, *reply;
    bool as_json = false, children = false, native = false, no_native = false;
    int nccl = -1; /* --nccl 1, --no-nccl 0, neither -1 */
    long rate = 0;
    int c, pid;

    while ((c = getopt_long(argc, argv, "r:d:cnjh", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            rate = atol(optarg);
            break;
        case 'd':
            duration = optarg;
            break;
        case 'j':
            as_json = true;
            break;
        case 'c':
            children = true;
            break;
        case 'n':
            native = true;
            native_backend = optarg;
            if (native_backend && strcmp(native_backend, "perf") != 0) {
                fprintf(stderr, "probectl attach: --native takes no value or =perf, not '%s'\n",
                        native_backend);
                return 2;
            }
            break;
        case 'N':
            no_native = true;
            break;
        case 'C':
        case 'D':
            if (nccl == (c == 'D')) {
                fprintf(stderr, "probectl attach: --nccl or --no-nccl, not both\n");
                return 2;
            }
            nccl = c == 'C';
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl attach <pid> [--rate HZ] [--duration DUR] [--children]"
                   " [--native[=perf] | --no-native] [--nccl | --no-nccl] [--json]\n"
                   "  Starts sampling the process's Python stacks into the daemon's database.\n"
                   "  --rate HZ        samples per second (default: the daemon's, 100)\n"
                   "  --duration DUR   stop after this long (30s, 5m, 2h)\n"
                   "  --children       also attach its new Python descendants (torchrun ranks,\n"
                   "                   dataloader workers), labelled with RANK/LOCAL_RANK\n"
                   "  --native         native frames too (C, C++, libraries), and threads with no\n"
                   "                   Python frames; the target is never stopped. The eBPF\n"
                   "                   sampler copies native and Python frames in one instant;\n"
                   "                   where it cannot load (no CAP_BPF), perf samples them\n"
                   "  --native=perf    perf alone, even where eBPF could be used\n"
                   "  --nccl           its calls into NCCL recorded too (comm_calls: every\n"
                   "                   collective, send and receive, whoever issues them), by\n"
                   "                   uprobes on its libnccl, where nccl_calls is off for the\n"
                   "                   others; each call costs ~10 us more (bench/nccl.py)\n"
                   "  On a process attached already, --native, --native=perf and --no-native\n"
                   "  (Python frames alone), --nccl and --no-nccl change how it is sampled, in\n"
                   "  place: its rate and timeline stay.\n");
            return 0;
        default:
            return 2;
        }
    }
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "attach")) < 0 ||
        optind + 1 != argc)
        return 2;
    if (native && no_native) {
        fprintf(stderr, "probectl attach: --native or --no-native, not both\n");
        return 2;
    }
    if (duration &&
        client_parse_duration(duration, "attach", "--duration", 0.001, 1e9, &duration_ns) < 0)
        return 2;
    body = json_pack("{s:i}", "pid", pid);
    if (rate)
        json_object_set_new(body, "rate", json_integer(rate));
    if (duration) /* seconds, as the API takes them */
        json_object_set_new(body, "duration", json_real((double)duration_ns / 1e9));
    if (children)
        json_object_set_new(body, "children", json_true());
    if (native)
        json_object_set_new(body, "native", native_backend ? json_string("perf") : json_true());
    if (no_native)
        json_object_set_new(body, "native", json_false());
    if (nccl >= 0)
        json_object_set_new(body, "nccl", json_boolean(nccl));
    if (native || no_native || nccl >= 0) /* one attached already changes its mode */
        json_object_set_new(body, "switch", json_true());
    reply = client_request(socket, "POST", "/v1/targets", body);
    json_decref(body);
    if (!reply)
        return 1;
    if (as_json) {
        json_dumpf(reply, stdout, JSON_INDENT(2));
        printf("\n");
    } else if (json_is_true(json_object_get(reply, "following"))) {
        printf("following pid %d (%s): not Python, so not sampled; its Python descendants are "
               "attached as they start\n",
               pid, json_string_value(json_object_get(reply, "cmdline")));
    } else {
        const char *why = json_string_value(json_object_get(reply, "native_error"));
        const char *no_ebpf =
            json_string_value(json_object_get(json_object_get(reply, "native"), "ebpf_error"));
        printf("%s pid %d (Python %s) at %lld Hz, %s\n",
               json_is_true(json_object_get(reply, "switched")) ? "now sampling" : "attached to",
               pid, json_string_value(json_object_get(reply, "python_version")),
               (long long)json_integer_value(json_object_get(reply, "rate_hz")),
               json_string_value(json_object_get(reply, "mode")));
        if (json_is_true(json_object_get(reply, "nccl")))
            printf("its calls into NCCL are recorded (uprobes on its libnccl, once it maps"
                   " one)\n");
        if (why)
            printf("native stacks unavailable, Python frames only: %s\n", why);
        if (no_ebpf)
            printf("the eBPF sampler is unavailable, native stacks come from perf: %s\n", no_ebpf);
    }
    json_decref(reply);
    return 0;
}

/* detach --all | --match PATTERN: DELETE /v1/targets?..., the pids detached said. */
static int detach_many(const char *socket, const char *match, enum output_format format)
{
    char *path = NULL, *escaped = match ? curl_easy_escape(NULL, match, 0) : NULL;
    json_t *reply, *pid, *cols, *rows;
    size_t i;

    if ((match && !escaped) ||
        asprintf(&path, "/v1/targets?%s%s", match ? "match=" : "all=1", match ? escaped : "") < 0) {
        curl_free(escaped);
        fprintf(stderr, "probectl detach: out of memory\n");
        return 1;
    }
    curl_free(escaped);
    reply = client_request(socket, "DELETE", path, NULL);
    free(path);
    if (!reply)
        return 1;
    if (format == OUTPUT_JSON) {
        output_json(reply);
    } else if (format == OUTPUT_CSV) {
        cols = json_pack("[s]", "pid");
        rows = json_array();
        json_array_foreach(json_object_get(reply, "detached"), i, pid)
            json_array_append_new(rows, json_pack("[O]", pid));
        output_rows(OUTPUT_CSV, cols, rows);
        json_decref(cols);
        json_decref(rows);
    } else {
        printf("detached %zu process%s", json_array_size(json_object_get(reply, "detached")),
               json_array_size(json_object_get(reply, "detached")) == 1 ? "" : "es");
        json_array_foreach(json_object_get(reply, "detached"), i, pid)
            printf("%s%lld", i ? ", " : ": pid ", (long long)json_integer_value(pid));
        printf("\n");
    }
    json_decref(reply);
    return 0;
}

int detach_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"all", no_argument, NULL, 'a'},
                                             {"match", required_argument, NULL, 'm'},
                                             OUTPUT_LONGOPTS,
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    enum output_format format = OUTPUT_TABLE;
    const char *socket = NULL, *match = NULL;
    bool all = false;
    char path[64];
    json_t *reply;
    int c, pid;

    while ((c = getopt_long(argc, argv, "am:f:jh", longopts, NULL)) != -1) {
        if (c == 'S') {
            socket = optarg;
        } else if (c == 'a') {
            all = true;
        } else if (c == 'm') {
            match = optarg;
        } else if (c == 'f' || c == 'j') {
            if (output_option(c, optarg, "detach", &format) < 0)
                return 2;
        } else if (c == 'h') {
            printf("usage: probectl detach (<pid> | --all | --match PATTERN)"
                   " [--format table|csv|json | --json]\n"
                   "  Stops sampling; stored samples stay. --all: every process of yours;\n"
                   "  --match: those whose command line matches the regex (POSIX extended).\n");
            return 0;
        } else {
            return 2;
        }
    }
    if (all || match) {
        if (all && match) {
            fprintf(stderr, "probectl detach: --all or --match, not both\n");
            return 2;
        }
        if (optind != argc) {
            fprintf(stderr, "probectl detach: a pid, or --all or --match, not both\n");
            return 2;
        }
        return detach_many(socket, match, format);
    }
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "detach")) < 0)
        return 2;
    if (optind + 1 != argc) {
        fprintf(stderr, "probectl detach: one pid (%s is one too many; --match for several)\n",
                argv[optind + 1]);
        return 2;
    }
    snprintf(path, sizeof(path), "/v1/targets/%d", pid);
    reply = client_request(socket, "DELETE", path, NULL);
    if (!reply)
        return 1;
    if (format == OUTPUT_JSON) {
        output_json(reply);
    } else if (format == OUTPUT_CSV) {
        json_t *cols = json_pack("[s, s]", "pid", "samples");
        json_t *rows =
            json_pack("[[i, O]]", pid,
                      json_object_get(json_object_get(reply, "stats"), "samples") ?: json_null());

        output_rows(OUTPUT_CSV, cols, rows);
        json_decref(cols);
        json_decref(rows);
    } else if (json_is_false(json_object_get(reply, "following")))
        printf("no longer following pid %d\n", pid);
    else
        printf("detached from pid %d after %lld samples\n", pid,
               (long long)json_integer_value(
                   json_object_get(json_object_get(reply, "stats"), "samples")));
    json_decref(reply);
    return 0;
}

#define LIST_RECENT_NS (10 * 60 * 1000000000LL) /* ended targets listed without --all */

/* A target's row of `list`: raw numbers for CSV, sizes as 6.0G in the table. */
static json_t *target_row(json_t *t, bool gpu, bool table)
{
    json_t *st = json_object_get(t, "stats"), *row;
    bool torch = json_is_true(json_object_get(json_object_get(t, "torch"), "tracing"));
    char mode[32], size[16];

    snprintf(mode, sizeof(mode), "%s%s%s", json_string_value(json_object_get(t, "mode")) ?: "",
             torch ? "+torch" : "", json_is_true(json_object_get(t, "nccl")) ? "+nccl" : "");
    row = json_pack("[O, O, O, O, O, O]", json_object_get(t, "pid"), json_object_get(t, "state"),
                    json_object_get(t, "rate_hz"), json_object_get(t, "python_version"),
                    json_object_get(st, "samples"), json_object_get(st, "torn"));
    if (gpu)
        json_array_append_new(
            row, table ? json_string(size_text(json_object_get(t, "gpu_memory"), size))
                       : json_deep_copy(json_object_get(t, "gpu_memory") ?: json_null()));
    json_array_append_new(row, json_string(mode));
    json_array_append(row, json_object_get(t, "cmdline"));
    return row;
}

int list_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"all", no_argument, NULL, 'a'}, OUTPUT_LONGOPTS, COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    enum output_format format = OUTPUT_TABLE;
    const char *socket = NULL;
    json_t *reply, *t, *shown, *cols, *rows;
    int64_t now = (int64_t)time(NULL) * 1000000000LL;
    size_t i, hidden = 0;
    bool all = false, gpu = false;
    int c;

    while ((c = getopt_long(argc, argv, "af:jh", longopts, NULL)) != -1) {
        if (c == 'S') {
            socket = optarg;
        } else if (c == 'a') {
            all = true;
        } else if (c == 'f' || c == 'j') {
            if (output_option(c, optarg, "list", &format) < 0)
                return 2;
        } else if (c == 'h') {
            printf("usage: probectl list [--all] [--format table|csv|json | --json]\n"
                   "  The attached processes, and those that ended in the last 10 minutes\n"
                   "  (--all: every one the daemon still lists).\n");
            return 0;
        } else {
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "probectl list: takes no argument ('%s')\n", argv[optind]);
        return 2;
    }
    reply = client_request(socket, "GET", "/v1/targets", NULL);
    if (!reply)
        return 1;
    shown = json_array();
    json_array_foreach(json_object_get(reply, "targets"), i, t)
    {
        int64_t ended = json_integer_value(json_object_get(t, "ended_ns"));

        if (!all && ended && now - ended > LIST_RECENT_NS) {
            hidden++;
            continue;
        }
        json_array_append(shown, t);
        gpu |= json_integer_value(json_object_get(t, "gpu_memory")) > 0;
    }
    json_object_set_new(reply, "targets", shown);
    if (format == OUTPUT_JSON) {
        output_json(reply);
        json_decref(reply);
        return 0;
    }
    cols = gpu ? json_pack("[s, s, s, s, s, s, s, s, s]", "PID", "STATE", "RATE", "PYTHON",
                           "SAMPLES", "TORN", "GPU MEM", "MODE", "COMMAND")
               : json_pack("[s, s, s, s, s, s, s, s]", "PID", "STATE", "RATE", "PYTHON", "SAMPLES",
                           "TORN", "MODE", "COMMAND");
    rows = json_array();
    json_array_foreach(shown, i, t)
        json_array_append_new(rows, target_row(t, gpu, format == OUTPUT_TABLE));
    json_array_foreach(json_object_get(reply, "following"), i, t)
    {
        json_t *row = json_pack("[O, s, O, n, n, n]", json_object_get(t, "pid"), "following",
                                json_object_get(t, "rate_hz"));

        if (gpu)
            json_array_append_new(row, json_null());
        json_array_append_new(row, json_string("children"));
        json_array_append(row, json_object_get(t, "cmdline"));
        json_array_append_new(rows, row);
    }
    output_rows(format, cols, rows);
    if (format == OUTPUT_TABLE) {
        json_array_foreach(shown, i, t)
            print_gap(json_object_get(t, "pid"), json_object_get(t, "gap"));
        if (hidden)
            fprintf(stderr, "(%zu ended earlier: probectl list --all)\n", hidden);
    }
    json_decref(cols);
    json_decref(rows);
    json_decref(reply);
    return 0;
}

/* ---- query ---- */

int query_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"pid", required_argument, NULL, 'p'},
                                             OUTPUT_LONGOPTS,
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    enum output_format format = OUTPUT_TABLE;
    const char *socket = NULL;
    json_t *body, *reply;
    int c, pid = 0;

    while ((c = getopt_long(argc, argv, "p:f:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if ((pid = client_parse_pid(optarg, "query")) < 0)
                return 2;
            break;
        case 'f':
        case 'j':
            if (output_option(c, optarg, "query", &format) < 0)
                return 2;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl query \"<SQL>\" [--pid P] [--format table|csv|json | --json]\n"
                   "  Read-only SQL over the samples and the live stacks (docs/query.md).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "probectl query: expected one SQL statement (quote it)\n");
        return 2;
    }
    body = json_pack("{s:s}", "sql", argv[optind]);
    if (pid)
        json_object_set_new(body, "pid", json_integer(pid));
    reply = client_request(socket, "POST", "/v1/query", body);
    json_decref(body);
    if (!reply)
        return 1;
    if (format == OUTPUT_JSON)
        output_json(reply);
    else if (format == OUTPUT_CSV)
        output_rows(OUTPUT_CSV, json_object_get(reply, "columns"), json_object_get(reply, "rows"));
    else
        output_sql_table(json_object_get(reply, "columns"), json_object_get(reply, "rows"));
    if (json_is_true(json_object_get(reply, "truncated")))
        fprintf(stderr, "probectl: result truncated at the daemon's row limit\n");
    json_decref(reply);
    return 0;
}

/* ---- flamegraph ---- */

int flamegraph_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"since", required_argument, NULL, 's'},
                                             {"until", required_argument, NULL, 'u'},
                                             {"thread", required_argument, NULL, 't'},
                                             {"threads", no_argument, NULL, 'R'},
                                             {"function", no_argument, NULL, 'F'},
                                             {"nolineno", no_argument, NULL, 'F'},
                                             {"output", required_argument, NULL, 'o'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"idle", no_argument, NULL, 'i'},
                                             {"gil", no_argument, NULL, 'g'},
                                             {"tasks", no_argument, NULL, 'T'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *since = NULL, *until = NULL, *out_path = NULL, *format = NULL;
    int64_t from_ns = 0, to_ns = 0;
    char path[320], err[512], *raw = NULL;
    json_t *reply = NULL;
    size_t raw_len = 0;
    long status = 0;
    int c, pid, tid = 0, r;
    bool idle = false, tasks = false, gil = false, threads = false, no_lines = false;
    FILE *out;

    while ((c = getopt_long(argc, argv, "s:u:t:o:f:ih", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            since = optarg;
            break;
        case 'u':
            until = optarg;
            break;
        case 't':
            if ((tid = client_parse_pid(optarg, "flamegraph --thread")) < 0)
                return 2;
            break;
        case 'R':
            threads = true;
            break;
        case 'F':
            no_lines = true;
            break;
        case 'o':
            out_path = optarg;
            break;
        case 'i':
            idle = true;
            break;
        case 'g':
            gil = true;
            break;
        case 'T':
            tasks = true;
            break;
        case 'f':
            format = optarg;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf(
                "usage: probectl flamegraph <pid> [-o FILE] [--format F] [--since T] [--until T]\n"
                "                            [--thread TID | --threads] [--idle] [--gil]"
                " [--function] [--tasks]\n"
                "  A flame graph of the stored samples (attach first).\n"
                "  -o FILE       write it there; its name picks the format: .svg, .folded,"
                " .json\n"
                "                (speedscope), .trace.json (Chrome trace), .pb (pprof)\n"
                "  --format F    svg, folded, speedscope, chrometrace or pprof (default svg)\n"
                "                speedscope and chrometrace: each thread's samples in time"
                " order\n"
                "  --since T     from T: how long ago (5m, 1h30m) or when (14:05,"
                " 2026-11-29 14:05:30)\n"
                "  --until T     to T (default now), as --since\n"
                "  --thread TID  one thread;  --threads: a root per thread, by its name\n"
                "  --idle        include threads that were not running (sleeping, blocked)\n"
                "  --gil         only the samples of threads holding the GIL\n"
                "  --function    one box per function, not per line (--nolineno)\n"
                "  --tasks       rooted by asyncio task: a sample that ran in a task starts at\n"
                "                <task NAME>, the event loop's frames below it left out\n");
            return 0;
        default:
            return 2;
        }
    }
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "flamegraph")) < 0)
        return 2;
    if (optind + 1 != argc) {
        fprintf(stderr, "probectl flamegraph: one pid (%s is one too many)\n", argv[optind + 1]);
        return 2;
    }
    if (!format)
        format = flame_format_of(out_path);
    if (strcmp(format, "svg") != 0 && strcmp(format, "folded") != 0 &&
        strcmp(format, "speedscope") != 0 && strcmp(format, "chrometrace") != 0 &&
        strcmp(format, "pprof") != 0) {
        fprintf(stderr,
                "probectl flamegraph: --format takes svg, folded, speedscope, chrometrace"
                " or pprof, not '%s'\n",
                format);
        return 2;
    }
    if ((since && client_parse_time(since, "flamegraph", "--since", &from_ns) < 0) ||
        (until && client_parse_time(until, "flamegraph", "--until", &to_ns) < 0))
        return 2;
    if (to_ns && to_ns <= from_ns) {
        fprintf(stderr, "probectl flamegraph: --until (%s) is not after --since (%s)\n", until,
                since ? since : "the first sample");
        return 2;
    }
    if (tid && threads) {
        fprintf(stderr, "probectl flamegraph: --thread TID or --threads, not both\n");
        return 2;
    }
    /* times in ns: "2m 30s" has no place in a URL */
    snprintf(path, sizeof(path), "/v1/flamegraph?pid=%d&format=%s", pid, format);
    if (from_ns)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&from_ns=%lld",
                 (long long)from_ns);
    if (to_ns)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&to_ns=%lld", (long long)to_ns);
    if (tid)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&tid=%d", tid);
    snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s%s%s%s%s", idle ? "&idle=1" : "",
             gil ? "&gil=1" : "", tasks ? "&tasks=1" : "", threads ? "&threads=1" : "",
             no_lines ? "&lines=0" : "");
    r = client_call(client_socket_path(socket), "GET", path, NULL, &status, &reply, &raw, &raw_len,
                    err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "probectl: %s\n", err);
        return 1;
    }
    if (status != 200 || !raw) {
        fprintf(stderr, "probectl flamegraph: %s\n", client_error_text(reply));
        json_decref(reply);
        free(raw);
        return 1;
    }
    out = out_path ? fopen(out_path, "we") : stdout;
    if (!out || fwrite(raw, 1, raw_len, out) != raw_len || (out_path && fclose(out) != 0)) {
        fprintf(stderr, "probectl flamegraph: writing %s: %s\n", out_path ? out_path : "stdout",
                strerror(errno));
        json_decref(reply);
        free(raw);
        return 1;
    }
    if (out_path)
        fprintf(stderr, "wrote %s (%s, %zu bytes)\n", out_path, format, raw_len);
    json_decref(reply);
    free(raw);
    return 0;
}
