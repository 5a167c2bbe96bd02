/* route_ops.c - /v1/status and /v1/config: the daemon's own state and settings. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "push/pyroscope.h"
#include "api/server.h"
#include "clock.h"
#include "common/procfs.h"
#include "log.h"
#include "query/sqlmem.h"
#include "sample/runstate.h"

/* Where GPU readings come from (NVML) and the devices of the latest, or why there are none. */
static json_t *gpu_json(struct meter *m)
{
    struct gpu_snapshot *s = malloc(sizeof(*s));
    struct meter_gpu_status st;
    json_t *j, *devices = json_array();

    meter__gpu(m, s, &st, NULL);
    j = json_pack("{s:s, s:I, s:I, s:I}", "source", st.reading ? "nvml" : "none", "readings",
                  (json_int_t)st.readings, "failures", (json_int_t)st.failures, "xid_errors",
                  (json_int_t)st.xids);
    if (!st.reading)
        json_object_set_new(j, "error",
                            json_string(st.error[0] ? st.error
                                                    : "not read yet (memory_interval 0 reads"
                                                      " no GPU)"));
    if (st.driver[0]) {
        json_object_set_new(j, "driver", json_string(st.driver));
        json_object_set_new(j, "library", json_string(st.library));
    }
    for (size_t i = 0; s && st.reading && i < s->n_devices; i++) {
        const struct gpu_device *d = &s->devices[i];
        json_t *dj = json_pack("{s:i, s:s, s:s, s:I, s:I}", "gpu", d->index, "name", d->name,
                               "uuid", d->uuid, "memory_used", (json_int_t)d->mem_used_bytes,
                               "memory_total", (json_int_t)d->mem_total_bytes);
        if (d->mig >= 0)
            json_object_set_new(dj, "mig", json_integer(d->mig));
        if (d->util_pct >= 0)
            json_object_set_new(dj, "util_pct", json_integer(d->util_pct));
        json_array_append_new(devices, dj);
    }
    json_object_set_new(j, "devices", devices);
    free(s);
    return j;
}

/* Where NCCL's calls come from (uprobes), or why they are not recorded. */
static json_t *nccl_json(struct meter *m)
{
    struct meter_nccl_status st;
    json_t *j;

    meter__nccl(m, &st);
    j = json_pack("{s:s, s:I, s:I, s:I, s:I}", "source", st.watching ? "uprobes" : "none",
                  "processes", (json_int_t)st.stats.processes, "calls", (json_int_t)st.stats.calls,
                  "lost", (json_int_t)(st.stats.lost + st.dropped), "unknown",
                  (json_int_t)st.stats.unknown);
    if (!st.watching)
        json_object_set_new(j, "error", json_string(st.error[0] ? st.error : "not loaded yet"));
    return j;
}

#define ADDRESSES_MAX 64 /* of the node's addresses in the status */
#define NETNS_MAX 16     /* the targets' own network namespaces read for it */

/* @addr (a struct in_addr or in6_addr) as text, added to the array @ctx unless there. */
static void add_address(int family, const void *addr, void *ctx)
{
    json_t *out = ctx, *a;
    char text[INET6_ADDRSTRLEN];
    bool seen = false;
    size_t k;

    if (json_array_size(out) >= ADDRESSES_MAX || !inet_ntop(family, addr, text, sizeof(text)))
        return;
    json_array_foreach(out, k, a)
    {
        seen |= strcmp(json_string_value(a), text) == 0;
    }
    if (!seen)
        json_array_append_new(out, json_string(text));
}

/* The addresses of the network namespaces of @p's targets that are not the daemon's: a
 * container's, a Kubernetes pod's, where NCCL's RAS names a rank by its pod's address. Read
 * from each one's /proc/PID/net (procfs_net_addresses): no namespace is joined. */
static void target_addresses(struct api *a, const struct peer *p, json_t *out)
{
    struct targets_filter f = peer_filter(p);
    struct target_info *infos = NULL;
    ino_t seen[NETNS_MAX + 1];
    size_t n, n_seen = 0;
    struct stat st;

    if (stat("/proc/self/ns/net", &st) < 0)
        return;
    seen[n_seen++] = st.st_ino; /* the daemon's own: the node's addresses, listed already */
    for (size_t cap = 16;; cap = n + 16) { /* the count may grow between two copies */
        struct target_info *more = realloc(infos, cap * sizeof(*infos));
        if (!more)
            goto out;
        infos = more;
        if ((n = targets__copy(a->parts.reg, &f, infos, cap)) <= cap)
            break;
    }
    for (size_t i = 0; i < n && n_seen <= NETNS_MAX; i++) {
        char path[64];
        bool known = false;
        int64_t start = 0;

        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)infos[i].pid);
        /* still that target, not a later process of the pid (another user's namespace) */
        if (infos[i].ended_ns || stat(path, &st) < 0 ||
            procfs_start_time(infos[i].pid, &start) < 0 || start != infos[i].start_time)
            continue;
        for (size_t k = 0; k < n_seen; k++)
            known |= seen[k] == st.st_ino;
        if (known)
            continue;
        seen[n_seen++] = st.st_ino;
        procfs_net_addresses(infos[i].pid, add_address, out);
    }
out:
    free(infos);
}

/* The node's addresses but loopback's (getifaddrs), then those of its targets' own network
 * namespaces that @p may see, each once: NCCL's RAS names a rank's host by the address its job
 * uses, which `probectl hang` joins to the node's name. */
static json_t *addresses_json(struct api *a, const struct peer *p)
{
    json_t *out = json_array();
    struct ifaddrs *ifs = NULL;

    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK))
                continue;
            if (i->ifa_addr->sa_family == AF_INET)
                add_address(AF_INET, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr, out);
            else if (i->ifa_addr->sa_family == AF_INET6)
                add_address(AF_INET6, &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, out);
        }
        freeifaddrs(ifs);
    }
    target_addresses(a, p, out);
    return out;
}

int status_get(struct api *a, const struct request *rq)
{
    struct writer *w = a->parts.writer;
    struct connlimit_stats c;
    struct runstate_stats rs;
    char host[256] = "";

    connlimit__stats(a->clients, &c);
    json_t *body = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:i, "
        "s:I, s:I, s:I, s:I}}",
        "version", PROBED_VERSION, "database", a->cfg.db_path, "requests", (json_int_t)a->requests,
        "queries", (json_int_t)a->queries, "query_errors", (json_int_t)a->query_errors, "flushes",
        (json_int_t)w->flushes, "write_errors", (json_int_t)w->write_errors, "samples_written",
        (json_int_t)w->samples_written, "samples_dropped", (json_int_t)w->samples_dropped,
        "samples_pending", (json_int_t)w->backlog_samples, "db_bytes", (json_int_t)w->db_bytes,
        "db_cache_bytes", (json_int_t)w->db_cache_bytes, "query_memory_bytes",
        (json_int_t)sqlmem_queries_bytes(), "connections", "open", c.open, "refused_over",
        (json_int_t)c.refused_over, "cut_slow", (json_int_t)c.cut_slow, "cut_user",
        (json_int_t)c.cut_user, "accept_errors", (json_int_t)c.accept_errors);
    /* where the sampler learns whether threads run: the eBPF board, or /proc (and why) */
    runstate_stats(&rs);
    json_object_set_new(body, "run_state",
                        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "source",
                                  rs.running ? "ebpf" : "proc", "error", rs.error, "threads",
                                  (json_int_t)rs.watched, "watches", (json_int_t)rs.watches,
                                  "exited", (json_int_t)rs.exited, "full", (json_int_t)rs.full));
    json_object_set_new(body, "gpu", gpu_json(a->parts.meter));
    json_object_set_new(body, "nccl", nccl_json(a->parts.meter));
    if (a->parts.pusher) /* profiles pushed to pyroscope_url */
        json_object_set_new(body, "pyroscope", pusher_json(a->parts.pusher));
    /* the daemon's wall clock: `probectl hang` aligns its instant on every node with it */
    json_object_set_new(body, "now_ns", json_integer((json_int_t)real_ns()));
    /* which node answered: the web view's targets, a transport's far end */
    if (gethostname(host, sizeof(host) - 1) == 0)
        json_object_set_new(body, "host", json_string(host));
    json_object_set_new(body, "addresses", addresses_json(a, rq->peer));
    return reply_json(rq->req, 200, body);
}

int config_get(struct api *a, const struct request *rq)
{
    char path[CONFIG_VALUE_MAX];

    pthread_mutex_lock(&a->cfg.config->lock);
    snprintf(path, sizeof(path), "%s", a->cfg.config->path);
    pthread_mutex_unlock(&a->cfg.config->lock);
    return reply_json(
        rq->req, 200,
        json_pack("{s:s, s:o}", "file", path, "settings", config_json(a->cfg.config)));
}

/* PUT /v1/config {"key": "sample_rate", "value": "200"} (root): checked, then applied; a
 * refused change changes nothing. */
int config_put(struct api *a, const struct request *rq)
{
    const char *name = json_string_value(json_object_get(rq->body, "key"));
    const char *value = json_string_value(json_object_get(rq->body, "value"));
    int k = name ? config_key_of(name) : -1;
    char now[CONFIG_VALUE_MAX];
    struct errbuf err;
    int64_t num;

    if (!name || !value)
        return reply_error(rq->req, 400, "expected {\"key\": \"...\", \"value\": \"...\"}");
    if (k < 0)
        return reply_error(rq->req, 400, "unknown setting '%s' (probectl config lists them)", name);
    /* The metrics address is tried before it is stored: a port in use refuses the change. */
    if (config_check((enum config_key)k, value, &num, &err) < 0 ||
        (k == CFG_METRICS_ADDRESS && metrics__listen(a->metrics, value, &err) < 0) ||
        config_set(a->cfg.config, (enum config_key)k, value, true, false, &err) < 0)
        return reply_error(rq->req, 400, "%s", err.msg);
    config_text(a->cfg.config, (enum config_key)k, now, sizeof(now));
    api__config_changed(a, &err);
    log_msg(LOG_INFO, "config: %s = %s (uid %u)", config_key_name((enum config_key)k), now,
            (unsigned)rq->peer->uid);
    return config_get(a, rq);
}
