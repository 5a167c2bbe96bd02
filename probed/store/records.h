/*
 * records.h - the rows written outside the writer thread: the evals audit, allocation
 * snapshots, the torch trace's drains and the crashes `catch` sees, each on a connection of the
 * calling worker's own (rare, or batched once a second), and the flags a restarted daemon resumes
 * from (allocation_tracking, torch_tracing). With store.c, the only code that writes the schema.
 * Threads: any worker; SQLite's locking serialises them with the writer (5 s busy wait).
 * Memory: nothing kept. Failure: -EIO with what failed and SQLite's reason in @err.
 */
#ifndef PROBED_RECORDS_H
#define PROBED_RECORDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

/* One row of the evals table. */
struct eval_audit {
    int64_t ts_ns;
    uid_t uid; /* who asked */
    pid_t pid;
    int64_t start_time;
    uid_t target_uid;
    const char *mode, *code, *status;
    size_t output_bytes;
    double elapsed_ms;
    bool injected; /* the stub was loaded by this call */
};

int records_eval(const char *db_path, const struct eval_audit *a, struct errbuf *err);

/* A snapshot's @rows ([function, file, line, allocated_bytes, allocations, live_bytes,
 * live_blocks], checked by the caller) into allocations, in one transaction. */
int records_allocations(const char *db_path, int64_t target_id, int64_t ts_ns, json_t *rows,
                        struct errbuf *err);
/* Tracking is (no longer) on for @target_id. */
int records_allocation_tracking(const char *db_path, int64_t target_id, bool on,
                                struct errbuf *err);

/* The number the next profile (torch_profiles), or @snapshot the next GPU memory snapshot
 * (gpu_memory), of @target_id takes: 1 + the last. */
int records_torch_next(const char *db_path, int64_t target_id, bool snapshot, int64_t *ret,
                       struct errbuf *err);

/* A torch trace drain ("records", "variables", "steps" of @drain) into torch_records,
 * torch_values and torch_steps, in one transaction; *ret_stored: the rows. A row of the wrong
 * shape is skipped. */
int records_torch_drain(const char *db_path, int64_t target_id, json_t *drain, int64_t *ret_stored,
                        struct errbuf *err);
/* The trace is (no longer) on for @target_id, every @every steps with @exprs. */
int records_torch_tracing(const char *db_path, int64_t target_id, bool on, int every,
                          const char *exprs, struct errbuf *err);

/* A crash `probectl catch` saw happen (intarget/catch.c): an uncaught exception or a fatal
 * signal, with what was read at that moment (@detail, JSON) into crashes. */
struct crash_record {
    int64_t target_id, ts_ns;
    pid_t pid, tid;      /* tid: the thread it happened in (0: not known) */
    const char *kind;    /* "exception" | "fatal-signal" */
    int signal;          /* fatal-signal: which */
    const char *message; /* in words */
    const char *detail;  /* JSON, or NULL */
};
int records_crash(const char *db_path, const struct crash_record *c, int64_t *ret_id,
                  struct errbuf *err);
/* The core file crash @crash_id left. */
int records_crash_core(const char *db_path, int64_t crash_id, const char *core_path,
                       struct errbuf *err);
/* `catch` is (no longer) on for @target_id, with fatal signals or not. */
int records_catching(const char *db_path, int64_t target_id, bool on, bool signals,
                     struct errbuf *err);

#endif
