/*
 * main.c - probed, the daemon: parses options, opens the store, starts the sampler and
 * writer threads and serves the API until SIGTERM/SIGINT.
 *
 *   probed [--config PATH] [--socket PATH] [--db PATH] [--foreground] [--rate HZ]
 *          [--retention DUR] [--max-db-size SIZE] [--query-timeout DUR] [--metrics ADDR]
 *          [--memory-interval DUR] [--metrics-cmdline script|full] [--group NAME] [--stub PATH]
 *          [--nvml PATH|off] [--probed-threads hide|show]
 *
 * Settings come from config.h: defaults, then probed.conf, then these options; SIGHUP
 * re-reads the file and the API changes the live ones (probectl config).
 *
 * On start it picks up again the targets the store says were being sampled (a daemon
 * restarted, or killed with -9) when the same process (pid + start time) still runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <grp.h>
#include <libgen.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "pyframes.h"
#include "clock.h"
#include "config.h"
#include "sample/exits.h"
#include "sample/meter.h"
#include "log.h"
#include "push/pyroscope.h"
#include "query/query.h"
#include "query/sqlmem.h"
#include "common/procfs.h"
#include "sample/outbox.h"
#include "sample/runstate.h"
#include "sample/sampler.h"
#include "sample/targets.h"
#include "store/store.h"
#include "store/writer.h"

#define OUTBOX_SAMPLES (1 << 18) /* samples per flush: 64 targets x 100 Hz x 40 threads */

struct options {
    struct config cfg;
    const char *config_path;
    bool config_explicit; /* --config given: the file must exist */
    bool foreground;
    char stub_buf[4096];
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: probed [options]\n"
            "  --config PATH          settings file (default %s)\n"
            "  --socket PATH          API socket (default /run/probed/probed.sock)\n"
            "  --db PATH              SQLite database (default /var/lib/probed/probed.db)\n"
            "  --foreground           do not detach from the terminal\n"
            "  --rate HZ              default sampling rate of an attach (default 100)\n"
            "  --retention DUR        delete samples older than this (default 7d; 0: keep)\n"
            "  --max-db-size SIZE     delete the oldest samples above this (default 1G; 0: none)\n"
            "  --query-timeout DUR    interrupt queries running longer (default 10s)\n"
            "  --metrics ADDR         host:port of Prometheus /metrics (default\n"
            "                         127.0.0.1:9464; off: not served)\n"
            "  --memory-interval DUR  how often targets' memory and CPU are recorded (default 1s)\n"
            "  --allocation-interval DUR  how often allocation snapshots are taken while\n"
            "                         tracking is on (default 30s; 0: on request)\n"
            "  --metrics-cmdline script|full  the cmd label of /metrics: the program and its\n"
            "                         script (default), or the whole command line\n"
            "  --write-backlog SIZE   samples kept while the database fails (default 64M)\n"
            "  --probed-threads hide|show  probed's own threads and code in a target, in\n"
            "                         samples (default hide: the job's own only)\n"
            "  --group NAME           group owning the socket (default probed, if it exists)\n"
            "  --stub PATH            the library eval loads into targets (default: next to\n"
            "                         probed, else %s/libprobed-stub.so)\n"
            "  --nvml PATH|off        NVIDIA's libnvidia-ml.so.1 for GPU readings (default: the\n"
            "                         loader's path, then the driver's folders; off: none)\n"
            "  --version              print the version and exit\n"
            "Options override %s (see probed.conf(5)); SIGHUP re-reads it.\n",
            CONFIG_DEFAULT_PATH, PROBED_STUB_DIR, CONFIG_DEFAULT_PATH);
}

/* The stub next to this executable (a build tree), else the installed one. */
static const char *default_stub_path(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 32);
    char *slash;

    if (n > 0) {
        buf[n] = '\0';
        slash = strrchr(buf, '/');
        if (slash) {
            strcpy(slash + 1, "libprobed-stub.so");
            if (access(buf, R_OK) == 0)
                return buf;
        }
    }
    snprintf(buf, size, "%s/libprobed-stub.so", PROBED_STUB_DIR);
    return buf;
}

/* Command-line options that set a config key, applied after the file. */
static const struct {
    const char *option;
    enum config_key key;
} option_keys[] = {
    {"socket", CFG_SOCKET},
    {"db", CFG_DATABASE},
    {"rate", CFG_SAMPLE_RATE},
    {"retention", CFG_RETENTION},
    {"max-db-size", CFG_MAX_DB_SIZE},
    {"query-timeout", CFG_QUERY_TIMEOUT},
    {"metrics", CFG_METRICS_ADDRESS},
    {"memory-interval", CFG_MEMORY_INTERVAL},
    {"allocation-interval", CFG_ALLOCATION_INTERVAL},
    {"metrics-cmdline", CFG_METRICS_CMDLINE},
    {"write-backlog", CFG_WRITE_BACKLOG},
    {"probed-threads", CFG_PROBED_THREADS},
    {"group", CFG_GROUP},
    {"stub", CFG_STUB},
    {"nvml", CFG_NVML},
};
#define N_OPTION_KEYS (sizeof(option_keys) / sizeof(option_keys[0]))

static int parse_args(int argc, char **argv, struct options *o)
{
    struct option longopts[N_OPTION_KEYS + 5];
    const char *values[N_OPTION_KEYS] = {0};
    struct errbuf err;
    int c, idx;

    for (size_t i = 0; i < N_OPTION_KEYS; i++)
        longopts[i] = (struct option){option_keys[i].option, required_argument, NULL, 0};
    longopts[N_OPTION_KEYS] = (struct option){"config", required_argument, NULL, 'c'};
    longopts[N_OPTION_KEYS + 1] = (struct option){"foreground", no_argument, NULL, 'f'};
    longopts[N_OPTION_KEYS + 2] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[N_OPTION_KEYS + 3] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[N_OPTION_KEYS + 4] = (struct option){NULL, 0, NULL, 0};
    memset(o, 0, sizeof(*o));
    config_init(&o->cfg);
    o->config_path = CONFIG_DEFAULT_PATH;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case 0:
            values[idx] = optarg;
            break;
        case 'c':
            o->config_path = optarg;
            o->config_explicit = true;
            break;
        case 'f':
            o->foreground = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("probed %s\n", PROBED_VERSION);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return -1;
    }
    if (config_load(&o->cfg, o->config_path, o->config_explicit, false, NULL, 0, &err) < 0) {
        fprintf(stderr, "probed: %s\n", err.msg);
        return -1;
    }
    for (size_t i = 0; i < N_OPTION_KEYS; i++) {
        if (values[i] &&
            config_set(&o->cfg, option_keys[i].key, values[i], false, true, &err) < 0) {
            fprintf(stderr, "probed: --%s: %s\n", option_keys[i].option, err.msg);
            return -1;
        }
    }
    return 0;
}

/* mkdir -p of @path's directory. */
static int make_parent(const char *path, mode_t mode)
{
    char *copy = strdup(path), *dir;
    int r = 0;

    if (!copy)
        return -ENOMEM;
    dir = dirname(copy);
    for (char *p = dir + 1; r == 0 && *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, mode) < 0 && errno != EEXIST)
            r = -errno;
        *p = '/';
    }
    if (r == 0 && mkdir(dir, mode) < 0 && errno != EEXIST)
        r = -errno;
    free(copy);
    return r;
}

/* A target the store says was being sampled: the same process again, or recorded as ended. */
static void resume_one(int64_t id, int32_t pid, int64_t start_time, int32_t rate_hz, unsigned flags,
                       void *arg)
{
    struct targets *reg = arg;
    struct attach_opts o = {.rate_hz = (uint32_t)(rate_hz > 0 ? rate_hz : 100),
                            .resume_id = id,
                            .follow_children = flags & STORE_FOLLOW_CHILDREN,
                            .allocation_tracking = flags & STORE_ALLOCATION_TRACKING,
                            .torch_tracing = flags & STORE_TORCH_TRACING,
                            .catching = flags & STORE_CATCHING,
                            .native = flags & STORE_NATIVE,
                            .nccl = flags & STORE_NCCL};
    struct pyf_err e = {0};
    int64_t now_start = -1;
    struct ob_half *h;

    if (procfs_start_time(pid, &now_start) == 0 && now_start == start_time &&
        targets__attach(reg, pid, &o, NULL, &e) == 0) {
        log_msg(LOG_INFO, "resumed sampling pid %d (attached before a restart)", pid);
        return;
    }
    h = outbox__lock(reg->ob);
    ob_half__end(h, id, real_ns(), "exited (while probed was not running)");
    outbox__unlock(reg->ob);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_msg(LOG_INFO, "signal %d: shutting down", (int)sig);
    event_base_loopbreak(arg);
}

struct daemon {
    struct options *opts;
    struct store *store;
    struct outbox *ob;
    struct targets *reg;
    struct sampler *sampler;
    struct follower *follower;
    struct writer writer;
    struct meter meter;
    struct pusher pusher; /* profiles to pyroscope_url */
    struct exits *exits;  /* NULL: no process connector here */
    struct event_base *base;
    struct event *sigterm, *sigint, *sighup;
    struct api *api;
};

/* SIGHUP: probed.conf again; a bad file changes nothing, keys needing a restart are named. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;
    char restart[256];
    struct errbuf err;

    (void)sig;
    (void)what;
    if (config_load(&d->opts->cfg, d->opts->config_path, false, true, restart, sizeof(restart),
                    &err) < 0) {
        log_msg(LOG_ERR, "reload: %s (settings unchanged)", err.msg);
        return;
    }
    if (api__config_changed(d->api, &err) < 0)
        log_msg(LOG_ERR, "reload: %s", err.msg);
    log_msg(LOG_INFO, "reloaded %s%s%s", d->opts->config_path,
            restart[0] ? "; needs a restart to change: " : "", restart);
}

/* Debug files of libraries without symbols (Ubuntu's libc), asked of the servers the daemon's
 * DEBUGINFOD_URLS names (as for gdb and perf), in the background; without it, none. */
static void start_debuginfod(struct targets *reg)
{
    const char *urls = getenv("DEBUGINFOD_URLS");
    struct pyf_err e;

    if (!urls || !urls[0])
        return;
    if (pyf_symcache__fetch_debuginfo(reg->symbols, &e) == 0)
        log_msg(LOG_INFO, "debuginfod: debug files of libraries without symbols are asked of %s",
                urls);
    else
        log_msg(LOG_WARN, "%s", e.msg);
}

static int start(struct daemon *d, struct options *o)
{
    const char *db_path = o->cfg.text[CFG_DATABASE], *socket_path = o->cfg.text[CFG_SOCKET];
    struct api_config acfg = {
        .socket_path = socket_path,
        .db_path = db_path,
        .stub_path = o->cfg.text[CFG_STUB][0] ? o->cfg.text[CFG_STUB]
                                              : default_stub_path(o->stub_buf, sizeof(o->stub_buf)),
        .query_max_rows = 1000000,
        .max_rate_hz = CONFIG_RATE_MAX_HZ,
        .config = &o->cfg};
    struct errbuf err;
    struct group *gr = getgrnam(o->cfg.text[CFG_GROUP]);
    int64_t next_id = 1;
    int r;

    d->opts = o;
    if ((r = make_parent(db_path, 0750)) < 0 || (r = make_parent(socket_path, 0755)) < 0)
        return log_errno(LOG_ERR, r, "creating the directories of %s and %s", db_path, socket_path);
    r = store_open(db_path, &d->store, &err);
    if (r == 0)
        r = store__next_target_id(d->store, &next_id, &err);
    if (r < 0) {
        log_msg(LOG_ERR, "database: %s", err.msg);
        return r;
    }
    if ((r = outbox_new(OUTBOX_SAMPLES, &d->ob)) < 0 ||
        (r = targets_new(d->ob, next_id, &d->reg)) < 0 ||
        (r = sampler_new(d->reg, d->ob, &o->cfg, &d->sampler)) < 0 ||
        (r = follower_new(d->reg, &d->follower)) < 0)
        return log_errno(LOG_ERR, r, "allocating the sampler");
    start_debuginfod(d->reg);
    if (store__live_targets(d->store, resume_one, d->reg, &err) < 0)
        log_msg(LOG_WARN, "not resuming targets: %s", err.msg);
    d->writer = (struct writer){
        .flush_ns = 1000000000LL, .config = &o->cfg, .store = d->store, .ob = d->ob, .reg = d->reg};
    d->meter = (struct meter){.reg = d->reg, .ob = d->ob, .cfg = &o->cfg};
    d->pusher.config = &o->cfg;
    d->pusher.db_path = db_path;
    d->pusher.reg = d->reg;
    d->pusher.writer = &d->writer;
    if ((r = sampler_start(d->sampler)) < 0 || (r = writer_start(&d->writer)) < 0 ||
        (r = meter_start(&d->meter)) < 0 || (r = follower_start(d->follower)) < 0 ||
        (r = pusher_start(&d->pusher)) < 0)
        return log_errno(LOG_ERR, r, "starting threads");
    exits_start(d->reg, d->ob, &d->exits); /* without it, exits are not recorded (logged) */
    d->base = event_base_new();
    if (!d->base)
        return log_errno(LOG_ERR, -ENOMEM, "event_base_new");
    d->sigterm = evsignal_new(d->base, SIGTERM, on_signal, d->base);
    d->sigint = evsignal_new(d->base, SIGINT, on_signal, d->base);
    d->sighup = evsignal_new(d->base, SIGHUP, on_reload, d);
    if (!d->sigterm || !d->sigint || !d->sighup || evsignal_add(d->sigterm, NULL) < 0 ||
        evsignal_add(d->sigint, NULL) < 0 || evsignal_add(d->sighup, NULL) < 0)
        return log_errno(LOG_ERR, -EIO, "installing signal handlers");
    return api_new(d->base, &acfg, gr ? (int)gr->gr_gid : -1,
                   &(struct api_parts){.reg = d->reg,
                                       .sampler = d->sampler,
                                       .follower = d->follower,
                                       .writer = &d->writer,
                                       .meter = &d->meter,
                                       .pusher = &d->pusher,
                                       .exits = d->exits},
                   &d->api);
}

static void stop(struct daemon *d)
{
    api_free(d->api);
    if (d->sigterm)
        event_free(d->sigterm);
    if (d->sigint)
        event_free(d->sigint);
    if (d->sighup)
        event_free(d->sighup);
    if (d->base)
        event_base_free(d->base);
    meter_stop(&d->meter);
    pusher_stop(&d->pusher); /* before the targets it reads are freed */
    exits_stop(d->exits);    /* before the writer: its last rows are flushed */
    follower_free(d->follower);
    sampler_free(d->sampler); /* targets stay "live" in the store: a restart resumes them */
    writer_stop(&d->writer);  /* after the sampler: its last samples are flushed */
    targets_free(d->reg);     /* after the writer, which tells it of samples it could not write */
    outbox_free(d->ob);
    store_free(d->store);
}

/* The soft open-files limit up to the hard one: each target holds fds (its threads' stat
 * files, perf events, its binaries), and so does each client. 1024, the usual soft limit, ran
 * out with 18 targets of 70 threads. Threads' /proc files kept open may take half of it (past
 * that they are opened at each read): the rest is for clients, perf events and the database
 * (a 300-thread target under a limit of 256 took every fd, and no client could connect). */
static void raise_fd_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t soft = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
            log_errno(LOG_WARN, -errno, "raising the open-files limit to %llu",
                      (unsigned long long)rl.rlim_max);
            rl.rlim_cur = soft;
        }
    }
    pyf_keep_files_max(rl.rlim_cur == RLIM_INFINITY ? (size_t)1 << 20 : (size_t)rl.rlim_cur / 2);
}

int main(int argc, char **argv)
{
    struct daemon d = {0};
    struct options o;
    struct errbuf err;
    int r;

    if (parse_args(argc, argv, &o) < 0)
        return 2;
    /* A target's buffers (its stacks' frames: 0.8 MB at first) are large blocks that whichever
     * worker attaches allocates and whichever detaches frees. glibc raises its mmap threshold
     * to the largest such block freed, after which they come from the workers' heaps, where
     * freed memory stays (16 targets attached and detached 60 times: 7 -> 33-41 MB). A fixed
     * threshold keeps them mmapped, returned whole at detach. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a database past the file-size limit: a write error, not death */
    if (sqlmem_install(QUERY_ALL_MEMORY_BYTES) < 0) { /* before any SQLite call */
        log_msg(LOG_ERR, "SQLite was initialised before its allocator could be set");
        return 1;
    }
    if (evthread_use_pthreads() < 0) {
        log_msg(LOG_ERR, "libevent has no pthreads support");
        return 1;
    }
    if (!o.foreground && daemon(0, 1) < 0) {
        log_errno(LOG_ERR, -errno, "daemon()");
        return 1;
    }
    raise_fd_limit();
    if (runstate_start(&err) < 0) /* before any target is read */
        log_msg(LOG_WARN, "threads' run state comes from /proc: %s", err.msg);
    r = start(&d, &o);
    if (r == 0) {
        log_msg(LOG_INFO, "serving on %s, database %s", o.cfg.text[CFG_SOCKET],
                o.cfg.text[CFG_DATABASE]);
        event_base_dispatch(d.base);
    }
    stop(&d);
    runstate_stop(); /* after the last target is freed */
    config_destroy(&o.cfg);
    return r < 0 ? 1 : 0;
}
