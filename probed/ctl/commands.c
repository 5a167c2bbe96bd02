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
                                             {"thread", required_argument, NULL, 't'},
                                             {"output", required_argument, NULL, 'o'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"idle", no_argument, NULL, 'i'},
                                             {"tasks", no_argument, NULL, 'T'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *since = NULL, *out_path = NULL, *format = "svg";
    int64_t since_ns = 0;
    char path[256], err[512], *raw = NULL;
    json_t *reply = NULL;
    size_t raw_len = 0;
    long status = 0;
    int c, pid, tid = 0, r;
    bool idle = false, tasks = false;
    FILE *out;

    while ((c = getopt_long(argc, argv, "s:t:o:f:ih", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            since = optarg;
            break;
        case 't':
            tid = atoi(optarg);
            break;
        case 'o':
            out_path = optarg;
            break;
        case 'i':
            idle = true;
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
            printf("usage: probectl flamegraph <pid> [--since 5m] [--thread TID] [-o out.svg]"
                   " [--format svg|folded|speedscope|pprof] [--idle] [--tasks]\n"
                   "  A flame graph of the stored samples (attach first).\n"
                   "  --idle   include threads that were not running (sleeping, blocked)\n"
                   "  --tasks  rooted by asyncio task: a sample that ran in a task starts at\n"
                   "           <task NAME>, the event loop's frames below it left out\n");
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
    if (since &&
        client_parse_duration(since, "flamegraph", "--since", 0.001, 3650 * 86400.0, &since_ns) < 0)
        return 2;
    snprintf(path, sizeof(path), "/v1/flamegraph?pid=%d&format=%s", pid, format);
    if (since) /* in ns: "2m 30s" has no place in a URL */
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&since=%lldns",
                 (long long)since_ns);
    if (tid)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&tid=%d", tid);
    if (idle)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&idle=1");
    if (tasks)
        snprintf(path + strlen(path), sizeof(path) - strlen(path), "&tasks=1");
    r = client_call(client_socket_path(socket), "GET", path, NULL, &status, &reply, &raw, &raw_len,
                    err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "probectl: %s\n", err);
        return 1;
    }
    if (status != 200 || !raw) {
        fprintf(stderr, "probectl: %s\n", client_error_text(reply));
        json_decref(reply);
        free(raw);
        return 1;
    }
    out = out_path ? fopen(out_path, "w") : stdout;
    if (!out || fwrite(raw, 1, raw_len, out) != raw_len || (out_path && fclose(out) != 0)) {
        fprintf(stderr, "probectl: writing %s: %s\n", out_path ? out_path : "stdout",
                strerror(errno));
        json_decref(reply);
        free(raw);
        return 1;
    }
    if (out_path)
        fprintf(stderr, "wrote %s (%zu bytes)\n", out_path, raw_len);
    json_decref(reply);
    free(raw);
    return 0;
}

/* ---- run ---- */

#define RUN_ATTACH_TRIES 500 /* x 20 ms: the interpreter has 10 s to come up */

/* Attaches to @pid once its interpreter is up; false when it never was (not Python). */
static bool attach_when_ready(const char *socket, pid_t pid, long rate, bool children,
                              pid_t *child_done)
{
    bool following = false;
    char err[512];

    for (int i = 0; i < RUN_ATTACH_TRIES; i++) {
        json_t *body = json_pack("{s:i}", "pid", (int)pid), *reply = NULL;
        long status = 0;
        int r, wstatus;

        if (rate)
            json_object_set_new(body, "rate", json_integer(rate));
        /* with --children the daemon follows the child whatever it is now (it may still be
         * us, before the exec, or a shell), and attaches it once it runs Python, and every
         * Python process it starts */
        if (children)
            json_object_set_new(body, "children", json_true());
        r = client_call(client_socket_path(socket), "POST", "/v1/targets", body, &status, &reply,
                        NULL, NULL, err, sizeof(err));
        json_decref(body);
        if (r < 0) {
            fprintf(stderr, "probectl run: %s; running unobserved\n", err);
            return false;
        }
        if (status == 200 && !json_is_true(json_object_get(reply, "following"))) {
            json_decref(reply);
            return true;
        }
        if (status == 200) { /* followed, not Python yet: its exec is attached on the next try */
            following = true;
            status = 422;
        } else if (status == 409 && following) { /* the daemon's follower was first */
            json_decref(reply);
            return true;
        }
        /* 422: not (yet) a Python process; 404, 500: caught while it execs (its /proc
         * entry or files changing under the read): retry while the child lives */
        if (status != 422 && status != 404 && status != 500) {
            fprintf(stderr, "probectl run: %s; running unobserved\n", client_error_text(reply));
            json_decref(reply);
            return false;
        }
        json_decref(reply);
        if (waitpid(pid, &wstatus, WNOHANG) == pid) {
            *child_done = wstatus;
            return false;
        }
        usleep(20000);
    }
    if (following) /* a shell or launcher: its Python descendants are attached as they start */
        return true;
    fprintf(stderr,
            "probectl run: pid %d did not start a Python interpreter in 10 s;"
            " running unobserved\n",
            (int)pid);
    return false;
}

int run_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"rate", required_argument, NULL, 'r'},
                                             {"children", no_argument, NULL, 'c'},
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL;
    pid_t pid, done = -1;
    int c, wstatus = 0;
    bool children = false;
    long rate = 0;

    while ((c = getopt_long(argc, argv, "+r:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            rate = atol(optarg);
            break;
        case 'c':
            children = true;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl run [--rate HZ] [--children] -- <command> [args...]\n"
                   "  Runs the command attached from its start (once its interpreter is up),\n"
                   "  keeps its samples, and exits with its exit status.\n"
                   "  --children  also every Python process it starts (multiprocessing workers,\n"
                   "              a shell script's or a launcher's Python programs)\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "probectl run: expected a command after --\n");
        return 2;
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "probectl run: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "probectl run: %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    /* The terminal's Ctrl-C reaches the job (same process group); we outlive it. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    attach_when_ready(socket, pid, rate, children, &done);
    if (done == -1) {
        while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
            ;
    } else {
        wstatus = done;
    }
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return WEXITSTATUS(wstatus);
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
