/* torch.c - see torch.h. */
#define _GNU_SOURCE
#include "ctl/torch.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/units.h"
#include "ctl/client.h"
#include "ctl/flameout.h"
#include "ctl/output.h"
#include "ctl/torchprof.h"

#define TREND_BUCKETS 10

/* POST /v1/torch; the reply, or NULL with its status in *status and the error printed (unless
 * @quiet_404 and the status is 404: the process is not attached). */
/* The daemon's own drain of the process, running now (milliseconds; up to a second for a
 * backlog), answers 409 "being drained": the request is made again once it is over. */
static json_t *torch_call(const char *socket, json_t *body, long *status, bool quiet_404)
{
    return client_post(socket, "/v1/torch", body, "being drained", "torch", quiet_404, status);
}

/* @comm: 0 modules only, 1 modules and collectives, 2 collectives only */
static int turn_on(const char *socket, int pid, int every, const char *exprs, int comm,
                   const char *backward, bool device_time)
{
    json_t *body = json_pack("{s:i, s:s, s:i, s:s, s:b, s:b, s:s, s:b}", "pid", pid, "action", "on",
                             "every", every, "exprs", exprs ? exprs : "", "comm", comm > 0,
                             "modules", comm < 2, "backward", backward, "device_time", device_time),
           *reply = torch_post_attaching(socket, pid, body);

    json_decref(body);
    if (!reply)
        return 1;
    if (comm) {
        json_t *cs = json_object_get(reply, "comm_state");
        printf("pid %d: collective tracing on (torch %s; %lld calls so far; see: probectl query"
               " \"SELECT * FROM comm_metrics WHERE pid = %d\")\n",
               pid, json_string_value(json_object_get(reply, "torch")),
               (long long)json_integer_value(json_object_get(cs, "calls")), pid);
    }
    if (comm == 2) {
        json_decref(reply);
        return 0;
    }
    printf("pid %d: torch trace %s (torch %s on %s, every %lld step%s%s%s; backward of %s;"
           " optimizer steps from %s)\n",
           pid,
           json_is_true(json_object_get(reply, "started")) ? "on" : "already on, settings changed",
           json_string_value(json_object_get(reply, "torch")),
           json_string_value(json_object_get(reply, "device")),
           (long long)json_integer_value(json_object_get(reply, "every")),
           json_integer_value(json_object_get(reply, "every")) == 1 ? "" : "s",
           exprs && *exprs ? ", tracking " : "", exprs && *exprs ? exprs : "",
           strcmp(backward, "all") == 0    ? "every module"
           : strcmp(backward, "none") == 0 ? "top-level modules only"
                                           : "modules whose forward takes 200 us or more",
           json_string_value(json_object_get(reply, "optimizer_hooks")));
    if (json_is_string(json_object_get(reply, "device_time_error")))
        printf("  %s\n", json_string_value(json_object_get(reply, "device_time_error")));
    else if (json_is_true(json_object_get(reply, "device_time")))
        printf("  device time: CUDA events around each timed module and stage, on the training"
               " thread's current stream (torch_trace.device_duration)\n");
    printf("  see: probectl torch %d summary; probectl query \"SELECT * FROM python.torch_trace"
           " WHERE pid = %d\"\n",
           pid, pid);
    json_decref(reply);
    return 0;
}

static int turn_off(const char *socket, int pid)
{
    json_t *body = json_pack("{s:i, s:s}", "pid", pid, "action", "off"), *reply;
    long status;

    reply = torch_call(socket, body, &status, false);
    json_decref(body);
    if (!reply)
        return 1;
    printf("pid %d: torch trace off, every hook removed (%lld steps seen; %lld rows stored by"
           " the last drain%s)\n",
           pid, (long long)json_integer_value(json_object_get(reply, "steps_seen")),
           (long long)json_integer_value(json_object_get(reply, "stored")),
           json_integer_value(json_object_get(reply, "dropped")) > 0 ? ", some records dropped"
                                                                     : "");
    json_decref(reply);
    return 0;
}

/* The latest attach of @pid with torch records: its id, or 0 after printing why. */
static long long traced_target(const char *socket, int pid)
{
    char sql[256];
    json_t *keep, *rows;
    long long id;

    snprintf(sql, sizeof(sql), "SELECT max(target_id) FROM torch_trace WHERE pid = %d", pid);
    rows = client_rows(socket, pid, sql, &keep);
    if (!rows)
        return 0;
    id = client_int(json_array_get(rows, 0), 0);
    json_decref(keep);
    if (!id)
        fprintf(stderr,
                "probectl torch: no torch trace recorded for pid %d (probectl torch %d on)\n", pid,
                pid);
    return id;
}

/* The rows of @sql to print (*@keep holds them); NULL when the query failed (*@r -1, said
 * why) or when @doc (--format json|csv) took them as its section @name (*@r 0). Each print_
 * function prints its table, or puts it in @doc. */
static json_t *table_rows(const char *socket, int pid, const char *sql, json_t *doc,
                          const char *name, json_t **keep, int *r)
{
    json_t *rows = client_rows(socket, pid, sql, keep);

    *r = rows ? 0 : -1;
    if (rows && doc)
        output_section(doc, name, *keep);
    if (!rows || doc) {
        json_decref(*keep);
        return NULL;
    }
    return rows;
}

static int print_slowest(const char *socket, int pid, long long target, int top, json_t *doc)
{
    char sql[1024];
    json_t *keep, *rows, *row;
    bool device = false;
    size_t i;
    int r;

    snprintf(sql, sizeof(sql),
             "SELECT module, stage, count(*) AS calls, avg(duration) * 1e3 AS mean_ms,"
             " max(duration) * 1e3 AS max_ms, sum(duration) * 1e3 AS total_ms,"
             " avg(allocated) AS allocated_mb, max(reserved) AS reserved_mb,"
             " avg(device_duration) * 1e3 AS gpu_mean_ms FROM torch_trace WHERE target_id = %lld "
             "GROUP BY module, stage"
             " ORDER BY avg(duration) DESC LIMIT %d",
             target, top);
    if (!(rows = table_rows(socket, pid, sql, doc, "slowest", &keep, &r)))
        return r;
    json_array_foreach(rows, i, row) device |= json_is_number(json_array_get(row, 8));
    printf("slowest modules (mean time per call; a parent's time includes its children's%s):\n",
           device ? "; GPU ms: between CUDA events around it on its stream" : "");
    printf("%-32s %-9s %7s %10s %10s %11s %10s%s\n", "MODULE", "STAGE", "CALLS", "MEAN ms",
           "MAX ms", "TOTAL ms", "ALLOC MB", device ? "     GPU ms" : "");
    json_array_foreach(rows, i, row)
    {
        printf("%-32.32s %-9s %7lld %10.3f %10.3f %11.1f %10.1f",
               json_string_value(json_array_get(row, 0)), json_string_value(json_array_get(row, 1)),
               client_int(row, 2), client_num(row, 3), client_num(row, 4), client_num(row, 5),
               client_num(row, 6));
        if (device && json_is_number(json_array_get(row, 8)))
            printf(" %10.3f", client_num(row, 8));
        else if (device)
            printf(" %10s", "-");
        printf("\n");
    }
    json_decref(keep);
    return 0;
}

static int print_trend(const char *socket, int pid, long long target, json_t *doc)
{
    char sql[1024];
    json_t *keep, *rows, *row;
    size_t i;
    int r;

    snprintf(sql, sizeof(sql),
             "WITH r AS (SELECT min(step) AS lo, max(step) AS hi FROM torch_step_times"
             " WHERE target_id = %lld),"
             " b AS (SELECT max(1, (hi - lo + %d) / %d) AS width, lo FROM r)"
             " SELECT min(step) AS first_step, max(step) AS last_step, count(*) AS steps,"
             " avg(duration) * 1e3 AS mean_ms, min(duration) * 1e3 AS min_ms,"
             " max(duration) * 1e3 AS max_ms FROM torch_step_times, b WHERE target_id = %lld"
             " GROUP BY (step - b.lo) / b.width ORDER BY 1",
             target, TREND_BUCKETS, TREND_BUCKETS, target);
    if (!(rows = table_rows(socket, pid, sql, doc, "trend", &keep, &r)))
        return r;
    if (json_array_size(rows) == 0) {
        printf("\nno step times yet (a step's time is known when the next one begins)\n");
        json_decref(keep);
        return 0;
    }
    printf("\nstep time trend:\n%-15s %7s %10s %10s %10s\n", "STEPS", "COUNT", "MEAN ms", "MIN ms",
           "MAX ms");
    json_array_foreach(rows, i, row)
    {
        char steps[32];
        snprintf(steps, sizeof(steps), "%lld-%lld", client_int(row, 0), client_int(row, 1));
        printf("%-15s %7lld %10.3f %10.3f %10.3f\n", steps, client_int(row, 2), client_num(row, 3),
               client_num(row, 4), client_num(row, 5));
    }
    json_decref(keep);
    return 0;
}

static int print_variables(const char *socket, int pid, long long target, json_t *doc)
{
    char sql[1024];
    json_t *keep, *rows, *row;
    size_t i;
    int r;

    snprintf(sql, sizeof(sql),
             "SELECT name, func AS function, count(*) AS \"values\", min(step) AS first_step,"
             " max(step) AS last_step, (SELECT value FROM torch_variables w WHERE w.target_id = "
             "v.target_id AND"
             " w.name = v.name AND w.func = v.func ORDER BY step LIMIT 1) AS first_value,"
             " (SELECT value FROM torch_variables w WHERE w.target_id = v.target_id AND"
             " w.name = v.name AND w.func = v.func ORDER BY step DESC LIMIT 1) AS last_value"
             " FROM torch_variables v WHERE target_id = %lld GROUP BY name, func ORDER BY name",
             target);
    if (!(rows = table_rows(socket, pid, sql, doc, "variables", &keep, &r)))
        return r;
    if (json_array_size(rows) == 0) {
        json_decref(keep);
        return 0;
    }
    printf("\ntracked variables:\n%-24s %7s %-13s %-18s %-18s\n", "NAME@FUNCTION", "VALUES",
           "STEPS", "FIRST", "LAST");
    json_array_foreach(rows, i, row)
    {
        char name[80], steps[32], *first = json_dumps(json_array_get(row, 5), JSON_ENCODE_ANY),
                                  *last = json_dumps(json_array_get(row, 6), JSON_ENCODE_ANY);
        snprintf(name, sizeof(name), "%s@%s", json_string_value(json_array_get(row, 0)),
                 json_string_value(json_array_get(row, 1)));
        snprintf(steps, sizeof(steps), "%lld-%lld", client_int(row, 3), client_int(row, 4));
        printf("%-24s %7lld %-13s %-18.18s %-18.18s\n", name, client_int(row, 2), steps,
               first ? first : "?", last ? last : "?");
        free(first);
        free(last);
    }
    json_decref(keep);
    return 0;
}

/* @fmt table: the report; json: one document of its figures and tables; csv: the slowest
 * modules alone. */
static int summary(const char *socket, int pid, int top, enum output_format fmt)
{
    json_t *body = json_pack("{s:i, s:s}", "pid", pid, "action", "drain"), *reply;
    json_t *doc = fmt == OUTPUT_TABLE ? NULL : json_object();
    char sql[512];
    json_t *keep, *rows, *row;
    long long target;
    long status;
    int r;

    /* what the process buffered since the last drain, first; a trace already off is fine */
    reply = torch_call(socket, body, &status, true);
    json_decref(body);
    if (!reply && status != 409 && status != 404 && status != 422) {
        json_decref(doc);
        return 1; /* no daemon, or the process is gone: said why */
    }
    target = traced_target(socket, pid);
    snprintf(sql, sizeof(sql),
             "SELECT count(DISTINCT step), min(step), max(step), count(*) FROM torch_trace"
             " WHERE target_id = %lld",
             target);
    rows = target ? client_rows(socket, pid, sql, &keep) : NULL;
    if (!rows) {
        json_decref(reply);
        json_decref(doc);
        return 1;
    }
    row = json_array_get(rows, 0);
    if (doc) {
        json_object_set_new(doc, "pid", json_integer(pid));
        json_object_set_new(doc, "tracing", json_boolean(reply));
        json_object_set_new(doc, "steps", json_integer(client_int(row, 0)));
        json_object_set(doc, "first_step", json_array_get(row, 1));
        json_object_set(doc, "last_step", json_array_get(row, 2));
        json_object_set_new(doc, "records", json_integer(client_int(row, 3)));
        if (reply)
            for (size_t k = 0; k < 4; k++) {
                const char *key = (const char *[]){"every", "step", "device", "dropped"}[k];
                json_object_set(doc, key, json_object_get(reply, key) ?: json_null());
            }
    } else {
        printf("pid %d: torch trace %s: %lld steps recorded (%lld-%lld), %lld records", pid,
               reply ? "on" : "off", client_int(row, 0), client_int(row, 1), client_int(row, 2),
               client_int(row, 3));
        if (reply)
            printf(", every %lld step%s, now at step %lld on %s%s",
                   (long long)json_integer_value(json_object_get(reply, "every")),
                   json_integer_value(json_object_get(reply, "every")) == 1 ? "" : "s",
                   (long long)json_integer_value(json_object_get(reply, "step")),
                   json_string_value(json_object_get(reply, "device")),
                   json_integer_value(json_object_get(reply, "dropped")) > 0
                       ? " (the process dropped records: probed drained too slowly)"
                       : "");
        printf("\n\n");
    }
    json_decref(keep);
    json_decref(reply);
    r = print_slowest(socket, pid, target, top, doc);
    r = r ? r : print_trend(socket, pid, target, doc);
    r = r ? r : print_variables(socket, pid, target, doc);
    if (doc && r == 0)
        output_report(fmt, doc, "slowest");
    json_decref(doc);
    return r ? 1 : 0;
}

static void usage(void)
{
    printf("usage: probectl torch <pid> on [--every N] [--exprs name@function,...] [--comm]\n"
           "                                [--backward auto|all|none] [--device-time]\n"
           "       probectl torch <pid> on --comm-only\n"
           "       probectl torch <pid> off\n"
           "       probectl torch <pid> summary [--top N] [--format table|csv|json | --json]\n"
           "       probectl torch <pid> profile [--steps N | --duration D] [-o trace.json]\n"
           "                                    [--timeout D] [--top N]\n"
           "       probectl torch <pid> memory [--record D] [-o FILE] [--format F] [--top N]\n"
           "  on       record, in a running PyTorch job, what each step and module costs:\n"
           "           forward and backward of every module and the optimizer step, with\n"
           "           their time and memory (CUDA allocated/reserved, or RSS on CPU), in\n"
           "           python.torch_trace. torch's global hooks; the job's code is unchanged.\n"
           "           Attaches the process first when it is not.\n"
           "  --every N   record every Nth step only (default 1)\n"
           "  --backward  whose backward is timed: auto (default) a module's once one of its\n"
           "              first 8 forwards took 200 us or more (timing one costs a few us);\n"
           "              all; none (top-level modules only: the backward pass)\n"
           "  --exprs     read these locals of live frames once per recorded step\n"
           "              (e.g. loss@train,acc1@train) into python.variables\n"
           "  --comm      also every torch.distributed collective and send/recv: op, group,\n"
           "              sequence number, bytes, rank, peer, latency (comm_metrics); DDP's\n"
           "              gradient all_reduce (C++) a row a step, its timing in ddp_step_times\n"
           "  --comm-only those calls alone, no module hooks (nor DDP's steps)\n"
           "  --device-time  on CUDA, also each module's and stage's time on the GPU: CUDA\n"
           "              events around it on the current stream, read without waiting for\n"
           "              the GPU (torch_trace.device_duration); about 2 us a timed module\n"
           "  off      remove every hook; the job runs exactly as before\n"
           "  summary  the slowest modules, the step time trend, the tracked variables;\n"
           "           --format json: all three and the trace's state, csv: the modules\n"
           "  profile  torch.profiler in the running job for N steps (default 5) or D (whole\n"
           "           steps), then off: CPU ops and, on a GPU, kernels, memcpys and memsets\n"
           "           with stream, time and the module they ran under, in the tables\n"
           "           torch_ops and gpu_kernels; -o writes them as a Chrome/Perfetto trace.\n"
           "           --timeout (default 60s past --duration) cancels one that does not end\n"
           "  memory   the job's live GPU memory by the Python stack that allocated it: the\n"
           "           caching allocator's history recorded for --record D (default 5s, at\n"
           "           most 30s), then its snapshot (table gpu_memory); -o draws it as a\n"
           "           flame graph (.svg, .folded, .json: speedscope; or --format)\n");
}

int torch_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"every", required_argument, NULL, 'e'},
                                             {"exprs", required_argument, NULL, 'x'},
                                             {"top", required_argument, NULL, 't'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"comm", no_argument, NULL, 'c'},
                                             {"comm-only", no_argument, NULL, 'C'},
                                             {"backward", required_argument, NULL, 'b'},
                                             {"device-time", no_argument, NULL, 'D'},
                                             {"steps", required_argument, NULL, 'n'},
                                             {"duration", required_argument, NULL, 'd'},
                                             {"timeout", required_argument, NULL, 'T'},
                                             {"output", required_argument, NULL, 'o'},
                                             {"record", required_argument, NULL, 'r'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL, *exprs = NULL, *action, *backward = "auto";
    struct torch_profile_options prof = {.timeout_ms = -1};
    long long record_ms = -1;
    enum output_format output = OUTPUT_TABLE;
    const char *format = NULL;
    long every = 1, top = 15, n;
    int64_t ns;
    char *end;
    int c, pid, comm = 0;
    bool device_time = false, json_option = false;

    while ((c = getopt_long(argc, argv, "e:x:t:o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'D':
            device_time = true;
            break;
        case 'n':
            n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 1000) {
                fprintf(stderr, "probectl torch: --steps takes 1..1000\n");
                return 2;
            }
            prof.steps = (int)n;
            break;
        case 'd':
        case 'T':
            ns = units_duration_ns(optarg);
            if (ns <= 0 || ns > (c == 'd' ? 600 : 3600) * 1000000000LL) {
                fprintf(stderr, "probectl torch: --%s takes a duration up to %s (30s, 2m, ...)\n",
                        c == 'd' ? "duration" : "timeout", c == 'd' ? "10m" : "1h");
                return 2;
            }
            *(c == 'd' ? &prof.duration_ms : &prof.timeout_ms) = ns / 1000000 ? ns / 1000000 : 1;
            break;
        case 'o':
            prof.output = optarg;
            break;
        case 'r':
            ns = units_duration_ns(optarg);
            if (ns <= 0 || ns > 30 * 1000000000LL) {
                fprintf(stderr, "probectl torch: --record takes a duration up to 30s\n");
                return 2;
            }
            record_ms = ns / 1000000 ? ns / 1000000 : 1;
            break;
        case 'f':
            format = optarg; /* memory's drawing, or summary's output: checked below */
            break;
        case 'j':
            format = "json";
            json_option = true;
            break;
        case 'e':
            every = strtol(optarg, &end, 10);
            if (*end || every < 1 || every > 1000000) {
                fprintf(stderr, "probectl torch: --every takes a number of steps, 1..1000000\n");
                return 2;
            }
            break;
        case 'x':
            exprs = optarg;
            break;
        case 'b':
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "all") != 0 &&
                strcmp(optarg, "none") != 0) {
                fprintf(stderr, "probectl torch: --backward takes auto, all or none\n");
                return 2;
            }
            backward = optarg;
            break;
        case 'c':
            comm = comm ? comm : 1;
            break;
        case 'C':
            comm = 2;
            break;
        case 't':
            top = strtol(optarg, &end, 10);
            if (*end || top < 1 || top > 1000) {
                fprintf(stderr, "probectl torch: --top takes 1..1000\n");
                return 2;
            }
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            usage();
            return 0;
        default:
            return 2;
        }
    }
    if (optind + 2 != argc) {
        fprintf(stderr, "probectl torch: expected <pid> on|off|summary|profile|memory\n");
        return 2;
    }
    if ((pid = client_parse_pid(argv[optind], "torch")) < 0)
        return 2;
    action = argv[optind + 1];
    if (strcmp(action, "memory") == 0) {
        if (json_option || (format && !flame_format_ok(format))) {
            fprintf(stderr, "probectl torch: memory's --format takes svg, folded or speedscope\n");
            return 2;
        }
        if (prof.steps || prof.duration_ms || prof.timeout_ms >= 0) {
            fprintf(stderr, "probectl torch: memory takes --record, -o, --format and --top\n");
            return 2;
        }
        return torch_memory(socket, pid, record_ms < 0 ? 5000 : record_ms, prof.output,
                            format ? format : flame_format_of(prof.output), (int)top);
    }
    if (strcmp(action, "summary") == 0 && format &&
        output_format_of(format, "torch summary", &output) < 0)
        return 2;
    if (record_ms >= 0 || (format && strcmp(action, "summary") != 0)) {
        fprintf(stderr, "probectl torch: --record is memory's, --format memory's and summary's\n");
        return 2;
    }
    if (strcmp(action, "profile") != 0 &&
        (prof.steps || prof.duration_ms || prof.output || prof.timeout_ms >= 0)) {
        fprintf(stderr, "probectl torch: --steps, --duration, --timeout and -o are profile's\n");
        return 2;
    }
    if (strcmp(action, "on") == 0)
        return turn_on(socket, pid, (int)every, exprs, comm, backward, device_time);
    if (strcmp(action, "off") == 0)
        return turn_off(socket, pid);
    if (strcmp(action, "summary") == 0)
        return summary(socket, pid, (int)top, output);
    if (strcmp(action, "profile") == 0) {
        if (prof.steps && prof.duration_ms) {
            fprintf(stderr, "probectl torch: profile takes --steps or --duration, not both\n");
            return 2;
        }
        if (!prof.steps && !prof.duration_ms)
            prof.steps = 5;
        if (prof.timeout_ms < 0)
            prof.timeout_ms = 60000 + prof.duration_ms;
        prof.top = (int)top;
        return torch_profile(socket, pid, &prof);
    }
    fprintf(stderr, "probectl torch: '%s': expected on, off, summary, profile or memory\n", action);
    return 2;
}
