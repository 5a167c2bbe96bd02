/* ops.c - see ops.h. */
#define _GNU_SOURCE
#include "ctl/ops.h"

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/client.h"
#include "ctl/output.h"

#define COMMON_LONGOPTS                                                                            \
    {"socket", required_argument, NULL, 'S'},                                                      \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* ---- config ---- */

static json_t *find_setting(json_t *settings, const char *key)
{
    size_t i;
    json_t *s;
    const char *bare = strncmp(key, "probed.", 7) == 0 ? key + 7 : key;

    json_array_foreach(settings, i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "key")), bare) == 0)
            return s;
    }
    return NULL;
}

/* The settings as probed.conf's lines (the table people read: copied into the file, it
 * works), the key and value columns as wide as their widest; or as CSV. */
static void print_settings(json_t *reply, enum output_format format)
{
    json_t *settings = json_object_get(reply, "settings"), *s;
    const char *file = json_string_value(json_object_get(reply, "file"));
    int key_w = 0, value_w = 0;
    size_t i;

    if (format == OUTPUT_CSV) {
        json_t *cols = json_pack("[s, s, s, s, s]", "key", "value", "default", "live", "pinned");
        json_t *rows = json_array();

        json_array_foreach(settings, i, s) json_array_append_new(
            rows,
            json_pack("[O, O, O, b, b]", json_object_get(s, "key"), json_object_get(s, "value"),
                      json_object_get(s, "default"), json_is_true(json_object_get(s, "live")),
                      json_is_true(json_object_get(s, "pinned"))));
        output_rows(OUTPUT_CSV, cols, rows);
        json_decref(cols);
        json_decref(rows);
        return;
    }
    json_array_foreach(settings, i, s)
    {
        int k = (int)strlen(json_string_value(json_object_get(s, "key")) ?: "");
        int v = (int)strlen(json_string_value(json_object_get(s, "value")) ?: "");

        key_w = k > key_w ? k : key_w;
        value_w = v > value_w ? v : value_w;
    }
    printf("# %s\n", file && *file ? file : "no probed.conf read: defaults and options");
    json_array_foreach(settings, i, s)
    {
        const char *value = json_string_value(json_object_get(s, "value")) ?: "";
        const char *def = json_string_value(json_object_get(s, "default")) ?: "";
        bool live = json_is_true(json_object_get(s, "live"));
        bool same = strcmp(value, def) == 0;

        printf("%-*s = %-*s # %s%s%s%s\n", key_w, json_string_value(json_object_get(s, "key")),
               value_w < 2 ? 2 : value_w, *value ? value : "\"\"",
               live ? "" : "restart to change; ",
               json_is_true(json_object_get(s, "pinned")) ? "command line; " : "",
               same ? "default" : "default: ",
               same   ? ""
               : *def ? def
                      : "\"\"");
    }
}

/* key=value: one change through PUT /v1/config. */
static int set_one(const char *socket, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    char key[128];
    json_t *body, *reply, *s;

    if (eq - assignment >= (long)sizeof(key) || eq == assignment) {
        fprintf(stderr, "probectl config: '%s' is not key=value\n", assignment);
        return 2;
    }
    snprintf(key, sizeof(key), "%.*s", (int)(eq - assignment), assignment);
    body = json_pack("{s:s, s:s}", "key", key, "value", eq + 1);
    reply = client_request(socket, "PUT", "/v1/config", body);
    json_decref(body);
    if (!reply)
        return 1;
    s = find_setting(json_object_get(reply, "settings"), key);
    printf("%s = %s (applied now; until a restart: set it in the config file to keep it)\n",
           json_string_value(json_object_get(s, "key")),
           json_string_value(json_object_get(s, "value")));
    json_decref(reply);
    return 0;
}

int config_main(int argc, char **argv)
{
    static const struct option longopts[] = {OUTPUT_LONGOPTS, COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    enum output_format format = OUTPUT_TABLE;
    const char *socket = NULL;
    json_t *reply, *s;
    int c, r = 0;

    while ((c = getopt_long(argc, argv, "f:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'S':
            socket = optarg;
            break;
        case 'f':
        case 'j':
            if (output_option(c, optarg, "config", &format) < 0)
                return 2;
            break;
        case 'h':
            printf(
                "usage: probectl config [key | key=value ...] [--format table|csv|json | --json]\n"
                "  Without arguments, every setting of the daemon and its default (as\n"
                "  probed.conf's lines); with a key, its value; key=value changes a live\n"
                "  setting now (root only). A value that is refused changes nothing. See\n"
                "  probed.conf(5).\n");
            return 0;
        default:
            return 2;
        }
    }
    for (int i = optind; i < argc && r == 0; i++)
        if (strchr(argv[i], '='))
            r = set_one(socket, argv[i]);
    if (r != 0 || (optind < argc && strchr(argv[argc - 1], '=')))
        return r;
    reply = client_request(socket, "GET", "/v1/config", NULL);
    if (!reply)
        return 1;
    if (optind == argc && format == OUTPUT_JSON)
        output_json(reply);
    else if (optind == argc)
        print_settings(reply, format);
    for (int i = optind; i < argc; i++) {
        if (strchr(argv[i], '='))
            continue;
        s = find_setting(json_object_get(reply, "settings"), argv[i]);
        if (!s) {
            fprintf(stderr, "probectl config: unknown setting '%s'\n", argv[i]);
            r = 1;
            continue;
        }
        printf("%s\n", json_string_value(json_object_get(s, "value")));
    }
    json_decref(reply);
    return r;
}

/* ---- memory ---- */

/* Each print_ function prints its part of the report, or with @doc (--format json|csv) puts
 * it there. */

/* With allocation tracking: the functions whose memory grew most over the window. */
static int print_allocations(const char *socket, int pid, long long target, long long window_ns,
                             const char *window, json_t *doc)
{
    char sql[1024];
    json_t *keep, *rows, *row;
    size_t i;

    snprintf(sql, sizeof(sql),
             "SELECT function_name AS function, sum(allocated_bytes) AS grown_bytes,"
             " count(DISTINCT ts_ns) AS snapshots, min(file || ':' || line) AS first_line"
             " FROM memory_allocations WHERE target_id = %lld AND"
             " ts_ns > now_ns() - %lld GROUP BY function_name ORDER BY grown_bytes DESC LIMIT 10",
             target, window_ns);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return 1;
    if (doc) {
        output_section(doc, "allocations", keep);
    } else if (json_array_size(rows) > 0) {
        printf("\nwhere memory grew, by function (allocation snapshots over %s):\n", window);
        printf("%12s %9s  %s\n", "GROWTH KB", "SNAPSHOTS", "FUNCTION (FIRST LINE SEEN)");
        json_array_foreach(rows, i, row)
        {
            printf("%+12.1f %9lld  %s (%s)\n", client_num(row, 1) / 1024, client_int(row, 2),
                   json_string_value(json_array_get(row, 0)),
                   json_string_value(json_array_get(row, 3)));
        }
    }
    json_decref(keep);
    return 0;
}

/* The target's memory on all GPUs (NVML, summed per reading) since @from_ns, when it has any:
 * a row [GPU, now, peak, growth] into @table. */
static int gpu_memory_row(const char *socket, int pid, long long target, long long from_ns,
                          json_t *table)
{
    char sql[1024];
    json_t *keep, *rows, *row;

    snprintf(sql, sizeof(sql),
             "WITH g AS (SELECT ts_ns, round(sum(memory_used) / 1048576.0, 2) AS a"
             " FROM gpu_process_readings WHERE target_id = %lld AND ts_ns >= %lld GROUP BY ts_ns),"
             " w AS (SELECT (ts_ns - (SELECT max(ts_ns) FROM g)) / 60e9 AS x, a FROM g)"
             " SELECT count(*), (SELECT a FROM g ORDER BY ts_ns DESC LIMIT 1), max(a),"
             " (count(*) * sum(x * a) - sum(x) * sum(a)) / nullif(count(*) * sum(x * x)"
             " - sum(x) * sum(x), 0) FROM w",
             target, from_ns);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return -1;
    row = json_array_get(rows, 0);
    if (row && client_num(row, 0) > 0)
        json_array_append_new(table, json_pack("[s, O, O, O]", "GPU", json_array_get(row, 1),
                                               json_array_get(row, 2), json_array_get(row, 3)));
    json_decref(keep);
    return 0;
}

/* The latest reading, and peak and growth per minute over @window_ns before it. */
static int print_memory(const char *socket, int pid, long long target, long long window_ns,
                        const char *window, json_t *doc)
{
    static const char *const names[] = {"RSS", "PSS", "USS", "Swap"};
    char sql[2048];
    json_t *keep, *rows, *now, *trend, *table, *row;
    size_t i;

    snprintf(sql, sizeof(sql),
             "SELECT timestamp, rss_mb, pss_mb, uss_mb, swap_mb, cpu_pct, cpu_seconds, threads,"
             " ts_ns FROM memory_usage WHERE target_id = %lld ORDER BY ts_ns DESC LIMIT 1",
             target);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return 1;
    now = json_incref(json_array_get(rows, 0));
    json_decref(keep);
    if (!now) {
        fprintf(stderr,
                "probectl memory: pid %d has no memory readings yet (memory_interval"
                " 0, or attached less than a reading ago)\n",
                pid);
        return 1;
    }
    snprintf(sql, sizeof(sql),
             /* MB rounded as memory_usage rounds "now": a peak printed below the reading
              * it includes was a rounding of each side (111.6 vs 111.7) */
             "WITH w AS (SELECT (ts_ns - %lld) / 60e9 AS x, round(rss / 1048576.0, 2) AS a,"
             " round(pss / 1048576.0, 2) AS b, round(uss / 1048576.0, 2) AS c,"
             " round(swap / 1048576.0, 2) AS d FROM memory"
             " WHERE target_id = %lld AND ts_ns >= %lld)"
             " SELECT count(*), -min(x),"
             " max(a), (count(*) * sum(x * a) - sum(x) * sum(a)) / nullif(count(*) * sum(x * x)"
             " - sum(x) * sum(x), 0), max(b), (count(*) * sum(x * b) - sum(x) * sum(b)) /"
             " nullif(count(*) * sum(x * x) - sum(x) * sum(x), 0), max(c), (count(*) * sum(x *"
             " c) - sum(x) * sum(c)) / nullif(count(*) * sum(x * x) - sum(x) * sum(x), 0), max(d),"
             " (count(*) * sum(x * d) - sum(x) * sum(d)) / nullif(count(*) * sum(x * x) - sum(x)"
             " * sum(x), 0) FROM w",
             client_int(now, 8), target, client_int(now, 8) - window_ns);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows) {
        json_decref(now);
        return 1;
    }
    trend = json_array_get(rows, 0);
    /* the table: what, now MB, peak MB, growth MB/min (NULL: too few readings for a line) */
    table = json_array();
    for (i = 0; i < 4; i++)
        json_array_append_new(table, json_pack("[s, O, O, O]", names[i], json_array_get(now, 1 + i),
                                               json_array_get(trend, 2 + 2 * i),
                                               json_array_get(trend, 3 + 2 * i)));
    if (gpu_memory_row(socket, pid, target, client_int(now, 8) - window_ns, table) < 0) {
        json_decref(table);
        json_decref(keep);
        json_decref(now);
        return 1;
    }
    if (doc) {
        json_t *figures =
            json_pack("{s:O, s:O, s:O, s:O, s:O, s:f, s:s}", "at", json_array_get(now, 0),
                      "cpu_pct", json_array_get(now, 5), "cpu_seconds", json_array_get(now, 6),
                      "threads", json_array_get(now, 7), "readings", json_array_get(trend, 0),
                      "span_s", 60 * client_num(trend, 1), "window", window);

        json_object_update(doc, figures);
        json_decref(figures);
        json_object_set_new(doc, "memory",
                            json_pack("{s:[s, s, s, s], s:o}", "columns", "what", "now_mb",
                                      "peak_mb", "growth_mb_per_min", "rows", table));
    } else {
        printf("at %s UTC: %.0f%% CPU (100%% = one core), %.1f s CPU in all, %d threads\n\n",
               json_string_value(json_array_get(now, 0)), client_num(now, 5), client_num(now, 6),
               (int)client_num(now, 7));
        printf("%-5s %12s %12s %16s\n", "", "now MB", "peak MB", "growth MB/min");
        json_array_foreach(table, i, row)
        {
            printf("%-5s %12.1f %12.1f ", json_string_value(json_array_get(row, 0)),
                   client_num(row, 1), client_num(row, 2));
            if (json_is_number(json_array_get(row, 3)))
                printf("%+16.2f\n", client_num(row, 3));
            else
                printf("%16s\n", "-");
        }
        json_decref(table);
        printf("(peak and growth: %d readings over %.1f %s, window %s; growth is the slope of a"
               " least-squares line)\n\n",
               (int)client_num(trend, 0),
               client_num(trend, 1) < 1 ? 60 * client_num(trend, 1) : client_num(trend, 1),
               client_num(trend, 1) < 1 ? "s" : "min", window);
    }
    json_decref(keep);

    snprintf(sql, sizeof(sql),
             "SELECT tid, thread, cpu_pct, cpu_seconds FROM thread_cpu_usage WHERE"
             " target_id = %lld AND ts_ns = %lld ORDER BY cpu_pct DESC, cpu_seconds DESC LIMIT 10",
             target, client_int(now, 8));
    json_decref(now);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return 1;
    if (doc) {
        output_section(doc, "threads_by_cpu", keep);
    } else {
        printf("%8s %-20s %7s %10s\n", "TID", "THREAD", "CPU%", "CPU s");
        json_array_foreach(rows, i, row)
        {
            const char *name = json_string_value(json_array_get(row, 1));
            printf("%8d %-20s %7.1f %10.2f\n", (int)client_num(row, 0), name ? name : "?",
                   client_num(row, 2), client_num(row, 3));
        }
    }
    json_decref(keep);
    return print_allocations(socket, pid, target, window_ns, window, doc);
}

/* --allocations on|now|off: POST /v1/allocations and what it says. */
static int allocations(const char *socket, int pid, const char *what, enum output_format format)
{
    const char *action = strcmp(what, "now") == 0 ? "snapshot" : what;
    json_t *body, *reply, *row;
    size_t i;

    if (strcmp(action, "on") != 0 && strcmp(action, "off") != 0 &&
        strcmp(action, "snapshot") != 0) {
        fprintf(stderr, "probectl memory: --allocations takes on, now or off\n");
        return 2;
    }
    if (format == OUTPUT_CSV && strcmp(action, "snapshot") != 0) {
        fprintf(stderr, "probectl memory: --allocations %s has no table for CSV (--json)\n", what);
        return 2;
    }
    body = json_pack("{s:i, s:s}", "pid", pid, "action", action);
    /* a snapshot the daemon takes on its schedule answers 409 "being taken" meanwhile */
    reply = client_request_when_free(socket, "POST", "/v1/allocations", body, "being taken");
    json_decref(body);
    if (!reply)
        return 1;
    if (format == OUTPUT_JSON) {
        output_json(reply);
    } else if (format == OUTPUT_CSV && strcmp(action, "snapshot") == 0) {
        json_t *cols = json_pack("[s, s, s, s, s, s]", "function", "file", "line", "grown_bytes",
                                 "blocks", "live_bytes");

        output_rows(OUTPUT_CSV, cols, json_object_get(reply, "rows"));
        json_decref(cols);
    } else if (strcmp(action, "off") == 0) {
        printf("pid %d: allocation tracking off%s\n", pid,
               json_is_true(json_object_get(reply, "tracing"))
                   ? " (the process traced before probed: tracemalloc stays on)"
                   : "");
    } else if (strcmp(action, "on") == 0) {
        printf("pid %d: allocation tracking on (tracemalloc%s); snapshots every"
               " allocation_interval (probectl config), or now: probectl memory %d"
               " --allocations now\n",
               pid,
               json_is_true(json_object_get(reply, "started_by_probed")) ? ", started by probed"
                                                                         : ", already tracing",
               pid);
    } else {
        printf("pid %d: where memory went since the previous snapshot (%.1f MB traced):\n\n", pid,
               json_number_value(json_object_get(reply, "traced_bytes")) / 1048576);
        printf("%12s %10s %12s  %s\n", "GROWTH KB", "BLOCKS", "LIVE KB", "FUNCTION (FILE:LINE)");
        json_array_foreach(json_object_get(reply, "rows"), i, row)
        {
            printf("%+12.1f %+10lld %12.1f  %s (%s:%lld)\n", client_num(row, 3) / 1024,
                   client_int(row, 4), client_num(row, 5) / 1024,
                   json_string_value(json_array_get(row, 0)),
                   json_string_value(json_array_get(row, 1)), client_int(row, 2));
        }
    }
    json_decref(reply);
    return 0;
}

int memory_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"window", required_argument, NULL, 'w'},
                                             {"allocations", required_argument, NULL, 'a'},
                                             OUTPUT_LONGOPTS,
                                             COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    enum output_format format = OUTPUT_TABLE;
    const char *socket = NULL, *window = "10m", *allocs = NULL;
    char sql[512];
    json_t *keep, *rows, *t, *doc;
    double minutes;
    int64_t window_ns;
    int c, pid, r;
    bool attached;

    while ((c = getopt_long(argc, argv, "w:a:f:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'w':
            window = optarg;
            break;
        case 'f':
        case 'j':
            if (output_option(c, optarg, "memory", &format) < 0)
                return 2;
            break;
        case 'a':
            allocs = optarg;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            printf("usage: probectl memory <pid> [--window D] [--allocations on|now|off]\n"
                   "                       [--format table|csv|json | --json]\n"
                   "  The memory of an attached process now (RSS, PSS, USS, swap from\n"
                   "  smaps_rollup), its peak and growth per minute over the window (default\n"
                   "  10m), its threads by CPU, and where memory grew by function when\n"
                   "  allocation tracking is on. The timeline is the memory_usage view.\n"
                   "  --allocations on   start tracemalloc in the process (it slows allocation\n"
                   "                     down) and take a snapshot every allocation_interval\n"
                   "  --allocations now  a snapshot now: the lines whose memory grew most\n"
                   "  --allocations off  stop (tracemalloc stops if probed started it)\n"
                   "  --format json: every figure and table; csv: the memory table alone\n"
                   "  (with --allocations now, its rows)\n");
            return 0;
        default:
            return 2;
        }
    }
    if (client_parse_duration(window, "memory", "--window", 1, 365 * 86400.0, &window_ns) < 0)
        return 2;
    minutes = (double)window_ns / 60e9;
    if (optind + 1 != argc) {
        fprintf(stderr, "probectl memory: expected one pid\n");
        return 2;
    }
    if ((pid = client_parse_pid(argv[optind], "memory")) < 0)
        return 2;
    if (allocs)
        return allocations(socket, pid, allocs, format);
    snprintf(sql, sizeof(sql),
             "SELECT id, cmdline, py_version, ended_ns IS NULL, coalesce(end_reason, '')"
             " FROM targets WHERE pid = %d ORDER BY id DESC LIMIT 1",
             pid);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return 1;
    t = json_array_get(rows, 0);
    if (!t) {
        fprintf(stderr,
                "probectl memory: pid %d was never attached: its memory is recorded while it"
                " is (probectl attach %d)\n",
                pid, pid);
        json_decref(keep);
        return 1;
    }
    attached = json_is_true(json_array_get(t, 3)) || client_num(t, 3);
    doc = format == OUTPUT_TABLE
              ? NULL
              : json_pack("{s:i, s:O, s:O, s:b, s:O}", "pid", pid, "cmdline", json_array_get(t, 1),
                          "python", json_array_get(t, 2), "attached", attached, "end_reason",
                          attached ? json_null() : json_array_get(t, 4));
    if (!doc)
        printf("pid %d: %s (Python %s)%s%s\n", pid, json_string_value(json_array_get(t, 1)),
               json_string_value(json_array_get(t, 2)), attached ? "" : ", no longer attached: ",
               attached ? "" : json_string_value(json_array_get(t, 4)));
    r = print_memory(socket, pid, client_int(t, 0), (long long)(minutes * 60e9), window, doc);
    if (doc && r == 0)
        output_report(format, doc, "memory");
    json_decref(doc);
    json_decref(keep);
    return r;
}

/* ---- status ---- */

/* A row of `status`: what, its value (a number, a text or NULL), and a note. */
static void status_row(json_t *rows, const char *what, json_t *value, const char *note)
{
    json_array_append_new(
        rows, json_pack("[s, O, s]", what, value ? value : json_null(), note ? note : ""));
}

int status_main(int argc, char **argv)
{
    static const struct option longopts[] = {OUTPUT_LONGOPTS, COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    enum output_format format = OUTPUT_TABLE;
    const char *socket = NULL;
    json_t *st, *list, *rows, *cols, *t, *rs, *gpu, *conn;
    long long sampling = 0, listed = 0;
    size_t i;
    int c;

    while ((c = getopt_long(argc, argv, "f:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'S':
            socket = optarg;
            break;
        case 'f':
        case 'j':
            if (output_option(c, optarg, "status", &format) < 0)
                return 2;
            break;
        case 'h':
            printf("usage: probectl status [--format table|csv|json | --json]\n"
                   "  The daemon: its version and host, database, what it wrote and dropped,\n"
                   "  the processes it samples (of yours), its queries and connections, and\n"
                   "  where its run states and GPU readings come from (and why not).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "probectl status: takes no argument ('%s')\n", argv[optind]);
        return 2;
    }
    if (!(st = client_request(socket, "GET", "/v1/status", NULL)))
        return 1;
    if (!(list = client_request(socket, "GET", "/v1/targets", NULL))) {
        json_decref(st);
        return 1;
    }
    json_array_foreach(json_object_get(list, "targets"), i, t)
    {
        listed++;
        sampling += strcmp(json_string_value(json_object_get(t, "state")) ?: "", "sampling") == 0;
    }
    if (format == OUTPUT_JSON) {
        json_object_set_new(st, "targets",
                            json_pack("{s:I, s:I}", "sampling", (json_int_t)sampling, "listed",
                                      (json_int_t)listed));
        output_json(st);
        json_decref(st);
        json_decref(list);
        return 0;
    }
    rs = json_object_get(st, "run_state");
    gpu = json_object_get(st, "gpu");
    conn = json_object_get(st, "connections");
    rows = json_array();
    status_row(rows, "version", json_object_get(st, "version"), NULL);
    status_row(rows, "host", json_object_get(st, "host"), NULL);
    status_row(rows, "database", json_object_get(st, "database"), NULL);
    status_row(rows, "database_bytes", json_object_get(st, "db_bytes"), NULL);
    {
        json_t *n = json_integer(sampling);

        status_row(rows, "sampling", n, "processes of yours being sampled");
        json_decref(n);
    }
    status_row(rows, "samples_written", json_object_get(st, "samples_written"), NULL);
    status_row(rows, "samples_dropped", json_object_get(st, "samples_dropped"),
               "lost: the database took none for longer than write_backlog holds");
    status_row(rows, "samples_pending", json_object_get(st, "samples_pending"), "to be written");
    status_row(rows, "write_errors", json_object_get(st, "write_errors"), NULL);
    status_row(rows, "queries", json_object_get(st, "queries"), NULL);
    status_row(rows, "query_errors", json_object_get(st, "query_errors"), NULL);
    status_row(rows, "connections", json_object_get(conn, "open"), "open now");
    status_row(rows, "run_state", json_object_get(rs, "source"),
               json_string_value(json_object_get(rs, "error")));
    status_row(rows, "gpu", json_object_get(gpu, "source"),
               json_string_value(json_object_get(gpu, "error")));
    cols = json_pack("[s, s, s]", "WHAT", "VALUE", "NOTE");
    output_rows(format, cols, rows);
    json_decref(cols);
    json_decref(rows);
    json_decref(st);
    json_decref(list);
    return 0;
}
