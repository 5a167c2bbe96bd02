/* commands.c - see commands.h. */
#define _GNU_SOURCE
#include "ctl/commands.h"

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

/* Options every command takes. */
#define COMMON_LONGOPTS                                                                            \
    {"socket", required_argument, NULL, 'S'},                                                      \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* A stretch of samples the database would not take (a full disk): said under the target. */
static void print_gap(const json_t *gap)
{
    time_t from, to;
    char a[32], b[32];

    if (!json_is_object(gap))
        return;
    from = (time_t)(json_integer_value(json_object_get(gap, "from_ns")) / 1000000000LL);
    to = (time_t)(json_integer_value(json_object_get(gap, "to_ns")) / 1000000000LL);
    strftime(a, sizeof(a), "%Y-%m-%d %H:%M:%S", localtime(&from));
    strftime(b, sizeof(b), "%H:%M:%S", localtime(&to));
    printf("         gap: %lld samples lost from %s to %s (%s)\n",
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

/* @gpu: the GPU MEM column is shown (some target is on a GPU). */
static void print_target(json_t *t, bool gpu)
{
    json_t *st = json_object_get(t, "stats");
    bool torch = json_is_true(json_object_get(json_object_get(t, "torch"), "tracing"));
    char mode[32], size[16];

    snprintf(mode, sizeof(mode), "%s%s", json_string_value(json_object_get(t, "mode")),
             torch ? "+torch" : "");
    printf("%-8lld %-9s %-7lld %-8s %-10lld %-6lld ",
           (long long)json_integer_value(json_object_get(t, "pid")),
           json_string_value(json_object_get(t, "state")),
           (long long)json_integer_value(json_object_get(t, "rate_hz")),
           json_string_value(json_object_get(t, "python_version")),
           (long long)json_integer_value(json_object_get(st, "samples")),
           (long long)json_integer_value(json_object_get(st, "torn")));
    if (gpu)
        printf("%-8s ", size_text(json_object_get(t, "gpu_memory"), size));
    printf("%-17s %s\n", mode, json_string_value(json_object_get(t, "cmdline")));
    print_gap(json_object_get(t, "gap"));
}

static void print_header(bool gpu)
{
    printf("%-8s %-9s %-7s %-8s %-10s %-6s ", "PID", "STATE", "RATE", "PYTHON", "SAMPLES", "TORN");
    if (gpu)
        printf("%-8s ", "GPU MEM");
    printf("%-17s %s\n", "MODE", "COMMAND");
}

/* ---- attach / detach / list ---- */

int attach_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"rate", required_argument, NULL, 'r'},
                                             {"duration", required_argument, NULL, 'd'},
                                             {"children", no_argument, NULL, 'c'},
                                             {"native", optional_argument, NULL, 'n'},
                                             {"json", no_argument, NULL, 'j'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *duration = NULL, *native_backend = NULL;
    int64_t duration_ns = 0;
    json_t *body, *reply;
    bool as_json = false, children = false, native = false;
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
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl attach <pid> [--rate HZ] [--duration DUR] [--children]"
                   " [--native[=perf]] [--json]\n"
                   "  Starts sampling the process's Python stacks into the daemon's database.\n"
                   "  --rate HZ        samples per second (default: the daemon's, 100)\n"
                   "  --duration DUR   stop after this long (30s, 5m, 2h)\n"
                   "  --children       also attach its new Python descendants (torchrun ranks,\n"
                   "                   dataloader workers), labelled with RANK/LOCAL_RANK\n"
                   "  --native         native frames too (C, C++, libraries), and threads with no\n"
                   "                   Python frames; the target is never stopped. The eBPF\n"
                   "                   sampler copies native and Python frames in one instant;\n"
                   "                   where it cannot load (no CAP_BPF), perf samples them\n"
                   "  --native=perf    perf alone, even where eBPF could be used\n");
            return 0;
        default:
            return 2;
        }
    }
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "attach")) < 0 ||
        optind + 1 != argc)
        return 2;
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
        printf("attached to pid %d (Python %s) at %lld Hz, %s\n", pid,
               json_string_value(json_object_get(reply, "python_version")),
               (long long)json_integer_value(json_object_get(reply, "rate_hz")),
               json_string_value(json_object_get(reply, "mode")));
        if (why)
            printf("native stacks unavailable, Python frames only: %s\n", why);
        if (no_ebpf)
            printf("the eBPF sampler is unavailable, native stacks come from perf: %s\n", no_ebpf);
    }
    json_decref(reply);
    return 0;
}

int detach_main(int argc, char **argv)
{
    static const struct option longopts[] = {COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    const char *socket = NULL;
    char path[64];
    json_t *reply;
    int c, pid;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'S') {
            socket = optarg;
        } else if (c == 'h') {
            printf("usage: probectl detach <pid>\n  Stops sampling; stored samples stay.\n");
            return 0;
        } else {
            return 2;
        }
    }
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "detach")) < 0 ||
        optind + 1 != argc)
        return 2;
    snprintf(path, sizeof(path), "/v1/targets/%d", pid);
    reply = client_request(socket, "DELETE", path, NULL);
    if (!reply)
        return 1;
    if (json_is_false(json_object_get(reply, "following")))
        printf("no longer following pid %d\n", pid);
    else
        printf("detached from pid %d after %lld samples\n", pid,
               (long long)json_integer_value(
                   json_object_get(json_object_get(reply, "stats"), "samples")));
    json_decref(reply);
    return 0;
}

int list_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'}, COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    const char *socket = NULL;
    bool as_json = false;
    json_t *reply, *t;
    size_t i;
    int c;

    while ((c = getopt_long(argc, argv, "jh", longopts, NULL)) != -1) {
        if (c == 'S') {
            socket = optarg;
        } else if (c == 'j') {
            as_json = true;
        } else if (c == 'h') {
            printf("usage: probectl list [--json]\n  The attached processes.\n");
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
    if (as_json) {
        json_dumpf(reply, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        bool gpu = false;
        json_array_foreach(json_object_get(reply, "targets"), i, t) gpu |=
            json_integer_value(json_object_get(t, "gpu_memory")) > 0;
        print_header(gpu);
        json_array_foreach(json_object_get(reply, "targets"), i, t) print_target(t, gpu);
        json_array_foreach(json_object_get(reply, "following"), i, t)
        {
            printf("%-8lld %-9s %-7lld %-8s %-10s %-6s %s%-17s %s\n",
                   (long long)json_integer_value(json_object_get(t, "pid")), "following",
                   (long long)json_integer_value(json_object_get(t, "rate_hz")), "-", "-", "-",
                   gpu ? "-        " : "", "children",
                   json_string_value(json_object_get(t, "cmdline")));
        }
    }
    json_decref(reply);
    return 0;
}

/* ---- query ---- */

/* A cell as text: strings as they are, numbers printed, NULL as "NULL". Caller frees. */
static char *cell_text(json_t *v)
{
    char *s = NULL;

    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_null(v))
        return strdup("NULL");
    if (json_is_integer(v) && asprintf(&s, "%lld", (long long)json_integer_value(v)) >= 0)
        return s;
    if (json_is_real(v) && asprintf(&s, "%g", json_real_value(v)) >= 0)
        return s;
    return json_dumps(v, JSON_ENCODE_ANY);
}

/* UTF-8 aware display width (one column per code point). */
static size_t text_width(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

void print_table(json_t *cols, json_t *rows)
{
    size_t ncol = json_array_size(cols), i, k;
    size_t *width = calloc(ncol ? ncol : 1, sizeof(*width));
    json_t *row;

    if (!width)
        return;
    for (k = 0; k < ncol; k++)
        width[k] = text_width(json_string_value(json_array_get(cols, k)));
    json_array_foreach(rows, i, row)
    {
        for (k = 0; k < ncol; k++) {
            char *t = cell_text(json_array_get(row, k));
            if (t && text_width(t) > width[k])
                width[k] = text_width(t);
            free(t);
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (k = 0; k < ncol; k++) {
            const char *name = json_string_value(json_array_get(cols, k));
            if (pass == 0)
                printf("%s%s%*s", k ? " | " : "", name, (int)(width[k] - text_width(name)), "");
            else
                for (size_t d = 0; d < width[k] + (k ? 3 : 0); d++)
                    fputs(k && d == 1 ? "+" : "-", stdout);
        }
        printf("\n");
    }
    json_array_foreach(rows, i, row)
    {
        for (k = 0; k < ncol; k++) {
            json_t *v = json_array_get(row, k);
            char *t = cell_text(v);
            int pad = (int)(width[k] - text_width(t ? t : ""));
            if (json_is_number(v)) /* numbers right-aligned, as in the seeds' tables */
                printf("%s%*s%s", k ? " | " : "", pad, "", t ? t : "");
            else
                printf("%s%s%*s", k ? " | " : "", t ? t : "", k + 1 < ncol ? pad : 0, "");
            free(t);
        }
        printf("\n");
    }
    printf("(%zu row%s)\n", json_array_size(rows), json_array_size(rows) == 1 ? "" : "s");
    free(width);
}

static void print_csv_cell(const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

void print_csv(json_t *cols, json_t *rows)
{
    size_t i, k;
    json_t *row, *c;

    json_array_foreach(cols, k, c)
    {
        if (k)
            putchar(',');
        print_csv_cell(json_string_value(c));
    }
    putchar('\n');
    json_array_foreach(rows, i, row)
    {
        json_array_foreach(row, k, c)
        {
            char *t = json_is_null(c) ? strdup("") : cell_text(c);
            if (k)
                putchar(',');
            print_csv_cell(t ? t : "");
            free(t);
        }
        putchar('\n');
    }
}

int query_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"pid", required_argument, NULL, 'p'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"idle", no_argument, NULL, 'i'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *format = "table";
    json_t *body, *reply;
    int c, pid = 0;

    while ((c = getopt_long(argc, argv, "p:f:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if ((pid = client_parse_pid(optarg, "query")) < 0)
                return 2;
            break;
        case 'f':
            format = optarg;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl query \"<SQL>\" [--pid P] [--format table|csv|json]\n"
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
    if (strcmp(format, "table") != 0 && strcmp(format, "csv") != 0 && strcmp(format, "json") != 0) {
        fprintf(stderr, "probectl query: --format must be table, csv or json\n");
        return 2;
    }
    body = json_pack("{s:s}", "sql", argv[optind]);
    if (pid)
        json_object_set_new(body, "pid", json_integer(pid));
    reply = client_request(socket, "POST", "/v1/query", body);
    json_decref(body);
    if (!reply)
        return 1;
    if (strcmp(format, "json") == 0) {
        json_dumpf(reply, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        printf("\n");
    } else if (strcmp(format, "csv") == 0) {
        print_csv(json_object_get(reply, "columns"), json_object_get(reply, "rows"));
    } else {
        print_table(json_object_get(reply, "columns"), json_object_get(reply, "rows"));
    }
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

/* ---- top ---- */

/* One screen of `top`: the hottest functions of the last @window_s seconds. */
static int top_once(const char *socket, int pid, int window_s, int rows, bool clear)
{
    char sql[2048];
    json_t *body, *reply, *row;
    json_int_t all = 0, gil = 0;
    size_t i;

    /* One statement, so one snapshot: the totals and the rows count the same samples (two
     * queries a flush apart gave shares over 100 %). */
    snprintf(sql, sizeof(sql),
             "WITH win AS (SELECT stack_id, state FROM samples WHERE stack_id <> 0 AND"
             " state & 1 AND ts_ns > ago('%ds') AND target_id IN (SELECT id FROM targets"
             " WHERE pid = %d)),"
             " tot AS (SELECT count(*) AS all_n, sum(state >> 1 & 1) AS gil_n FROM win),"
             " per_stack AS (SELECT stack_id, count(*) AS n FROM win GROUP BY stack_id),"
             " funcs AS (SELECT stack_id, func, file, min(depth) = 0 AS is_self FROM stacks"
             " WHERE stack_id IN (SELECT stack_id FROM per_stack) GROUP BY stack_id, func, file),"
             " top AS (SELECT sum(CASE WHEN is_self THEN n ELSE 0 END) AS own, sum(n) AS total,"
             " func, file FROM funcs JOIN per_stack USING (stack_id) GROUP BY func, file"
             " ORDER BY own DESC, total DESC LIMIT %d)"
             " SELECT own, total, func, file, all_n, gil_n FROM tot LEFT JOIN top",
             window_s, pid, rows);
    body = json_pack("{s:s, s:i}", "sql", sql, "pid", pid);
    reply = client_request(socket, "POST", "/v1/query", body);
    json_decref(body);
    if (!reply)
        return -1;
    row = json_array_get(json_object_get(reply, "rows"), 0);
    all = json_integer_value(json_array_get(row, 4));
    gil = json_integer_value(json_array_get(row, 5));
    if (clear)
        printf("\033[H\033[2J");
    printf("probectl top: pid %d, %lld samples on CPU in the last %d s, GIL held in %.1f%%\n\n",
           pid, (long long)all, window_s, all ? 100.0 * (double)gil / (double)all : 0.0);
    printf("%7s %7s  %s\n", "%Own", "%Total", "Function (file)");
    json_array_foreach(json_object_get(reply, "rows"), i, row)
    {
        double own = (double)json_integer_value(json_array_get(row, 0));
        double total = (double)json_integer_value(json_array_get(row, 1));

        if (!json_is_string(json_array_get(row, 2)))
            continue; /* no sample in the window: the totals' row alone */
        printf("%6.1f%% %6.1f%%  %s (%s)\n", all ? 100 * own / (double)all : 0.0,
               all ? 100 * total / (double)all : 0.0, json_string_value(json_array_get(row, 2)),
               json_string_value(json_array_get(row, 3)));
    }
    fflush(stdout);
    json_decref(reply);
    return 0;
}

int top_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"interval", required_argument, NULL, 'i'},
                                             {"window", required_argument, NULL, 'w'},
                                             {"rows", required_argument, NULL, 'n'},
                                             {"once", no_argument, NULL, '1'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL;
    int c, pid, window = 5, rows = 20;
    useconds_t interval_us = 1000000;
    int64_t ns;
    bool once = false;

    while ((c = getopt_long(argc, argv, "i:w:n:1h", longopts, NULL)) != -1) {
        switch (c) {
        case 'i':
            if (client_parse_duration(optarg, "top", "--interval", 0.1, 3600, &ns) < 0)
                return 2;
            interval_us = (useconds_t)(ns / 1000);
            break;
        case 'w':
            if (client_parse_duration(optarg, "top", "--window", 1, 30 * 86400, &ns) < 0)
                return 2;
            window = (int)(ns / 1000000000);
            break;
        case 'n':
            rows = atoi(optarg);
            break;
        case '1':
            once = true;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl top <pid> [--interval D] [--window D] [--rows N] [--once]\n"
                   "  The hottest functions of an attached process, refreshed like top:\n"
                   "  %%Own = executing, %%Total = on the stack, over the last --window\n"
                   "  (default 5s; 30s, 2m, 1h30m) of samples on CPU; refreshed every\n"
                   "  --interval (default 1s).\n");
            return 0;
        default:
            return 2;
        }
    }
    if ((pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "top")) < 0 ||
        optind + 1 != argc)
        return 2;
    if (rows < 1) {
        fprintf(stderr, "probectl top: --rows must be positive\n");
        return 2;
    }
    { /* a pid never attached has no samples to rank: say so, as every command does */
        char path[64];
        json_t *t;

        snprintf(path, sizeof(path), "/v1/targets/%d", pid);
        if (!(t = client_request(socket, "GET", path, NULL)))
            return 1;
        json_decref(t);
    }
    for (;;) {
        if (top_once(socket, pid, window, rows, !once && isatty(STDOUT_FILENO)) < 0)
            return 1;
        if (once)
            return 0;
        usleep(interval_us);
    }
}
