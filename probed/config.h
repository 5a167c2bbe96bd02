/*
 * config.h - probed's settings: their defaults, probed.conf, the command line, live changes.
 *
 * Every setting is a key in config.c's table, with its default, how its value is checked and
 * whether it can change while the daemon runs. A value is kept as text (what `probectl
 * config` shows) and, for numbers, parsed into an atomic that any thread reads without a lock.
 * Precedence: defaults < probed.conf < command line. A change (API, or a reload on SIGHUP) is
 * checked first and changes nothing when refused; a reload keeps what the command line set.
 * Threads: config_num() from any thread; config_set/load/text under the config's own lock.
 * Failure: -EINVAL with "key: why" in @err.
 */
#ifndef PROBED_CONFIG_H
#define PROBED_CONFIG_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errbuf.h"

#define CONFIG_DEFAULT_PATH "/etc/probed/probed.conf"
/* The highest sampling rate: past what the machine reads back to back (bench/daemon.py
 * --load: ~43 k ticks a second of a 3-thread target here), so that the limit is the machine's,
 * shown as ticks kept and late, not a number of ours. One sampler thread: one core at most. */
#define CONFIG_RATE_MAX_HZ 100000
#define CONFIG_RATE_MAX_TEXT "100000"
/* With --native, the kernel copies a stack at each sample in the target's own time (~6 us
 * with eBPF here: 6 % of the target at 10 kHz): no faster than this. */
#define CONFIG_NATIVE_RATE_MAX_HZ 10000
#define CONFIG_VALUE_MAX 256

enum config_key {
    CFG_SOCKET,              /* path of the API socket (restart) */
    CFG_DATABASE,            /* path of the SQLite database (restart) */
    CFG_GROUP,               /* group that owns the socket (restart) */
    CFG_STUB,                /* libprobed-stub.so; "" = next to probed, else the installed one */
    CFG_SAMPLE_RATE,         /* Hz of an attach that does not say */
    CFG_RETENTION,           /* ns; 0 = keep */
    CFG_MAX_DB_SIZE,         /* bytes; 0 = no limit */
    CFG_QUERY_TIMEOUT,       /* ns */
    CFG_METRICS_ADDRESS,     /* host:port of /metrics, or "off" */
    CFG_MEMORY_INTERVAL,     /* ns between memory/CPU rows of a target; 0 = none */
    CFG_ALLOCATION_INTERVAL, /* ns between allocation snapshots while tracking; 0 = on request */
    CFG_METRICS_CMDLINE,     /* /metrics cmd label: "script" (program and script) or "full" */
    CFG_WRITE_BACKLOG,       /* bytes of batches kept while the database fails; 0 = none */
    CFG_NVML,                /* libnvidia-ml.so.1: "" = search, "off" = GPUs not read (restart) */
    CFG_PROBED_THREADS,      /* the stub's threads and frames in samples: 0 hide, 1 show */
    CFG_PYROSCOPE_URL,       /* a Pyroscope server's http(s) URL profiles are pushed to; "" off */
    CFG_PYROSCOPE_INTERVAL,  /* ns between pushes */
    CFG_PYROSCOPE_APP,       /* the application name of the pushed profiles */
    CFG_NCCL_CALLS,          /* NCCL's calls of targets through uprobes: 0 off, 1 on */
    CFG_N
};

struct config {
    pthread_mutex_t lock; /* guards text and pinned */
    char text[CFG_N][CONFIG_VALUE_MAX];
    atomic_int_fast64_t num[CFG_N]; /* numeric keys: the parsed value */
    bool pinned[CFG_N];             /* set on the command line: reloads leave it */
    char path[CONFIG_VALUE_MAX];    /* the probed.conf read, "" if none */
};

void config_init(struct config *c); /* every key at its default */
void config_destroy(struct config *c);

/* The key named @name (also with a "probed." prefix), or -1. */
int config_key_of(const char *name);
const char *config_key_name(enum config_key k);
bool config_key_live(enum config_key k);

/* Checks @value for key @k without storing it; @num receives a number key's value. */
int config_check(enum config_key k, const char *value, int64_t *num, struct errbuf *err);

/* Checks and stores. @live: the daemon runs, so keys that need a restart are refused.
 * @pin: the command line set it. */
int config_set(struct config *c, enum config_key k, const char *value, bool live, bool pin,
               struct errbuf *err);

/* Reads "key = value" lines (# comments) from @path. Every line is checked before any is
 * applied. @live: a reload; keys that need a restart and differ are left, and listed in
 * @restart_needed (may be NULL). @must_exist: a missing file is an error. */
int config_load(struct config *c, const char *path, bool must_exist, bool live,
                char *restart_needed, size_t rn_len, struct errbuf *err);

int64_t config_num(struct config *c, enum config_key k);
void config_text(struct config *c, enum config_key k, char *buf, size_t size);

/* [{key, value, default, live, doc}], for GET /v1/config. */
json_t *config_json(struct config *c);

#endif
