/* metrics.c - see metrics.h. */
#define _GNU_SOURCE
#include "api/metrics.h"

#include <ctype.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errbuf.h"
#include "common/connlimit.h"
#include "clock.h"
#include "log.h"
#include "native/native.h"
#include "sample/exits.h"
#include "intarget/catch.h"
#include "common/procfs.h"

#define CMD_LABEL_MAX 127     /* bytes of the command line in the cmd label */
#define METRICS_CONNS_MAX 256 /* scrapers at once; past it 503, at twice it accepting pauses */

/* One sampled target as a scrape reports it, from the registry's copy (targets__copy). */
struct row {
    char labels[512]; /* pid="..",rank="..",...: escaped once per scrape */
    uint32_t rate_hz;
    struct target_stats stats;
    struct proc_usage usage;
    int64_t usage_ns;
    double main_stack_unchanged_s; /* -1: its main thread not sampled yet */
    struct target_torch torch;
    bool native; /* attach --native, perf running */
    struct native_stats native_stats;
    int64_t gpu_bytes; /* -1: no GPU reading */
};

struct metrics {
    struct event_base *base;
    struct metrics_sources src;
    struct evhttp *http; /* NULL: not serving */
    bool full_cmdline;   /* metrics_cmdline = full, read at each scrape */
    struct connlimit *clients;
    char address[CONFIG_VALUE_MAX];
    struct target_info *infos; /* TARGETS_MAX: the registry's copy, for one scrape */
    struct row rows[TARGETS_MAX];
    size_t n_rows, n_ended;
    struct gpu_snapshot *gpu; /* the meter's latest GPU reading, copied for one scrape */
    struct meter_gpu_xids gpu_xids[GPU_DEVICES_MAX];
    char gpu_labels[GPU_DEVICES_MAX][384];
};

/* Appends label @name="@value" to @buf (at *@len, @size bytes), escaping backslash, double
 * quote and newline as the exposition format asks; the value is cut after @max bytes, and a
 * label that does not fit is left out. */
static void add_label(char *buf, size_t size, size_t *len, const char *name, const char *value,
                      size_t max)
{
    size_t n = *len;
    int w = snprintf(buf + n, size - n, "%s%s=\"", n ? "," : "", name);

    if (w < 0 || (size_t)w + 3 >= size - n) {
        buf[n] = '\0';
        return;
    }
    n += (size_t)w;
    for (const char *p = value; *p && (size_t)(p - value) < max && n + 3 < size; p++) {
        if (*p == '\\' || *p == '"' || *p == '\n')
            buf[n++] = '\\';
        buf[n++] = *p == '\n' ? 'n' : *p;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    *len = n;
}

/* Whether @prog (argv[0]) is a Python interpreter by its name: python, python3, python3.12,
 * python3.13t, /usr/bin/python3-dbg ... */
static bool is_python(const char *prog)
{
    const char *base = strrchr(prog, '/');

    base = base ? base + 1 : prog;
    if (strncmp(base, "python", 6) != 0)
        return false;
    for (const char *p = base + 6; *p; p++)
        if (!isdigit((unsigned char)*p) && !strchr(".-_abdmtw", *p))
            return false;
    return true;
}

/* The cmd label by default: the program and, for a Python interpreter, what it runs (its
 * script, `-m module`, `-c`), never an argument or an option's value, which can hold secrets
 * (`--api-key S`, `-X key=S`): /metrics is for every local user. "python3 -u -X dev train.py
 * --lr 3" -> "python3 train.py"; a program that is not named python ("bin/app --api-key S", an
 * embedded interpreter: what its arguments mean is not known) -> "bin/app". */
static void program_and_script(const char *cmdline, char *out, size_t size)
{
    char buf[sizeof(((struct target_info *)0)->cmdline)], *save = NULL, *tok;
    const char *prog;
    int n;

    snprintf(buf, sizeof(buf), "%s", cmdline);
    prog = strtok_r(buf, " ", &save);
    n = snprintf(out, size, "%s", prog ? prog : "");
    if (!prog || !is_python(prog) || n < 0 || (size_t)n >= size)
        return;
    while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
        if (strcmp(tok, "-m") == 0) {
            const char *mod = strtok_r(NULL, " ", &save);
            snprintf(out + n, size - (size_t)n, " -m %s", mod ? mod : "");
            return;
        }
        if (strcmp(tok, "-c") == 0 || strcmp(tok, "-") == 0) {
            snprintf(out + n, size - (size_t)n, " %s", tok);
            return;
        }
        if (strcmp(tok, "-W") == 0 || strcmp(tok, "-X") == 0) { /* their value follows */
            strtok_r(NULL, " ", &save);
            continue;
        }
        if (strcmp(tok, "--") == 0) /* the script next, whatever it looks like */
            tok = strtok_r(NULL, " ", &save);
        else if (tok[0] == '-')
            continue; /* -u, -O, -Wd, -Xdev, --check-hash-based-pycs ... */
        if (tok)
            snprintf(out + n, size - (size_t)n, " %s", tok);
        return;
    }
}

static void copy_row(struct metrics *m, const struct target_info *t)
{
    struct row *r;
    char num[16];
    size_t len = 0;

    if (t->state != TARGET_SAMPLING) {
        m->n_ended++;
        return;
    }
    r = &m->rows[m->n_rows++];
    r->rate_hz = t->rate_hz;
    r->stats = t->stats;
    r->usage = t->usage;
    r->usage_ns = t->usage_ns;
    r->main_stack_unchanged_s =
        t->main_stack_since_ns ? (double)(real_ns() - t->main_stack_since_ns) / 1e9 : -1;
    if (r->main_stack_unchanged_s < 0 && t->main_stack_since_ns)
        r->main_stack_unchanged_s = 0;
    r->torch = t->torch;
    r->gpu_bytes = t->gpu_bytes;
    r->native = t->has_native;
    if (t->has_native)
        r->native_stats = t->native_stats;
    r->labels[0] = '\0';
    snprintf(num, sizeof(num), "%d", (int)t->pid);
    add_label(r->labels, sizeof(r->labels), &len, "pid", num, sizeof(num));
    snprintf(num, sizeof(num), "%d", t->rank);
    add_label(r->labels, sizeof(r->labels), &len, "rank", t->rank >= 0 ? num : "", sizeof(num));
    snprintf(num, sizeof(num), "%d", t->local_rank);
    add_label(r->labels, sizeof(r->labels), &len, "local_rank", t->local_rank >= 0 ? num : "",
              sizeof(num));
    if (m->full_cmdline) {
        add_label(r->labels, sizeof(r->labels), &len, "cmd", t->cmdline, CMD_LABEL_MAX);
    } else {
        char cmd[CMD_LABEL_MAX + 1];
        program_and_script(t->cmdline, cmd, sizeof(cmd));
        add_label(r->labels, sizeof(r->labels), &len, "cmd", cmd, CMD_LABEL_MAX);
    }
    add_label(r->labels, sizeof(r->labels), &len, "python", t->py_version, sizeof(t->py_version));
}

static void family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A sample value: integers as integers (bytes, counts), others with 12 significant digits
 * (2.92, not 2.9199999999999999). */
static const char *value_text(double v, char buf[32])
{
    if (v > -9e15 && v < 9e15 && v == (double)(long long)v)
        snprintf(buf, 32, "%lld", (long long)v);
    else
        snprintf(buf, 32, "%.12g", v);
    return buf;
}

static void one(struct evbuffer *out, const char *name, const char *type, const char *help,
                double v)
{
    char text[32];

    family(out, name, type, help);
    evbuffer_add_printf(out, "%s %s\n", name, value_text(v, text));
}

/* What a per-target metric reads from a row. */
typedef double (*row_value_fn)(const struct row *r);

static double r_cpu(const struct row *r)
{
    return (double)r->usage.cpu_ns / 1e9;
}
static double r_rss(const struct row *r)
{
    return (double)r->usage.rss;
}
static double r_pss(const struct row *r)
{
    return (double)r->usage.pss;
}
static double r_uss(const struct row *r)
{
    return (double)r->usage.uss;
}
static double r_swap(const struct row *r)
{
    return (double)r->usage.swap;
}
static double r_threads(const struct row *r)
{
    return r->usage.threads;
}
static double r_main_unchanged(const struct row *r)
{
    return r->main_stack_unchanged_s;
}
static double r_rate(const struct row *r)
{
    return r->rate_hz;
}
static double r_torn(const struct row *r)
{
    return (double)r->stats.torn;
}
static double r_unchanged(const struct row *r)
{
    return (double)r->stats.unchanged;
}
static double r_threads_cut(const struct row *r)
{
    return (double)r->stats.threads_cut;
}
static double r_dropped(const struct row *r)
{
    return (double)r->stats.dropped;
}

static double r_torch_steps(const struct row *r)
{
    return (double)r->torch.steps;
}
static double r_torch_step_seconds(const struct row *r)
{
    return r->torch.step_seconds;
}
static double r_torch_allocated(const struct row *r)
{
    return r->torch.allocated_mb * 1048576.0;
}
static double r_torch_reserved(const struct row *r)
{
    return r->torch.reserved_mb * 1048576.0;
}
static double r_torch_dropped(const struct row *r)
{
    return (double)r->torch.dropped;
}

static double r_native_samples(const struct row *r)
{
    return (double)r->native_stats.samples;
}

static double r_native_lost(const struct row *r)
{
    return (double)r->native_stats.lost;
}

static double r_native_merged(const struct row *r)
{
    return (double)r->native_stats.merged;
}

static double r_native_mismatched(const struct row *r)
{
    return (double)r->native_stats.mismatched;
}

static double r_native_same_instant(const struct row *r)
{
    return (double)r->native_stats.same_instant;
}

static double r_native_waiting(const struct row *r)
{
    return (double)r->native_stats.waiting;
}

static double r_native_waiting_unread(const struct row *r)
{
    return (double)r->native_stats.waiting_unread;
}

static double r_ddp_steps(const struct row *r)
{
    return (double)r->torch.ddp_steps;
}

static double r_ddp_compute(const struct row *r)
{
    return r->torch.ddp_compute_seconds;
}

static double r_ddp_wait(const struct row *r)
{
    return r->torch.ddp_wait_seconds;
}

static double r_comm_calls(const struct row *r)
{
    return (double)r->torch.comm_calls;
}

static double r_comm_seconds(const struct row *r)
{
    return r->torch.comm_seconds;
}

static double r_comm_bytes(const struct row *r)
{
    return (double)r->torch.comm_bytes;
}

static double r_comm_seq(const struct row *r)
{
    return (double)r->torch.comm_seq;
}

static double r_comm_in_flight(const struct row *r)
{
    int64_t since = r->torch.comm_in_flight_since_ns, now = real_ns();

    return since && now > since ? (double)(now - since) / 1e9 : 0;
}

static double r_gpu_memory(const struct row *r)
{
    return (double)r->gpu_bytes;
}

/* Which rows have a value: a series not known yet is absent rather than a false 0. */
enum needs {
    ALWAYS,
    NEEDS_USAGE,
    NEEDS_MAIN_STACK,
    NEEDS_TORCH,
    NEEDS_TORCH_MEMORY,
    NEEDS_TORCH_RESERVED,
    NEEDS_NATIVE,
    NEEDS_GPU,
    NEEDS_DDP,
    NEEDS_COMM,
    NEEDS_COMM_SEQ
};

static bool has_value(const struct row *r, enum needs needs)
{
    switch (needs) {
    case NEEDS_USAGE:
        return r->usage_ns != 0;
    case NEEDS_MAIN_STACK:
        return r->main_stack_unchanged_s >= 0;
    case NEEDS_TORCH:
        return r->torch.on;
    case NEEDS_TORCH_MEMORY:
        return r->torch.on && r->torch.has_memory;
    case NEEDS_TORCH_RESERVED:
        return r->torch.on && r->torch.has_reserved;
    case NEEDS_NATIVE:
        return r->native;
    case NEEDS_GPU:
        return r->gpu_bytes >= 0;
    case NEEDS_DDP:
        return r->torch.on && r->torch.ddp_steps > 0;
    case NEEDS_COMM:
        return r->torch.on && r->torch.comm;
    case NEEDS_COMM_SEQ:
        return r->torch.on && r->torch.has_comm_seq;
    default:
        return true;
    }
}

static void per_target(struct metrics *m, struct evbuffer *out, const char *name, const char *type,
                       const char *help, row_value_fn fn, enum needs needs)
{
    family(out, name, type, help);
    for (size_t i = 0; i < m->n_rows; i++) {
        const struct row *r = &m->rows[i];
        if (!has_value(r, needs))
            continue;
        char text[32];

        evbuffer_add_printf(out, "%s{%s} %s\n", name, r->labels, value_text(fn(r), text));
    }
}

static void samples_by_state(struct metrics *m, struct evbuffer *out)
{
    /* index: bit 0 on CPU, bit 1 holds the GIL */
    static const char *const state[4] = {"idle", "running", "gil_idle", "running_gil"};

    family(out, "probed_target_samples_total", "counter",
           "Thread samples recorded, by state: running_gil (on CPU holding the GIL), running"
           " (on CPU without it), gil_idle (holds it, off CPU), idle");
    for (size_t i = 0; i < m->n_rows; i++)
        for (int s = 0; s < 4; s++)
            evbuffer_add_printf(out, "probed_target_samples_total{%s,state=\"%s\"} %llu\n",
                                m->rows[i].labels, state[s],
                                (unsigned long long)m->rows[i].stats.by_state[s]);
}

static void tick_histogram(struct metrics *m, struct evbuffer *out)
{
    const struct sampler *s = m->src.sampler;
    uint64_t cumulative = 0;

    family(out, "probed_sample_tick_seconds", "histogram",
           "Time one sampling tick of one target takes (all its threads' stacks)");
    for (int b = 0; b < SAMPLER_HIST_N; b++) {
        cumulative += s->tick_hist[b];
        evbuffer_add_printf(out, "probed_sample_tick_seconds_bucket{le=\"%g\"} %llu\n",
                            sampler_hist_bounds_us[b] / 1e6, (unsigned long long)cumulative);
    }
    cumulative += s->tick_hist[SAMPLER_HIST_N];
    evbuffer_add_printf(out, "probed_sample_tick_seconds_bucket{le=\"+Inf\"} %llu\n",
                        (unsigned long long)cumulative);
    evbuffer_add_printf(out, "probed_sample_tick_seconds_sum %.9f\n", (double)s->tick_ns_sum / 1e9);
    evbuffer_add_printf(out, "probed_sample_tick_seconds_count %llu\n",
                        (unsigned long long)cumulative);
}

/* ---- the GPUs, under the names of NVIDIA's DCGM exporter (dcgm-exporter's default counters),
 * so that dashboards and alerts written for it read these; labels gpu, UUID, device,
 * modelName as it sets them, GPU_I_ID for a MIG device ---- */

/* A figure of a device; negative: the driver does not give it for that device. */
typedef double (*gpu_value_fn)(const struct gpu_device *d);

static double g_util(const struct gpu_device *d)
{
    return d->util_pct;
}
static double g_mem_util(const struct gpu_device *d)
{
    return d->mem_util_pct;
}
static double g_fb_used_mib(const struct gpu_device *d)
{
    return d->mem_used_bytes < 0 ? -1 : (double)(d->mem_used_bytes >> 20);
}
static double g_fb_free_mib(const struct gpu_device *d)
{
    return d->mem_used_bytes < 0 || d->mem_total_bytes < 0
               ? -1
               : (double)((d->mem_total_bytes - d->mem_used_bytes) >> 20);
}
static double g_power_w(const struct gpu_device *d)
{
    return d->power_mw < 0 ? -1 : (double)d->power_mw / 1000.0;
}
static double g_temp(const struct gpu_device *d)
{
    return d->temp_c;
}
static double g_sm_clock(const struct gpu_device *d)
{
    return d->sm_clock_mhz;
}
static double g_mem_clock(const struct gpu_device *d)
{
    return d->mem_clock_mhz;
}
static double g_throttle(const struct gpu_device *d)
{
    return d->throttle_reasons;
}
static double g_ecc_sbe(const struct gpu_device *d)
{
    return d->ecc_corrected;
}
static double g_ecc_dbe(const struct gpu_device *d)
{
    return d->ecc_uncorrected;
}

static void per_gpu(struct metrics *m, struct evbuffer *out, const char *name, const char *type,
                    const char *help, gpu_value_fn fn)
{
    family(out, name, type, help);
    for (size_t i = 0; i < m->gpu->n_devices; i++) {
        double v = fn(&m->gpu->devices[i]);
        char text[32];
        if (v >= 0) /* not given for this device: absent, not 0 */
            evbuffer_add_printf(out, "%s{%s} %s\n", name, m->gpu_labels[i], value_text(v, text));
    }
}

static void gpus(struct metrics *m, struct evbuffer *out)
{
    struct meter_gpu_status st;

    meter__gpu(m->src.meter, m->gpu, &st, m->gpu_xids);
    one(out, "probed_gpu_up", "gauge",
        "1: the GPUs are read through NVML; 0: they are not (GET /v1/status says why)",
        st.reading ? 1 : 0);
    if (!st.reading)
        return;
    for (size_t i = 0; i < m->gpu->n_devices; i++) {
        const struct gpu_device *d = &m->gpu->devices[i];
        char num[16], *l = m->gpu_labels[i];
        size_t len = 0;

        l[0] = '\0';
        snprintf(num, sizeof(num), "%d", d->index);
        add_label(l, sizeof(m->gpu_labels[i]), &len, "gpu", num, sizeof(num));
        add_label(l, sizeof(m->gpu_labels[i]), &len, "UUID", d->uuid, sizeof(d->uuid));
        snprintf(num, sizeof(num), "nvidia%d", d->index);
        add_label(l, sizeof(m->gpu_labels[i]), &len, "device", num, sizeof(num));
        add_label(l, sizeof(m->gpu_labels[i]), &len, "modelName", d->name, sizeof(d->name));
        if (d->mig >= 0) {
            snprintf(num, sizeof(num), "%d", d->mig);
            add_label(l, sizeof(m->gpu_labels[i]), &len, "GPU_I_ID", num, sizeof(num));
        }
    }
    per_gpu(m, out, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)", g_util);
    per_gpu(m, out, "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)", g_mem_util);
    per_gpu(m, out, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)",
            g_fb_used_mib);
    per_gpu(m, out, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)",
            g_fb_free_mib);
    per_gpu(m, out, "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)", g_power_w);
    per_gpu(m, out, "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)", g_temp);
    per_gpu(m, out, "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)", g_sm_clock);
    per_gpu(m, out, "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)",
            g_mem_clock);
    per_gpu(m, out, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
            "Current clock throttle reasons (NVML's bit mask)", g_throttle);
    per_gpu(m, out, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
            "Total number of single-bit volatile ECC errors", g_ecc_sbe);
    per_gpu(m, out, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
            "Total number of double-bit volatile ECC errors", g_ecc_dbe);
    family(out, "DCGM_FI_DEV_XID_ERRORS", "gauge",
           "Value of the last XID error encountered (0: none since probed started)");
    for (size_t i = 0; i < m->gpu->n_devices; i++)
        if (m->gpu->devices[i].mig < 0)
            evbuffer_add_printf(out, "DCGM_FI_DEV_XID_ERRORS{%s} %lld\n", m->gpu_labels[i],
                                (long long)m->gpu_xids[i].last);
    family(out, "probed_gpu_xid_errors_total", "counter",
           "Xid errors the GPU raised since probed started");
    for (size_t i = 0; i < m->gpu->n_devices; i++)
        if (m->gpu->devices[i].mig < 0)
            evbuffer_add_printf(out, "probed_gpu_xid_errors_total{%s} %llu\n", m->gpu_labels[i],
                                (unsigned long long)m->gpu_xids[i].n);
}

static int64_t file_size(const char *path, const char *suffix)
{
    char p[4200];
    struct stat st;

    snprintf(p, sizeof(p), "%s%s", path, suffix);
    return stat(p, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* The daemon's own process_* metrics, as every Prometheus client library names them. */
static void own_process(struct evbuffer *out)
{
    struct rusage ru;
    char statm[128];
    long long pages_resident;

    if (getrusage(RUSAGE_SELF, &ru) == 0)
        one(out, "process_cpu_seconds_total", "counter", "CPU time of probed itself",
            (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                ru.ru_stime.tv_usec / 1e6);
    /* statm, not smaps_rollup: a scrape must not walk our own mappings */
    if (procfs_read(getpid(), "statm", statm, sizeof(statm)) > 0 &&
        sscanf(statm, "%*s %lld", &pages_resident) == 1)
        one(out, "process_resident_memory_bytes", "gauge", "Resident memory of probed itself",
            (double)pages_resident * (double)sysconf(_SC_PAGESIZE));
}

static void render(struct metrics *m, struct evbuffer *out)
{
    struct writer *w = m->src.writer;
    struct meter *mt = m->src.meter;
    size_t n;

    m->n_rows = m->n_ended = 0;
    if (m->src.config) {
        char how[16];
        config_text(m->src.config, CFG_METRICS_CMDLINE, how, sizeof(how));
        m->full_cmdline = strcmp(how, "full") == 0;
    }
    n = targets__copy(m->src.reg, &(struct targets_filter){.all_users = true}, m->infos,
                      TARGETS_MAX);
    for (size_t i = 0; i < n && i < TARGETS_MAX; i++)
        copy_row(m, &m->infos[i]);

    family(out, "probed_build_info", "gauge", "probed's version");
    evbuffer_add_printf(out, "probed_build_info{version=\"%s\"} 1\n", PROBED_VERSION);
    family(out, "probed_targets", "gauge", "Processes listed, by state");
    evbuffer_add_printf(out, "probed_targets{state=\"sampling\"} %zu\n", m->n_rows);
    evbuffer_add_printf(out, "probed_targets{state=\"ended\"} %zu\n", m->n_ended);
    one(out, "probed_samples_written_total", "counter", "Thread samples stored in SQLite",
        (double)w->samples_written);
    one(out, "probed_samples_dropped_total", "counter",
        "Thread samples lost: the outbox was full (the database too slow)",
        (double)w->samples_dropped);
    one(out, "probed_write_errors_total", "counter", "Batches that could not be stored",
        (double)w->write_errors);
    one(out, "probed_blocks_merged_total", "counter",
        "Sample blocks merged away: each minute's into one per thread", (double)w->blocks_merged);
    one(out, "probed_cpu_readings_thinned_total", "counter",
        "Per-thread CPU readings deleted an hour on: one a minute per thread is kept",
        (double)w->readings_thinned);
    tick_histogram(m, out);
    one(out, "probed_db_size_bytes", "gauge", "Database file and its write-ahead log",
        (double)(file_size(m->src.db_path, "") + file_size(m->src.db_path, "-wal")));
    one(out, "probed_db_used_bytes", "gauge", "Database pages in use (retention's measure)",
        (double)w->db_bytes);
    one(out, "probed_db_cache_bytes", "gauge",
        "The writer's SQLite page cache (part of the RSS; bounded, it fills as the database grows)",
        (double)w->db_cache_bytes);
    one(out, "probed_requests_total", "counter", "API requests", (double)*m->src.requests);
    one(out, "probed_queries_total", "counter", "SQL queries run", (double)*m->src.queries);
    one(out, "probed_query_errors_total", "counter", "SQL queries that failed or were refused",
        (double)*m->src.query_errors);
    family(out, "probed_target_exits_total", "counter",
           "Attached processes that ended, by how: exit (a status), signal, oom-kill");
    for (int k = 0; k < EXIT_KINDS; k++)
        evbuffer_add_printf(out, "probed_target_exits_total{kind=\"%s\"} %llu\n", exit_kind_name(k),
                            (unsigned long long)exits__count(m->src.exits, k));
    one(out, "probed_target_exits_lost_total", "counter",
        "Ends of attached processes not recorded (too many at once)",
        (double)exits__lost(m->src.exits));
    if (m->src.catcher) {
        struct catch_counts cc;
        catcher__counts(m->src.catcher, &cc);
        family(out, "probed_catch_events_total", "counter",
               "Failures `probectl catch` recorded as they happened, by kind");
        evbuffer_add_printf(out, "probed_catch_events_total{kind=\"exception\"} %llu\n",
                            (unsigned long long)cc.exceptions);
        evbuffer_add_printf(out, "probed_catch_events_total{kind=\"fatal-signal\"} %llu\n",
                            (unsigned long long)cc.signals);
        one(out, "probed_catch_events_lost_total", "counter",
            "Catch events not recorded (a channel that failed, a row not written)",
            (double)cc.lost);
        one(out, "probed_catch_targets", "gauge", "Processes caught now (`probectl catch`)",
            (double)cc.channels);
    }
    one(out, "probed_memory_readings_total", "counter", "Memory/CPU readings of targets",
        (double)mt->readings);
    one(out, "probed_memory_pass_seconds", "gauge",
        "Time the last memory/CPU reading of every target took", (double)mt->last_pass_ns / 1e9);
    own_process(out);
    gpus(m, out);

    per_target(m, out, "probed_target_cpu_seconds_total", "counter",
               "CPU time of the target, all threads, user + system", r_cpu, NEEDS_USAGE);
    per_target(m, out, "probed_target_rss_bytes", "gauge", "Resident memory", r_rss, NEEDS_USAGE);
    per_target(m, out, "probed_target_pss_bytes", "gauge",
               "Proportional memory: shared pages divided among their users", r_pss, NEEDS_USAGE);
    per_target(m, out, "probed_target_uss_bytes", "gauge", "Memory private to the target", r_uss,
               NEEDS_USAGE);
    per_target(m, out, "probed_target_swap_bytes", "gauge", "Swapped out", r_swap, NEEDS_USAGE);
    per_target(m, out, "probed_target_threads", "gauge", "OS threads", r_threads, NEEDS_USAGE);
    per_target(m, out, "probed_target_sample_rate_hz", "gauge", "Samples per second", r_rate,
               ALWAYS);
    per_target(m, out, "probed_target_main_stack_unchanged_seconds", "gauge",
               "Seconds the main thread's Python stack (functions and lines) has stayed the same:"
               " a rank stuck in a collective, a deadlock, a stalled loader",
               r_main_unchanged, NEEDS_MAIN_STACK);
    per_target(m, out, "probed_target_torn_total", "counter",
               "Stacks that kept changing while read and were dropped", r_torn, ALWAYS);
    per_target(m, out, "probed_target_dropped_total", "counter",
               "Samples the outbox had no room for", r_dropped, ALWAYS);
    per_target(m, out, "probed_target_stacks_unchanged_total", "counter",
               "Stacks stored without reading them again: the thread had not run since its last"
               " sample",
               r_unchanged, ALWAYS);
    per_target(m, out, "probed_target_threads_cut_total", "counter",
               "Ticks that found 4096 threads or more: the threads past them were not sampled",
               r_threads_cut, ALWAYS);
    per_target(m, out, "probed_torch_steps_total", "counter",
               "Training (or inference) steps the torch trace timed (probectl torch on)",
               r_torch_steps, NEEDS_TORCH);
    per_target(m, out, "probed_torch_step_seconds_total", "counter",
               "Wall time of those steps; divided by probed_torch_steps_total's rate: the mean"
               " step time",
               r_torch_step_seconds, NEEDS_TORCH);
    per_target(m, out, "probed_torch_allocated_bytes", "gauge",
               "Memory at the latest torch trace record: torch.cuda.memory_allocated, or the"
               " process's RSS on CPU",
               r_torch_allocated, NEEDS_TORCH_MEMORY);
    per_target(m, out, "probed_torch_reserved_bytes", "gauge",
               "torch.cuda.memory_reserved at the latest torch trace record (CUDA only)",
               r_torch_reserved, NEEDS_TORCH_RESERVED);
    per_target(m, out, "probed_torch_dropped_total", "counter",
               "Torch trace records the target could not buffer before a drain", r_torch_dropped,
               NEEDS_TORCH);
    per_target(m, out, "probed_ddp_steps_total", "counter",
               "DistributedDataParallel iterations its own logger timed (probectl torch on"
               " --comm)",
               r_ddp_steps, NEEDS_DDP);
    per_target(m, out, "probed_ddp_compute_seconds_total", "counter",
               "Their forward and backward compute", r_ddp_compute, NEEDS_DDP);
    per_target(m, out, "probed_ddp_comm_wait_seconds_total", "counter",
               "Their gradient all-reduce time not hidden behind the backward: the rank waiting"
               " for the others. Across a job's ranks, the one that waits least is the straggler",
               r_ddp_wait, NEEDS_DDP);
    per_target(m, out, "probed_comm_calls_total", "counter",
               "torch.distributed calls the collective trace saw complete (probectl torch on"
               " --comm; DDP's gradient buckets are probed_ddp_steps_total's)",
               r_comm_calls, NEEDS_COMM);
    per_target(m, out, "probed_comm_seconds_total", "counter", "Their time, issue to completion",
               r_comm_seconds, NEEDS_COMM);
    per_target(m, out, "probed_comm_bytes_total", "counter", "The bytes those calls sent",
               r_comm_bytes, NEEDS_COMM);
    per_target(m, out, "probed_comm_seq", "gauge",
               "The latest collective the rank issued in the default process group, by c10d's"
               " number: the same on every rank of a job in step. A rank whose number stays"
               " below the others' is behind them (stalled, or it skipped a collective)",
               r_comm_seq, NEEDS_COMM_SEQ);
    per_target(m, out, "probed_comm_in_flight_seconds", "gauge",
               "How long the rank's oldest traced collective still in flight has been (0: none):"
               " a rank stuck in a collective, waiting for another",
               r_comm_in_flight, NEEDS_COMM);
    per_target(m, out, "probed_target_gpu_memory_bytes", "gauge",
               "GPU memory of the process on every GPU, as the driver reports it (NVML)",
               r_gpu_memory, NEEDS_GPU);
    per_target(m, out, "probed_native_samples_total", "counter",
               "Native stack samples the kernel took (attach --native)", r_native_samples,
               NEEDS_NATIVE);
    per_target(m, out, "probed_native_lost_total", "counter",
               "Native samples the kernel dropped: a ring was full", r_native_lost, NEEDS_NATIVE);
    per_target(m, out, "probed_native_merged_total", "counter",
               "Python samples given the native frames of the same thread", r_native_merged,
               NEEDS_NATIVE);
    per_target(m, out, "probed_native_mismatched_total", "counter",
               "Samples kept Python-only: the native and Python stacks disagreed",
               r_native_mismatched, NEEDS_NATIVE);
    per_target(m, out, "probed_native_same_instant_total", "counter",
               "Merged samples whose Python frames the eBPF sampler copied in the same instant",
               r_native_same_instant, NEEDS_NATIVE);
    per_target(m, out, "probed_native_waiting_total", "counter",
               "Samples of waiting Python threads given the native stack where they wait",
               r_native_waiting, NEEDS_NATIVE);
    per_target(m, out, "probed_native_waiting_unread_total", "counter",
               "Samples of waiting Python threads left without a native stack: the thread ran"
               " while it was read, or the unwind failed",
               r_native_waiting_unread, NEEDS_NATIVE);
    samples_by_state(m, out);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct metrics *m = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct evbuffer *out = evbuffer_new();

    if (!out) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    if (!connlimit__request(m->clients, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        evbuffer_add_printf(out, "probed: too many connections (over %d)\n", METRICS_CONNS_MAX);
        evhttp_send_reply(req, 503, "Service Unavailable", out);
        evbuffer_free(out);
        return;
    }
    if (strcmp(uri, "/metrics") == 0 || strncmp(uri, "/metrics?", 9) == 0) {
        if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET");
            evbuffer_add_printf(out, "probed: /metrics answers GET only\n");
            evhttp_send_reply(req, 405, "Method Not Allowed", out);
            evbuffer_free(out);
            return;
        }
    } else {
        evbuffer_add_printf(out, "probed: Prometheus metrics are at GET /metrics\n");
        evhttp_send_reply(req, 404, "Not Found", out);
        evbuffer_free(out);
        return;
    }
    render(m, out);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

int metrics_new(struct event_base *base, const struct metrics_sources *src, struct metrics **ret)
{
    struct metrics *m = calloc(1, sizeof(*m));

    if (!m || !(m->infos = calloc(TARGETS_MAX, sizeof(*m->infos))) ||
        !(m->gpu = calloc(1, sizeof(*m->gpu)))) {
        if (m)
            free(m->infos);
        free(m);
        return -ENOMEM;
    }
    m->base = base;
    m->src = *src;
    snprintf(m->address, sizeof(m->address), "off");
    *ret = m;
    return 0;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    if (m->http)
        evhttp_free(m->http);
    connlimit_free(m->clients);
    free(m->infos);
    free(m->gpu);
    free(m);
}

/* A listening TCP socket on "host:port" ("[v6]:port" too). */
static int listen_tcp(const char *address, int *ret_fd, struct errbuf *err)
{
    char host[CONFIG_VALUE_MAX], *colon;
    int rc;

    snprintf(host, sizeof(host), "%s", address);
    colon = strrchr(host, ':');
    if (!colon)
        return errbuf_set(err, -EINVAL, "metrics_address: '%s' is not host:port", address);
    *colon = '\0';
    if (host[0] == '[' && colon > host + 1 && colon[-1] == ']') {
        colon[-1] = '\0';
        memmove(host, host + 1, strlen(host));
    }
    rc = connlimit_listen_tcp(host, colon + 1, ret_fd);
    if (rc == -EADDRNOTAVAIL)
        return errbuf_set(err, -EINVAL, "metrics_address: %s: no such host", address);
    if (rc < 0)
        return errbuf_set(err, rc, "metrics_address: listening on %s: %s", address, strerror(-rc));
    return 0;
}

int metrics__listen(struct metrics *m, const char *address, struct errbuf *err)
{
    struct evhttp *http = NULL;
    struct connlimit *clients = NULL;
    int fd = -1, r;

    if (strcmp(address, m->address) == 0)
        return 0;
    if (strcmp(address, "off") != 0) {
        r = listen_tcp(address, &fd, err);
        if (r < 0)
            return r;
        http = evhttp_new(m->base);
        r = http ? connlimit_serve(m->base, http, fd,
                                   &(struct connlimit_config){.what = "/metrics",
                                                              .max_conns = METRICS_CONNS_MAX,
                                                              .request_s = 10,
                                                              .warn = log_warning},
                                   &clients)
                 : -ENOMEM;
        if (r < 0) {
            if (http)
                evhttp_free(http);
            else
                close(fd);
            return errbuf_set(err, -ENOMEM, "metrics_address: serving %s failed", address);
        }
        evhttp_set_timeout(http, 10);
        evhttp_set_max_headers_size(http, 16384);
        evhttp_set_max_body_size(http, 0);
        evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
        evhttp_set_gencb(http, on_request, m);
    }
    if (m->http)
        evhttp_free(m->http); /* closes the old listening socket */
    connlimit_free(m->clients);
    m->http = http;
    m->clients = clients;
    snprintf(m->address, sizeof(m->address), "%s", address);
    log_msg(LOG_INFO, "metrics: %s%s", http ? "serving /metrics on " : "", address);
    return 0;
}
