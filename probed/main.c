/*
 * main.c - probed, the daemon: parses options, opens the store, starts the sampler and
 * writer threads and serves the API until SIGTERM/SIGINT.
 *
 *   probed [--socket PATH] [--db PATH] [--foreground] [--rate HZ] [--retention DUR]
 *          [--max-db-size BYTES] [--query-timeout DUR] [--group NAME]
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "procfs.h"
#include "outbox.h"
#include "sampler.h"
#include "store.h"
#include "units.h"
#include "writer.h"

#define DEFAULT_SOCKET "/run/probed/probed.sock"
#define DEFAULT_DB "/var/lib/probed/probed.db"
#define OUTBOX_SAMPLES (1 << 18) /* samples per flush: 64 targets x 100 Hz x 40 threads */

struct options {
    const char *socket_path, *db_path, *group, *stub_path;
    char stub_buf[4096];
    bool foreground;
    uint32_t rate_hz;
    int64_t retention_ns, max_db_bytes, query_time_ms;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: probed [options]\n"
            "  --socket PATH        API socket (default %s)\n"
            "  --db PATH            SQLite database (default %s)\n"
            "  --foreground         do not detach from the terminal\n"
            "  --rate HZ            default sampling rate of an attach (default 100)\n"
            "  --retention DUR      delete samples older than this (default 7d; 0: keep)\n"
            "  --max-db-size SIZE   delete the oldest samples above this (default 1G; 0: none)\n"
            "  --query-timeout DUR  interrupt queries running longer (default 10s)\n"
            "  --group NAME         group owning the socket (default probed, if it exists)\n"
            "  --stub PATH          the library eval loads into targets (default: next to\n"
            "                       probed, else %s/libprobed-stub.so)\n",
            DEFAULT_SOCKET, DEFAULT_DB, PROBED_STUB_DIR);
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

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 's'},
        {"db", required_argument, NULL, 'd'},
        {"foreground", no_argument, NULL, 'f'},
        {"rate", required_argument, NULL, 'r'},
        {"retention", required_argument, NULL, 'R'},
        {"max-db-size", required_argument, NULL, 'M'},
        {"query-timeout", required_argument, NULL, 'q'},
        {"group", required_argument, NULL, 'g'},
        {"stub", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    *o = (struct options){.socket_path = DEFAULT_SOCKET,
                          .db_path = DEFAULT_DB,
                          .rate_hz = 100,
                          .retention_ns = 7 * 86400e9,
                          .max_db_bytes = 1LL << 30,
                          .query_time_ms = 10000,
                          .group = "probed"};
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int64_t v;
        switch (c) {
        case 's':
            o->socket_path = optarg;
            break;
        case 'd':
            o->db_path = optarg;
            break;
        case 'f':
            o->foreground = true;
            break;
        case 'g':
            o->group = optarg;
            break;
        case 'S':
            o->stub_path = optarg;
            break;
        case 'r':
            v = atoll(optarg);
            if (v < 1 || v > 10000) {
                fprintf(stderr, "probed: --rate must be 1..10000 Hz\n");
                return -1;
            }
            o->rate_hz = (uint32_t)v;
            break;
        case 'R':
        case 'q':
            v = units_duration_ns(optarg);
            if (v < 0 || (c == 'q' && v < 1000000)) {
                fprintf(stderr, "probed: bad duration '%s' (e.g. 30s, 5m, 2h, 7d)\n", optarg);
                return -1;
            }
            if (c == 'R')
                o->retention_ns = v;
            else
                o->query_time_ms = v / 1000000;
            break;
        case 'M':
            o->max_db_bytes = units_size_bytes(optarg);
            if (o->max_db_bytes < 0) {
                fprintf(stderr, "probed: bad size '%s' (e.g. 512M, 2G)\n", optarg);
                return -1;
            }
            break;
        case 'h':
            usage(stdout);
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
    if (!o->stub_path)
        o->stub_path = default_stub_path(o->stub_buf, sizeof(o->stub_buf));
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

struct resume_ctx {
    struct sampler *sampler;
    struct outbox *ob;
};

/* A target the store says was being sampled: the same process again, or recorded as ended. */
static void resume_one(int64_t id, int32_t pid, int64_t start_time, int32_t rate_hz,
                       bool follow_children, void *arg)
{
    struct resume_ctx *c = arg;
    struct pyf_err e = {0};
    struct target *t = NULL;
    int64_t now_start = -1;

    if (procfs_start_time(pid, &now_start) == 0 && now_start == start_time &&
        target_new(pid, (uint32_t)(rate_hz > 0 ? rate_hz : 100), &t, &e) == 0) {
        t->id = id;
        t->resumed = true;
        t->follow_children = follow_children;
        if (sampler__add(c->sampler, t) == 0) {
            log_msg(LOG_INFO, "resumed sampling pid %d (attached before a restart)", pid);
            return;
        }
        target_free(t);
    }
    struct ob_half *h = outbox__lock(c->ob);
    ob_half__end(h, id, real_ns(), "exited (while probed was not running)");
    outbox__unlock(c->ob);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_msg(LOG_INFO, "signal %d: shutting down", (int)sig);
    event_base_loopbreak(arg);
}

struct daemon {
    struct store *store;
    struct outbox *ob;
    struct sampler *sampler;
    struct writer writer;
    struct event_base *base;
    struct event *sigterm, *sigint;
    struct api *api;
};

static int start(struct daemon *d, const struct options *o)
{
    struct api_config acfg = {.socket_path = o->socket_path,
                              .db_path = o->db_path,
                              .stub_path = o->stub_path,
                              .query_time_ms = o->query_time_ms,
                              .query_max_rows = 1000000,
                              .default_rate_hz = o->rate_hz,
                              .max_rate_hz = 10000};
    struct resume_ctx rc;
    struct store_err err;
    struct group *gr = getgrnam(o->group);
    int64_t next_id = 1;
    int r;

    if ((r = make_parent(o->db_path, 0750)) < 0 || (r = make_parent(o->socket_path, 0755)) < 0)
        return log_errno(LOG_ERR, r, "creating the directories of %s and %s", o->db_path,
                         o->socket_path);
    r = store_open(o->db_path, &d->store, &err);
    if (r == 0)
        r = store__next_target_id(d->store, &next_id, &err);
    if (r < 0) {
        log_msg(LOG_ERR, "database: %s", err.msg);
        return r;
    }
    if ((r = outbox_new(OUTBOX_SAMPLES, &d->ob)) < 0 || (r = sampler_new(d->ob, &d->sampler)) < 0)
        return log_errno(LOG_ERR, r, "allocating the sampler");
    rc = (struct resume_ctx){.sampler = d->sampler, .ob = d->ob};
    if (store__live_targets(d->store, resume_one, &rc, &err) < 0)
        log_msg(LOG_WARN, "not resuming targets: %s", err.msg);
    d->writer = (struct writer){.cfg = {.flush_ns = 1000000000LL,
                                        .retention_ns = o->retention_ns,
                                        .max_db_bytes = o->max_db_bytes},
                                .store = d->store,
                                .ob = d->ob,
                                .sampler = d->sampler};
    if ((r = sampler_start(d->sampler)) < 0 || (r = writer_start(&d->writer)) < 0)
        return log_errno(LOG_ERR, r, "starting threads");
    d->base = event_base_new();
    if (!d->base)
        return log_errno(LOG_ERR, -ENOMEM, "event_base_new");
    d->sigterm = evsignal_new(d->base, SIGTERM, on_signal, d->base);
    d->sigint = evsignal_new(d->base, SIGINT, on_signal, d->base);
    if (!d->sigterm || !d->sigint || evsignal_add(d->sigterm, NULL) < 0 ||
        evsignal_add(d->sigint, NULL) < 0)
        return log_errno(LOG_ERR, -EIO, "installing signal handlers");
    return api_new(d->base, &acfg, gr ? (int)gr->gr_gid : -1, d->sampler, &d->writer, next_id,
                   &d->api);
}

static void stop(struct daemon *d)
{
    api_free(d->api);
    if (d->sigterm)
        event_free(d->sigterm);
    if (d->sigint)
        event_free(d->sigint);
    if (d->base)
        event_base_free(d->base);
    sampler_free(d->sampler); /* targets stay "live" in the store: a restart resumes them */
    writer_stop(&d->writer);  /* after the sampler: its last samples are flushed */
    outbox_free(d->ob);
    store_free(d->store);
}

int main(int argc, char **argv)
{
    struct daemon d = {0};
    struct options o;
    int r;

    if (parse_args(argc, argv, &o) < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    if (evthread_use_pthreads() < 0) {
        log_msg(LOG_ERR, "libevent has no pthreads support");
        return 1;
    }
    if (!o.foreground && daemon(0, 1) < 0) {
        log_errno(LOG_ERR, -errno, "daemon()");
        return 1;
    }
    r = start(&d, &o);
    if (r == 0) {
        log_msg(LOG_INFO, "serving on %s, database %s", o.socket_path, o.db_path);
        event_base_dispatch(d.base);
    }
    stop(&d);
    return r < 0 ? 1 : 0;
}
