/* store.c - see store.h. */
#define _GNU_SOURCE /* qsort_r */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "store/blocks.h"
#include "store/schema.h"

enum stmt_id {
    INS_TARGET,
    END_TARGET,
    INS_THREAD,
    INS_STRING,
    INS_FRAME,
    INS_STACK_FRAME,
    INS_STACK_TASK,
    INS_BLOCK,
    INS_USAGE,
    INS_THREAD_CPU,
    INS_CRASH,
    INS_GPU,
    INS_GPU_READING,
    INS_GPU_PROC,
    INS_GPU_XID,
    INS_COMM,
    ADD_COUNT,
    N_STMTS,
};

static const char *const stmt_sql[N_STMTS] = {
    [INS_TARGET] = "INSERT OR REPLACE INTO targets(id, pid, start_time, uid, cmdline, py_version,"
                   " rate_hz, rank, local_rank, world_size, attached_ns, follow_children, native,"
                   " nccl) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [END_TARGET] = "UPDATE targets SET ended_ns = ?, end_reason = ? WHERE id = ?",
    [INS_THREAD] = "INSERT OR REPLACE INTO threads(target_id, tid, name, os_name) VALUES (?, ?, ?,"
                   " ?)",
    [INS_STRING] = "INSERT OR IGNORE INTO strings(id, text) VALUES (?, ?)",
    [INS_FRAME] = "INSERT OR IGNORE INTO frames(id, func_id, file_id, line, first_line, kind)"
                  " VALUES (?, ?, ?, ?, ?, ?)",
    [INS_STACK_FRAME] = "INSERT OR IGNORE INTO stack_frames(stack_id, depth, frame_id)"
                        " VALUES (?, ?, ?)",
    [INS_STACK_TASK] = "INSERT OR IGNORE INTO stack_tasks(stack_id, task_id) VALUES (?, ?)",
    [INS_BLOCK] = "INSERT INTO sample_blocks(target_id, first_ns, tid, last_ns, n, data)"
                  " VALUES (?, ?, ?, ?, ?, ?)",
    [INS_USAGE] = "INSERT OR IGNORE INTO memory(target_id, ts_ns, rss, pss, uss, swap, cpu_ns,"
                  " threads) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    [INS_CRASH] = "INSERT INTO crashes(target_id, pid, ts_ns, kind, exit_code, signal, core_dumped,"
                  " message, kernel) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''))",
    [INS_GPU] = "INSERT INTO gpus(id, uuid, name, gpu_index, mig_index, memory_total, last_ns)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET name = excluded.name,"
                " gpu_index = excluded.gpu_index, mig_index = excluded.mig_index,"
                " memory_total = excluded.memory_total, last_ns = excluded.last_ns",
    [INS_GPU_READING] = "INSERT OR IGNORE INTO gpu_readings(gpu_id, ts_ns, util_pct, mem_util_pct,"
                        " memory_used, power_mw, temp_c, sm_clock_mhz, mem_clock_mhz,"
                        " throttle_reasons, ecc_corrected, ecc_uncorrected)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [INS_GPU_PROC] = "INSERT OR IGNORE INTO gpu_process_readings(target_id, ts_ns, gpu_id, pid,"
                     " memory_used, sm_util_pct) VALUES (?, ?, ?, ?, ?, ?)",
    [INS_GPU_XID] = "INSERT INTO gpu_xids(ts_ns, gpu_id, xid) VALUES (?, ?, ?)",
    /* a call NCCL was given (gpu/nccl.h): queued on its stream, its completion not seen; the
     * rank is the process's (its environment's, as attached) */
    [INS_COMM] = "INSERT OR REPLACE INTO comm_calls(target_id, call_id, op, group_name, group_size,"
                 " seq, seq_source, rank, peer, bytes, dtype, async, ts_ns, duration_ns, state)"
                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, (SELECT rank FROM targets WHERE id = ?1),"
                 " ?8, ?9, ?10, 1, ?11, NULL, 'launched')",
    [ADD_COUNT] = "INSERT INTO stack_counts(target_id, span_s, bucket, tid, stack_id, state, n)"
                  " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET n = n + excluded.n",
    [INS_THREAD_CPU] = "INSERT OR IGNORE INTO thread_cpu(target_id, ts_ns, tid, cpu_ns)"
                       " VALUES (?, ?, ?, ?)",
};

/* The buckets of stack_counts (schema/0012_stack_counts.sql): a minute and an hour. */
static const int64_t count_spans_s[] = {60, 3600};
#define N_SPANS (sizeof(count_spans_s) / sizeof(count_spans_s[0]))

/* One bucket's count of one (thread, stack, state), summed over a write's samples. */
struct stack_count {
    int64_t target_id, bucket, stack_id, n; /* n 0: a free slot */
    int32_t tid, state, span;               /* span: an index into count_spans_s */
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *stmt[N_STMTS];
    /* the counts of the write in progress: open addressing, at most half full */
    struct stack_count *counts;
    size_t counts_cap, counts_used;
    struct block_builder *blocks; /* the write's samples into sample_blocks */
    uint32_t *order;              /* the write's samples by thread: indexes into the half */
    size_t order_cap;
};

static int exec(struct store *st, const char *sql, struct errbuf *err, const char *what)
{
    char *msg = NULL;

    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    errbuf_set(err, -EIO, "%s: %s", what, msg ? msg : sqlite3_errmsg(st->db));
    sqlite3_free(msg);
    return -EIO;
}

static int user_version(struct store *st, int *ret, struct errbuf *err)
{
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &q, NULL);

    if (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        *ret = sqlite3_column_int(q, 0);
    else
        rc = SQLITE_ERROR;
    sqlite3_finalize(q);
    return rc == SQLITE_OK
               ? 0
               : errbuf_set(err, -EIO, "reading user_version: %s", sqlite3_errmsg(st->db));
}

/* block_emit_fn: one block into sample_blocks through @ctx, a prepared INSERT. */
static int insert_block(void *ctx, const struct block_out *blk)
{
    sqlite3_stmt *q = ctx;
    int rc;

    sqlite3_bind_int64(q, 1, blk->target_id);
    sqlite3_bind_int64(q, 2, blk->first_ns);
    sqlite3_bind_int64(q, 3, blk->tid);
    sqlite3_bind_int64(q, 4, blk->last_ns);
    sqlite3_bind_int64(q, 5, (sqlite3_int64)blk->n);
    sqlite3_bind_blob(q, 6, blk->data, (int)blk->len, SQLITE_STATIC);
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

/* Applying 0013_sample_blocks.sql: the samples stored a row each are packed into blocks (their
 * counts stay: 0012 counted them), and that table goes. */
static int pack_row_samples(struct store *st, struct errbuf *err)
{
    sqlite3_stmt *q = NULL, *ins = NULL;
    int r = 0, rc = SQLITE_DONE;

    if (sqlite3_prepare_v2(st->db,
                           "SELECT target_id, tid, ts_ns, stack_id, state FROM samples"
                           " ORDER BY target_id, tid, ts_ns",
                           -1, &q, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(st->db, stmt_sql[INS_BLOCK], -1, &ins, NULL) != SQLITE_OK)
        r = -EIO;
    while (r == 0 && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct block_sample bs = {.ts_ns = sqlite3_column_int64(q, 2),
                                  .stack_id = sqlite3_column_int64(q, 3),
                                  .state = sqlite3_column_int(q, 4)};
        r = block_builder_add(st->blocks, sqlite3_column_int64(q, 0), sqlite3_column_int(q, 1), &bs,
                              insert_block, ins);
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0)
        r = block_builder_flush(st->blocks, insert_block, ins);
    block_builder_drop(st->blocks);
    sqlite3_finalize(q);
    sqlite3_finalize(ins);
    if (r < 0)
        return errbuf_set(err, r, "0013_sample_blocks.sql: packing the stored samples: %s",
                          r == -EIO ? sqlite3_errmsg(st->db) : strerror(-r));
    return exec(st, "DROP TABLE samples", err, "0013_sample_blocks.sql");
}

/* Applies schema files user_version+1 .. n, each with its version bump in one transaction. */
static int migrate(struct store *st, struct errbuf *err)
{
    int version = 0, r = user_version(st, &version, err);

    if (r < 0)
        return r;
    if (version > (int)schema_n_files)
        return errbuf_set(err, -EPROTO,
                          "database schema version %d is newer than this probed knows (%u)",
                          version, schema_n_files);
    for (unsigned i = (unsigned)version; i < schema_n_files; i++) {
        char bump[64];

        snprintf(bump, sizeof(bump), "PRAGMA user_version = %u", i + 1);
        if (version > 0) /* an existing database: say what takes the time (0013 packs rows) */
            log_msg(LOG_INFO, "database: applying %s", schema_files[i].name);
        r = exec(st, "BEGIN IMMEDIATE", err, "migration");
        if (r == 0)
            r = exec(st, schema_files[i].sql, err, schema_files[i].name);
        if (r == 0 && strncmp(schema_files[i].name, "0013_", 5) == 0)
            r = pack_row_samples(st, err);
        if (r == 0)
            r = exec(st, bump, err, schema_files[i].name);
        if (r == 0)
            r = exec(st, "COMMIT", err, schema_files[i].name);
        if (r < 0) {
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            return r;
        }
    }
    return 0;
}

/* The database file exists and only root reads it (0600, whatever the umask): it holds every
 * user's stacks, and users read their own through the API only. SQLite gives its -wal and
 * -shm files the database's mode. One found readable by others is made private. */
static int make_private(const char *path, bool create, struct errbuf *err)
{
    struct stat sb;
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT : 0), 0600), r = 0;

    if (fd < 0 && !create && errno == ENOENT)
        return 0;
    if (fd < 0)
        return errbuf_set(err, -errno, "opening %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))
        r = errbuf_set(err, -EINVAL, "%s is not a regular file", path);
    else if ((sb.st_mode & 077) && fchmod(fd, 0600) < 0)
        r = errbuf_set(err, -errno, "making %s private (mode 0600): %s", path, strerror(errno));
    close(fd);
    return r;
}

int store_open(const char *path, struct store **ret, struct errbuf *err)
{
    struct store *st = calloc(1, sizeof(*st));
    int r;

    if (!st || block_builder_new(&st->blocks) < 0) {
        free(st);
        return errbuf_set(err, -ENOMEM, "out of memory");
    }
    if ((r = make_private(path, true, err)) < 0)
        goto fail;
    for (int i = 0; i < 2; i++) { /* a -wal and -shm left by an earlier daemon */
        char side[4096];
        snprintf(side, sizeof(side), "%s%s", path, i ? "-shm" : "-wal");
        if ((r = make_private(side, false, err)) < 0)
            goto fail;
    }
    if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        r = errbuf_set(err, -EIO, "opening %s: %s", path,
                       st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    /* WAL: queries read while we write; NORMAL sync: a crash of the daemon loses nothing
     * committed, a power cut at most the last transactions. The page cache (SQLite's default
     * size, said here since the daemon's RSS grows by it as the database does, then stays:
     * store__cache_bytes) keeps the pages the writes come back to. */
    r = exec(st,
             "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
             " PRAGMA cache_size = -" STORE_CACHE_KIB ";",
             err, path);
    if (r == 0)
        r = migrate(st, err);
    for (int i = 0; r == 0 && i < N_STMTS; i++)
        if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
                               NULL) != SQLITE_OK)
            r = errbuf_set(err, -EIO, "preparing \"%s\": %s", stmt_sql[i], sqlite3_errmsg(st->db));
    if (r < 0)
        goto fail;
    *ret = st;
    return 0;
fail:
    store_free(st);
    return r;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    for (int i = 0; i < N_STMTS; i++)
        sqlite3_finalize(st->stmt[i]);
    sqlite3_close(st->db);
    free(st->counts);
    free(st->order);
    block_builder_free(st->blocks);
    free(st);
}

/* Binds @n values described by @types ('i' int64, 't' text, 'n' int64 or NULL when < 0)
 * and steps once. */
static int run(struct store *st, enum stmt_id id, const char *types, ...)
{
    sqlite3_stmt *q = st->stmt[id];
    va_list ap;
    int rc;

    va_start(ap, types);
    for (int i = 0; types[i]; i++) {
        if (types[i] == 't') {
            const char *s = va_arg(ap, const char *);
            int len = va_arg(ap, int);
            sqlite3_bind_text(q, i + 1, s, len, SQLITE_STATIC);
        } else {
            int64_t v = va_arg(ap, int64_t);
            if (types[i] == 'n' && v < 0)
                sqlite3_bind_null(q, i + 1);
            else
                sqlite3_bind_int64(q, i + 1, v);
        }
    }
    va_end(ap);
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

static int write_defs(struct store *st, const struct ob_half *h)
{
    int r = 0;

    for (size_t i = 0; r == 0 && i < h->n_targets; i++) {
        const struct ob_target *t = &h->targets[i];
        r = run(st, INS_TARGET, "iiiittinnniiii", t->id, (int64_t)t->pid, t->start_time,
                (int64_t)t->uid, t->cmdline, -1, t->py_version, -1, (int64_t)t->rate_hz,
                (int64_t)t->rank, (int64_t)t->local_rank, (int64_t)t->world_size, t->attached_ns,
                (int64_t)t->follow_children, (int64_t)t->native, (int64_t)t->nccl);
    }
    for (size_t i = 0; r == 0 && i < h->n_threads; i++) {
        const struct ob_def *d = &h->threads[i];
        const char *name = (const char *)h->arena + d->off;
        int name_len = (int)strnlen(name, d->len);
        const char *os_name = name_len < (int)d->len ? name + name_len + 1 : "";

        r = run(st, INS_THREAD, "iitt", d->id, d->extra, name, name_len, os_name,
                (int)d->len - name_len - (name_len < (int)d->len));
    }
    for (size_t i = 0; r == 0 && i < h->n_strings; i++) {
        const struct ob_def *d = &h->strings[i];
        r = run(st, INS_STRING, "it", d->id, (const char *)h->arena + d->off, (int)d->len);
    }
    for (size_t i = 0; r == 0 && i < h->n_frames; i++) {
        const struct ob_frame *f = &h->frames[i];
        r = run(st, INS_FRAME, "iiiiii", f->id, f->func_id, f->file_id, (int64_t)f->line,
                (int64_t)f->first_line, (int64_t)f->kind);
    }
    for (size_t i = 0; r == 0 && i < h->n_stacks; i++) {
        const struct ob_def *d = &h->stacks[i];
        const int64_t *ids = (const int64_t *)(const void *)(h->arena + d->off);
        for (uint32_t k = 0; r == 0 && k < d->len; k++)
            r = run(st, INS_STACK_FRAME, "iii", d->id, (int64_t)k, ids[k]);
        if (r == 0 && d->extra)
            r = run(st, INS_STACK_TASK, "ii", d->id, d->extra);
    }
    return r;
}

static size_t count_slot(const struct stack_count *c, size_t cap)
{
    uint64_t h = (uint64_t)c->stack_id * 0x9e3779b97f4a7c15ULL;

    h ^= ((uint64_t)c->bucket << 20) ^ ((uint64_t)c->target_id << 40) ^ (uint64_t)c->tid;
    h = (h ^ (h >> 29) ^ ((uint64_t)(c->state * 2 + c->span) << 7)) * 0xbf58476d1ce4e5b9ULL;
    return (size_t)(h ^ (h >> 32)) & (cap - 1);
}

static bool same_count(const struct stack_count *a, const struct stack_count *b)
{
    return a->stack_id == b->stack_id && a->bucket == b->bucket && a->target_id == b->target_id &&
           a->tid == b->tid && a->state == b->state && a->span == b->span;
}

/* Adds @c (n = 1) to its slot; -ENOMEM when the table cannot grow. */
static int count_add(struct store *st, const struct stack_count *c)
{
    size_t i;

    if ((st->counts_used + 1) * 2 > st->counts_cap) {
        size_t cap = st->counts_cap ? st->counts_cap * 2 : 1024;
        struct stack_count *old = st->counts, *grown = calloc(cap, sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        for (size_t k = 0; k < st->counts_cap; k++) {
            if (!old[k].n)
                continue;
            for (i = count_slot(&old[k], cap); grown[i].n; i = (i + 1) & (cap - 1))
                ;
            grown[i] = old[k];
        }
        free(old);
        st->counts = grown;
        st->counts_cap = cap;
    }
    for (i = count_slot(c, st->counts_cap); st->counts[i].n; i = (i + 1) & (st->counts_cap - 1))
        if (same_count(&st->counts[i], c)) {
            st->counts[i].n++;
            return 0;
        }
    st->counts[i] = *c;
    st->counts[i].n = 1;
    st->counts_used++;
    return 0;
}

/* A sample of (@target_id, @tid) into every bucket of the counts. */
static int count_sample(struct store *st, int64_t target_id, int32_t tid,
                        const struct block_sample *s)
{
    int r = 0;

    for (size_t k = 0; r == 0 && k < N_SPANS; k++) {
        struct stack_count c = {.target_id = target_id,
                                .bucket = s->ts_ns / (count_spans_s[k] * 1000000000LL),
                                .stack_id = s->stack_id,
                                .tid = tid,
                                .state = s->state,
                                .span = (int32_t)k};
        r = count_add(st, &c);
    }
    return r;
}

/* Adds (@sign 1) or takes away (-1) the counts gathered to stack_counts, and empties the table
 * for the next use. */
static int write_counts(struct store *st, int r, int sign)
{
    for (size_t i = 0; i < st->counts_cap && st->counts_used; i++) {
        struct stack_count *c = &st->counts[i];
        if (!c->n)
            continue;
        if (r == 0)
            r = run(st, ADD_COUNT, "iiiiiii", c->target_id, count_spans_s[c->span], c->bucket,
                    (int64_t)c->tid, c->stack_id, (int64_t)c->state, sign * c->n);
        c->n = 0;
        st->counts_used--;
    }
    return r;
}

/* The half's samples by target, thread and time (each thread's are in time order already). */
static int by_thread(const void *a, const void *b, void *ctx)
{
    const struct ob_sample *all = ctx, *x = &all[*(const uint32_t *)a],
                           *y = &all[*(const uint32_t *)b];

    if (x->target_id != y->target_id)
        return x->target_id < y->target_id ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->ts_ns < y->ts_ns ? -1 : x->ts_ns > y->ts_ns;
}

/* The half's samples, a block per thread (or more: blocks.h), and their counts. */
static int write_samples(struct store *st, const struct ob_half *h)
{
    int r = 0;

    if (!h->n_samples)
        return 0;
    if (h->n_samples > st->order_cap) {
        uint32_t *grown = realloc(st->order, h->n_samples * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        st->order = grown;
        st->order_cap = h->n_samples;
    }
    for (size_t i = 0; i < h->n_samples; i++)
        st->order[i] = (uint32_t)i;
    qsort_r(st->order, h->n_samples, sizeof(*st->order), by_thread, h->samples);
    for (size_t i = 0; r == 0 && i < h->n_samples; i++) {
        const struct ob_sample *o = &h->samples[st->order[i]];
        struct block_sample bs = {.ts_ns = o->ts_ns, .stack_id = o->stack_id, .state = o->state};
        r = block_builder_add(st->blocks, o->target_id, o->tid, &bs, insert_block,
                              st->stmt[INS_BLOCK]);
        if (r == 0)
            r = count_sample(st, o->target_id, o->tid, &bs);
    }
    if (r == 0)
        r = block_builder_flush(st->blocks, insert_block, st->stmt[INS_BLOCK]);
    else
        block_builder_drop(st->blocks); /* the transaction is rolled back */
    return write_counts(st, r, 1);
}

/* The GPU readings of @h (gpu/nvml.h; -1 figures are NULL). */
static int write_gpus(struct store *st, const struct ob_half *h)
{
    int r = 0;

    for (size_t i = 0; r == 0 && i < h->n_gpus; i++) {
        const struct ob_gpu *g = &h->gpus[i];
        const struct gpu_device *d = &g->d;
        r = run(st, INS_GPU, "ittinni", g->gpu_id, d->uuid, -1, d->name, -1, (int64_t)d->index,
                (int64_t)d->mig, d->mem_total_bytes, g->ts_ns);
        if (r == 0)
            r = run(st, INS_GPU_READING, "iinnnnnnnnnn", g->gpu_id, g->ts_ns, d->util_pct,
                    d->mem_util_pct, d->mem_used_bytes, d->power_mw, d->temp_c, d->sm_clock_mhz,
                    d->mem_clock_mhz, d->throttle_reasons, d->ecc_corrected, d->ecc_uncorrected);
    }
    for (size_t i = 0; r == 0 && i < h->n_gpu_procs; i++) {
        const struct ob_gpu_proc *p = &h->gpu_procs[i];
        r = run(st, INS_GPU_PROC, "iiiiin", p->target_id, p->ts_ns, p->gpu_id, (int64_t)p->pid,
                p->mem_used_bytes, p->sm_util_pct);
    }
    for (size_t i = 0; r == 0 && i < h->n_gpu_xids; i++) {
        const struct ob_gpu_xid *x = &h->gpu_xids[i];
        r = run(st, INS_GPU_XID, "ini", x->ts_ns, x->gpu_id ? x->gpu_id : -1, x->xid);
    }
    for (size_t i = 0; r == 0 && i < h->n_comms; i++) {
        const struct ob_comm *c = &h->comms[i];
        r = run(st, INS_COMM, "iittnitniti", c->target_id, c->call_id, c->op, -1, c->group, -1,
                (int64_t)c->group_size, c->seq, c->source, -1, (int64_t)c->peer, c->bytes, c->dtype,
                -1, c->ts_ns);
    }
    return r;
}

int store__write(struct store *st, const struct ob_half *h, struct errbuf *err)
{
    int r = exec(st, "BEGIN", err, "write");

    if (r < 0)
        return r;
    r = write_defs(st, h);
    if (r == 0)
        r = write_samples(st, h);
    for (size_t i = 0; r == 0 && i < h->n_usage; i++) {
        const struct ob_usage *u = &h->usage[i];
        r = run(st, INS_USAGE, "iiiiiiii", u->target_id, u->ts_ns, u->rss, u->pss, u->uss, u->swap,
                u->cpu_ns, (int64_t)u->threads);
    }
    for (size_t i = 0; r == 0 && i < h->n_thread_cpu; i++) {
        const struct ob_thread_cpu *c = &h->thread_cpu[i];
        r = run(st, INS_THREAD_CPU, "iiii", c->target_id, c->ts_ns, (int64_t)c->tid, c->cpu_ns);
    }
    r = r == 0 ? write_gpus(st, h) : r;
    for (size_t i = 0; r == 0 && i < h->n_crashes; i++) {
        const struct ob_crash *c = &h->crashes[i];
        r = run(st, INS_CRASH, "iiitnnitt", c->target_id, (int64_t)c->pid, c->ts_ns, c->kind, -1,
                (int64_t)c->exit_code, (int64_t)c->signal, (int64_t)c->core_dumped, c->message, -1,
                c->kernel, -1);
    }
    /* Ends last: a target's final samples are in the same transaction. */
    for (size_t i = 0; r == 0 && i < h->n_ends; i++)
        r = run(st, END_TARGET, "iti", h->ends[i].ended_ns, h->ends[i].reason, -1,
                h->ends[i].target_id);
    if (r < 0) {
        errbuf_set(err, r, "writing samples: %s",
                   r == -ENOMEM ? "out of memory" : sqlite3_errmsg(st->db));
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return r;
    }
    return exec(st, "COMMIT", err, "commit");
}

/* One integer from @sql, or -1 on error. */
static int64_t scalar(struct store *st, const char *sql)
{
    sqlite3_stmt *q;
    int64_t v = -1;

    if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

int store__next_target_id(struct store *st, int64_t *ret, struct errbuf *err)
{
    int64_t v = scalar(st, "SELECT coalesce(max(id), 0) + 1 FROM targets");

    if (v < 0)
        return errbuf_set(err, -EIO, "reading target ids: %s", sqlite3_errmsg(st->db));
    *ret = v;
    return 0;
}

int store__live_targets(struct store *st, store_target_fn fn, void *ctx, struct errbuf *err)
{
    sqlite3_stmt *q;
    int rc;

    if (sqlite3_prepare_v2(st->db,
                           /* SQLite gives | and << the same precedence: parenthesise */
                           "SELECT id, pid, start_time, rate_hz, (follow_children <> 0) |"
                           " ((id IN (SELECT target_id FROM allocation_tracking)) << 1) |"
                           " ((id IN (SELECT target_id FROM torch_tracing)) << 2) |"
                           " ((native <> 0) << 3) |"
                           " ((id IN (SELECT target_id FROM catching)) << 4) |"
                           " ((nccl <> 0) << 5)"
                           " FROM targets WHERE ended_ns IS NULL",
                           -1, &q, NULL) != SQLITE_OK)
        return errbuf_set(err, -EIO, "reading targets: %s", sqlite3_errmsg(st->db));
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        fn(sqlite3_column_int64(q, 0), sqlite3_column_int(q, 1), sqlite3_column_int64(q, 2),
           sqlite3_column_int(q, 3), (unsigned)sqlite3_column_int(q, 4), ctx);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? 0
                             : errbuf_set(err, -EIO, "reading targets: %s", sqlite3_errmsg(st->db));
}

int store_connect(const char *path, sqlite3 **ret, struct errbuf *err)
{
    sqlite3 *db = NULL;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        errbuf_set(err, -EIO, "opening %s: %s", path, db ? sqlite3_errmsg(db) : "no memory");
        sqlite3_close(db);
        return -EIO;
    }
    sqlite3_busy_timeout(db, 5000);
    *ret = db;
    return 0;
}

int64_t store__cache_bytes(struct store *st)
{
    int used = 0, high = 0;

    return sqlite3_db_status(st->db, SQLITE_DBSTATUS_CACHE_USED, &used, &high, 0) == SQLITE_OK
               ? used
               : -1;
}

int64_t store__size(struct store *st)
{
    int64_t pages = scalar(st, "PRAGMA page_count"),
            free_pages = scalar(st, "PRAGMA freelist_count");
    int64_t page = scalar(st, "PRAGMA page_size");

    return pages < 0 || free_pages < 0 || page < 0 ? -1 : (pages - free_pages) * page;
}

/* Deletes the rows of @table older than @before_ns; returns how many. */
static int64_t delete_from(struct store *st, const char *table, int64_t before_ns,
                           struct errbuf *err)
{
    char sql[160];
    sqlite3_stmt *q;
    int64_t n;

    /* Per target, so that the (target_id, ts_ns) key finds the rows: no full scan; the
     * machine's GPU rows by their index on time. */
    if (strcmp(table, "gpu_readings") == 0 || strcmp(table, "gpu_xids") == 0)
        snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE ts_ns < ?", table);
    else if (strcmp(table, "gpus") == 0)
        snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE last_ns < ?", table);
    else
        snprintf(sql, sizeof(sql),
                 "DELETE FROM %s WHERE target_id IN (SELECT id FROM targets) AND ts_ns < ?", table);
    if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK)
        return errbuf_set(err, -EIO, "retention of %s: %s", table, sqlite3_errmsg(st->db));
    sqlite3_bind_int64(q, 1, before_ns);
    n = sqlite3_step(q) == SQLITE_DONE ? sqlite3_changes64(st->db) : -1;
    sqlite3_finalize(q);
    return n < 0 ? errbuf_set(err, -EIO, "retention of %s: %s", table, sqlite3_errmsg(st->db)) : n;
}

/*
 * The blocks that ended before @before_ns go (one still going on at it stays whole: at most
 * BLOCK_SPAN_NS more), and their samples are taken away from stack_counts first, so that it
 * still equals counting the samples. Only blocks that start before @before_ns are looked at:
 * those older went at the last retention. Returns the samples deleted.
 */
static int64_t delete_blocks(struct store *st, int64_t before_ns, struct errbuf *err)
{
    static const char *const where = " FROM sample_blocks WHERE target_id IN (SELECT id FROM"
                                     " targets) AND first_ns < ?1 AND last_ns < ?1";
    struct block_reader *rd = malloc(sizeof(*rd));
    char sql[192];
    sqlite3_stmt *q = NULL;
    int64_t deleted = 0;
    int r = rd ? 0 : -ENOMEM, rc = SQLITE_DONE;

    snprintf(sql, sizeof(sql), "SELECT target_id, tid, first_ns, n, data%s", where);
    if (r == 0 && sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK)
        r = -EIO;
    if (q)
        sqlite3_bind_int64(q, 1, before_ns);
    while (r == 0 && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct block_sample bs;
        int64_t target_id = sqlite3_column_int64(q, 0);
        int32_t tid = sqlite3_column_int(q, 1);
        const uint8_t *data = sqlite3_column_blob(q, 4);
        int got = 0;
        r = blocks_reader_init(rd, data, (size_t)sqlite3_column_bytes(q, 4),
                               sqlite3_column_int64(q, 2));
        while (r == 0 && (got = blocks_next(rd, &bs)) > 0)
            r = count_sample(st, target_id, tid, &bs);
        if (r == 0 && got < 0)
            r = got;
        deleted += sqlite3_column_int64(q, 3);
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_finalize(q);
    free(rd);
    r = write_counts(st, r, -1);
    if (r == 0) {
        snprintf(sql, sizeof(sql), "DELETE%s", where);
        if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK)
            r = -EIO;
        else {
            sqlite3_bind_int64(q, 1, before_ns);
            r = sqlite3_step(q) == SQLITE_DONE ? 0 : -EIO;
            sqlite3_finalize(q);
        }
    }
    if (r == 0 && exec(st,
                       "DELETE FROM stack_counts WHERE target_id IN (SELECT id FROM targets)"
                       " AND n <= 0",
                       err, "retention of stack_counts") < 0)
        return -EIO;
    if (r < 0)
        return errbuf_set(err, r, "retention of sample_blocks: %s",
                          r == -EIO ? sqlite3_errmsg(st->db) : strerror(-r));
    return deleted;
}

/* Samples, and the memory timeline with them, in one transaction; returns the samples
 * deleted. */
static int64_t delete_before(struct store *st, int64_t before_ns, struct errbuf *err)
{
    int64_t n;

    if (before_ns <= 0)
        return 0;
    if (exec(st, "BEGIN", err, "retention") < 0)
        return -EIO;
    n = delete_blocks(st, before_ns, err);
    if (n >= 0 && (delete_from(st, "memory", before_ns, err) < 0 ||
                   delete_from(st, "thread_cpu", before_ns, err) < 0 ||
                   delete_from(st, "allocations", before_ns, err) < 0 ||
                   delete_from(st, "torch_records", before_ns, err) < 0 ||
                   delete_from(st, "torch_values", before_ns, err) < 0 ||
                   delete_from(st, "torch_steps", before_ns, err) < 0 ||
                   delete_from(st, "comm_calls", before_ns, err) < 0 ||
                   delete_from(st, "ddp_steps", before_ns, err) < 0 ||
                   delete_from(st, "torch_profiles", before_ns, err) < 0 ||
                   delete_from(st, "torch_profile_events", before_ns, err) < 0 ||
                   delete_from(st, "torch_profile_steps", before_ns, err) < 0 ||
                   delete_from(st, "gpu_memory", before_ns, err) < 0 ||
                   delete_from(st, "gpu_readings", before_ns, err) < 0 ||
                   delete_from(st, "gpu_process_readings", before_ns, err) < 0 ||
                   delete_from(st, "gpu_xids", before_ns, err) < 0 ||
                   delete_from(st, "gpus", before_ns, err) < 0))
        n = -EIO;
    if (n < 0) {
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return n;
    }
    return exec(st, "COMMIT", err, "retention") < 0 ? -EIO : n;
}

int64_t store__thin(struct store *st, int64_t from_ns, int64_t to_ns, struct errbuf *err)
{
    /* per target, so that the key (target_id, ts_ns, tid) bounds each scan to the minute; a
     * thread's last reading in it is the one kept. Only targets not ended before the minute
     * can have readings in it: long-detached ones cost a row of the scan, not a probe. */
    static const char *const sql =
        "DELETE FROM thread_cpu WHERE (target_id, ts_ns, tid) IN"
        " (SELECT target_id, ts_ns, tid FROM (SELECT target_id, ts_ns, tid, row_number() OVER"
        " (PARTITION BY tid ORDER BY ts_ns DESC) AS newest FROM thread_cpu"
        " WHERE target_id = ?1 AND ts_ns >= ?2 AND ts_ns < ?3) WHERE newest > 1)";
    sqlite3_stmt *ids = NULL, *del = NULL;
    int64_t deleted = 0;
    int r = exec(st, "BEGIN", err, "thinning the CPU readings"), rc = SQLITE_DONE;

    if (r == 0 && (sqlite3_prepare_v2(
                       st->db, "SELECT id FROM targets WHERE ended_ns IS NULL OR ended_ns >= ?1",
                       -1, &ids, NULL) != SQLITE_OK ||
                   sqlite3_prepare_v2(st->db, sql, -1, &del, NULL) != SQLITE_OK))
        r = -EIO;
    if (r == 0)
        sqlite3_bind_int64(ids, 1, from_ns);
    while (r == 0 && (rc = sqlite3_step(ids)) == SQLITE_ROW) {
        sqlite3_reset(del);
        sqlite3_bind_int64(del, 1, sqlite3_column_int64(ids, 0));
        sqlite3_bind_int64(del, 2, from_ns);
        sqlite3_bind_int64(del, 3, to_ns);
        if (sqlite3_step(del) != SQLITE_DONE)
            r = -EIO;
        else
            deleted += sqlite3_changes64(st->db);
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r < 0)
        errbuf_set(err, r, "thinning the CPU readings of [%lld, %lld): %s", (long long)from_ns,
                   (long long)to_ns, sqlite3_errmsg(st->db));
    sqlite3_finalize(ids);
    sqlite3_finalize(del);
    if (r == 0 && (r = exec(st, "COMMIT", err, "thinning the CPU readings")) == 0)
        return deleted;
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return r;
}

/* The blocks a compaction writes, kept until the ones they replace are deleted. */
struct merged {
    struct block_out *out;
    uint8_t *bytes;
    size_t n, cap, len, bytes_cap;
};

/* block_emit_fn: a merged block, copied into @ctx (a struct merged). */
static int keep_merged(void *ctx, const struct block_out *blk)
{
    struct merged *m = ctx;

    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        struct block_out *out = realloc(m->out, cap * sizeof(*out));
        if (!out)
            return -ENOMEM;
        m->out = out;
        m->cap = cap;
    }
    if (m->len + blk->len > m->bytes_cap) {
        size_t cap = m->bytes_cap ? 2 * m->bytes_cap : 4096;
        uint8_t *bytes;
        while (cap < m->len + blk->len)
            cap *= 2;
        if (!(bytes = realloc(m->bytes, cap)))
            return -ENOMEM;
        m->bytes = bytes;
        m->bytes_cap = cap;
    }
    memcpy(m->bytes + m->len, blk->data, blk->len);
    m->out[m->n] = *blk;
    m->out[m->n++].data = (const uint8_t *)(uintptr_t)m->len; /* an offset until written */
    m->len += blk->len;
    return 0;
}

/* One thread's blocks that start in [@from_ns, @to_ns), read and packed again into @m. */
static int merge_thread(struct store *st, sqlite3_stmt *q, struct block_reader *rd,
                        int64_t target_id, int32_t tid, struct merged *m)
{
    int r = 0, rc, got = 0;

    while (r == 0 && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct block_sample bs;
        r = blocks_reader_init(rd, sqlite3_column_blob(q, 1), (size_t)sqlite3_column_bytes(q, 1),
                               sqlite3_column_int64(q, 0));
        while (r == 0 && (got = blocks_next(rd, &bs)) > 0)
            r = block_builder_add(st->blocks, target_id, tid, &bs, keep_merged, m);
        if (r == 0 && got < 0)
            r = got;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0)
        r = block_builder_flush(st->blocks, keep_merged, m);
    block_builder_drop(st->blocks);
    return r;
}

int64_t store__compact(struct store *st, int64_t from_ns, int64_t to_ns, struct errbuf *err)
{
    static const char *const range = " FROM sample_blocks WHERE target_id = ?1 AND first_ns >= ?2"
                                     " AND first_ns < ?3 AND tid = ?4";
    struct block_reader *rd = malloc(sizeof(*rd));
    struct merged m = {0};
    sqlite3_stmt *groups = NULL, *blocks = NULL, *del = NULL;
    char sql[192];
    int64_t merged = 0;
    int r = rd ? exec(st, "BEGIN", err, "compaction") : -ENOMEM, rc = SQLITE_DONE;

    if (r == 0 &&
        (sqlite3_prepare_v2(st->db,
                            "SELECT target_id, tid FROM sample_blocks WHERE target_id IN"
                            " (SELECT id FROM targets) AND first_ns >= ?1 AND first_ns < ?2"
                            " GROUP BY target_id, tid HAVING count(*) > 1",
                            -1, &groups, NULL) != SQLITE_OK ||
         snprintf(sql, sizeof(sql), "SELECT first_ns, data%s ORDER BY first_ns", range) < 0 ||
         sqlite3_prepare_v2(st->db, sql, -1, &blocks, NULL) != SQLITE_OK ||
         snprintf(sql, sizeof(sql), "DELETE%s", range) < 0 ||
         sqlite3_prepare_v2(st->db, sql, -1, &del, NULL) != SQLITE_OK))
        r = -EIO;
    if (groups) {
        sqlite3_bind_int64(groups, 1, from_ns);
        sqlite3_bind_int64(groups, 2, to_ns);
    }
    /* (the groups are all read before any block changes: GROUP BY sorts them first) */
    while (r == 0 && (rc = sqlite3_step(groups)) == SQLITE_ROW) {
        int64_t target_id = sqlite3_column_int64(groups, 0);
        int32_t tid = sqlite3_column_int(groups, 1);
        sqlite3_stmt *both[] = {blocks, del};

        for (int i = 0; i < 2; i++) {
            sqlite3_reset(both[i]);
            sqlite3_bind_int64(both[i], 1, target_id);
            sqlite3_bind_int64(both[i], 2, from_ns);
            sqlite3_bind_int64(both[i], 3, to_ns);
            sqlite3_bind_int64(both[i], 4, tid);
        }
        m.n = m.len = 0;
        r = merge_thread(st, blocks, rd, target_id, tid, &m);
        sqlite3_reset(blocks);
        if (r == -EBADMSG) { /* a damaged block: this thread's minute stays as written */
            r = 0;
            continue;
        }
        if (r == 0 && sqlite3_step(del) != SQLITE_DONE)
            r = -EIO;
        merged += r == 0 ? sqlite3_changes64(st->db) - (int64_t)m.n : 0;
        for (size_t i = 0; r == 0 && i < m.n; i++) {
            m.out[i].data = m.bytes + (uintptr_t)m.out[i].data;
            r = insert_block(st->stmt[INS_BLOCK], &m.out[i]);
        }
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_finalize(groups);
    sqlite3_finalize(blocks);
    sqlite3_finalize(del);
    free(m.out);
    free(m.bytes);
    free(rd);
    if (r == 0)
        r = exec(st, "COMMIT", err, "compaction");
    else
        errbuf_set(err, r, "compacting the sample blocks of [%lld, %lld): %s", (long long)from_ns,
                   (long long)to_ns, r == -EIO ? sqlite3_errmsg(st->db) : strerror(-r));
    if (r == 0)
        return merged;
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return r;
}

int64_t store__retain(struct store *st, int64_t before_ns, int64_t max_bytes, struct errbuf *err)
{
    int64_t total = delete_before(st, before_ns, err);

    /* Over the size limit: drop the oldest tenth of the time span until it fits. Freed pages
     * are reused by later samples, so the file stops growing. */
    for (int round = 0; total >= 0 && max_bytes > 0 && round < 20; round++) {
        int64_t size = store__size(st), lo, hi, n;
        if (size < 0 || size <= max_bytes)
            break;
        lo = scalar(st, "SELECT min(first_ns) FROM sample_blocks"
                        " WHERE target_id IN (SELECT id FROM targets)");
        hi = scalar(st, "SELECT max(last_ns) FROM sample_blocks"
                        " WHERE target_id IN (SELECT id FROM targets)");
        if (lo <= 0 || hi <= lo)
            break;
        n = delete_before(st, lo + (hi - lo) / 10 + 1, err);
        if (n < 0)
            return n;
        total += n;
    }
    return total;
}
