/* samplestab.c - see samplestab.h. */
#define _GNU_SOURCE
#include "query/samplestab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/blocks.h"

enum { COL_TARGET, COL_TS, COL_TID, COL_STACK, COL_STATE, COL_N };

#define MINUTE_NS 60000000000LL /* stack_counts' minute buckets (span_s 60) */

/* idxNum bits: which arguments xFilter gets, in this order */
#define HAS_TARGET 1
#define HAS_LO 2 /* ts_ns >= (or >) */
#define HAS_HI 4 /* ts_ns <= (or <) */
#define HAS_TID 8
#define HAS_TS_EQ 16 /* the LO argument is ts_ns = X: HI is X too */

struct samples_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    struct samplestab_state *state;
    bool minutes; /* minute_counts: rows of stack_counts, not samples */
};

struct samples_cursor {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *q; /* the blocks */
    int q_plan;      /* the idxNum q was prepared for; -1: none */
    int64_t lo, hi;  /* the bounds asked on ts_ns (inclusive) */
    int64_t tid;     /* -1: any */
    bool eof, in_block;
    int64_t target_id, rowid;
    int32_t block_tid;
    struct block_sample cur;
    struct block_reader rd;
};

/* One module under two names; argv[0] says which (an eponymous table's is the module's). */
static int samples_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                           sqlite3_vtab **ret, char **errmsg)
{
    bool minutes = argc > 0 && strcmp(argv[0], "minute_counts") == 0;
    struct samples_vtab *v;
    int rc = sqlite3_declare_vtab(db, minutes ? "CREATE TABLE x(target_id INTEGER, ts_ns INTEGER,"
                                                " tid INTEGER, stack_id INTEGER, state INTEGER,"
                                                " n INTEGER)"
                                              : "CREATE TABLE x(target_id INTEGER, ts_ns INTEGER,"
                                                " tid INTEGER, stack_id INTEGER, state INTEGER)");

    (void)errmsg;
    if (rc != SQLITE_OK)
        return rc;
    v = calloc(1, sizeof(*v));
    if (!v)
        return SQLITE_NOMEM;
    v->db = db;
    v->state = aux;
    v->minutes = minutes;
    *ret = &v->base;
    return SQLITE_OK;
}

static int samples_disconnect(sqlite3_vtab *vt)
{
    free(vt);
    return SQLITE_OK;
}

static int samples_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    int use[4] = {-1, -1, -1, -1}, plan = 0, argv = 0; /* target, lo, hi, tid: constraint i */
    double cost = 1e7;

    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        int slot = -1;
        if (!c->usable)
            continue;
        if (c->iColumn == COL_TARGET && c->op == SQLITE_INDEX_CONSTRAINT_EQ)
            slot = 0;
        else if (c->iColumn == COL_TID && c->op == SQLITE_INDEX_CONSTRAINT_EQ)
            slot = 3;
        else if (c->iColumn == COL_TS &&
                 (c->op == SQLITE_INDEX_CONSTRAINT_GE || c->op == SQLITE_INDEX_CONSTRAINT_GT ||
                  c->op == SQLITE_INDEX_CONSTRAINT_EQ))
            slot = 1;
        else if (c->iColumn == COL_TS &&
                 (c->op == SQLITE_INDEX_CONSTRAINT_LE || c->op == SQLITE_INDEX_CONSTRAINT_LT))
            slot = 2;
        if (slot >= 0 && (use[slot] < 0 || c->op == SQLITE_INDEX_CONSTRAINT_EQ))
            use[slot] = i;
    }
    if (use[1] >= 0 && info->aConstraint[use[1]].op == SQLITE_INDEX_CONSTRAINT_EQ) {
        plan |= HAS_TS_EQ; /* ts_ns = X: both bounds from one argument */
        use[2] = -1;
    }
    for (int slot = 0; slot < 4; slot++) {
        if (use[slot] < 0)
            continue;
        plan |= 1 << slot;
        info->aConstraintUsage[use[slot]].argvIndex = ++argv;
        info->aConstraintUsage[use[slot]].omit = 0; /* SQLite checks each row again */
    }
    if (plan & HAS_TARGET)
        cost /= 100;
    if (plan & HAS_TS_EQ)
        cost /= 10000;
    else if (plan & (HAS_LO | HAS_HI))
        cost /= (plan & HAS_LO) && (plan & HAS_HI) ? 1000 : 10;
    if (plan & HAS_TID)
        cost /= 4;
    if (((struct samples_vtab *)vt)->minutes)
        cost /= 100; /* a row per minute and stack, not per sample */
    info->idxNum = plan;
    info->estimatedCost = cost;
    info->estimatedRows = (sqlite3_int64)cost + 1;
    return SQLITE_OK;
}

static int samples_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **ret)
{
    struct samples_cursor *c = calloc(1, sizeof(*c));

    (void)vt;
    if (!c)
        return SQLITE_NOMEM;
    c->q_plan = -1;
    c->eof = true;
    *ret = &c->base;
    return SQLITE_OK;
}

static int samples_close(sqlite3_vtab_cursor *cur)
{
    struct samples_cursor *c = (struct samples_cursor *)cur;

    sqlite3_finalize(c->q);
    free(c);
    return SQLITE_OK;
}

static int fail(struct samples_cursor *c, const char *what)
{
    struct samples_vtab *v = (struct samples_vtab *)c->base.pVtab;

    sqlite3_free(v->base.zErrMsg);
    v->base.zErrMsg = sqlite3_mprintf("samples: %s", what);
    c->eof = true;
    return SQLITE_ERROR;
}

/* The blocks' statement for @plan: the key's ranges (a block that ends before lo, or starts
 * after hi, holds none of the samples asked). */
static int prepare(struct samples_cursor *c, int plan)
{
    struct samples_vtab *v = (struct samples_vtab *)c->base.pVtab;
    char sql[512];
    int rc;

    if (c->q && c->q_plan == plan) {
        sqlite3_reset(c->q);
        sqlite3_clear_bindings(c->q);
        return SQLITE_OK;
    }
    sqlite3_finalize(c->q);
    c->q = NULL;
    if (v->minutes) /* target by target (CROSS JOIN: that order), each a range of the key */
        snprintf(sql, sizeof(sql),
                 "SELECT c.target_id, c.bucket * %lld, c.tid, c.stack_id, c.state, c.n"
                 " FROM main.targets t CROSS JOIN main.stack_counts c"
                 " ON c.target_id = t.id AND c.span_s = 60 WHERE 1%s%s%s%s",
                 MINUTE_NS, plan & HAS_TARGET ? " AND t.id = ?1" : "",
                 plan & HAS_LO ? " AND c.bucket >= ?2" : "",
                 plan & (HAS_HI | HAS_TS_EQ) ? " AND c.bucket <= ?3" : "",
                 plan & HAS_TID ? " AND c.tid = ?4" : "");
    else
        snprintf(sql, sizeof(sql),
                 "SELECT target_id, tid, first_ns, data FROM main.sample_blocks WHERE 1%s%s%s%s",
                 plan & HAS_TARGET ? " AND target_id = ?1" : "",
                 plan & HAS_LO ? " AND first_ns >= ?2 - " BLOCK_SPAN_SQL " AND last_ns >= ?2" : "",
                 plan & (HAS_HI | HAS_TS_EQ) ? " AND first_ns <= ?3" : "",
                 plan & HAS_TID ? " AND tid = ?4" : "");
    v->state->internal = true;
    rc = sqlite3_prepare_v2(v->db, sql, -1, &c->q, NULL);
    v->state->internal = false;
    if (rc != SQLITE_OK)
        return fail(c, sqlite3_errmsg(v->db));
    c->q_plan = plan;
    return SQLITE_OK;
}

/* The next sample the scan wants, reading blocks as needed: sets eof at the end. */
static int advance(struct samples_cursor *c)
{
    if (((struct samples_vtab *)c->base.pVtab)->minutes) { /* a row is a row */
        int rc = sqlite3_step(c->q);
        c->eof = rc != SQLITE_ROW;
        return rc == SQLITE_ROW || rc == SQLITE_DONE
                   ? SQLITE_OK
                   : fail(c, sqlite3_errmsg(sqlite3_db_handle(c->q)));
    }
    for (;;) {
        if (c->in_block) {
            int got = blocks_next(&c->rd, &c->cur);
            if (got < 0)
                return fail(c, "a damaged block in sample_blocks");
            if (got > 0 && c->cur.ts_ns >= c->lo && c->cur.ts_ns <= c->hi) {
                ((struct samples_vtab *)c->base.pVtab)->state->samples_read++;
                return SQLITE_OK;
            }
            if (got > 0)
                continue;
            c->in_block = false;
        }
        int rc = sqlite3_step(c->q);
        if (rc == SQLITE_DONE) {
            c->eof = true;
            return SQLITE_OK;
        }
        if (rc != SQLITE_ROW)
            return fail(c, sqlite3_errmsg(sqlite3_db_handle(c->q)));
        c->target_id = sqlite3_column_int64(c->q, 0);
        c->block_tid = sqlite3_column_int(c->q, 1);
        /* the blob stays valid until the next step, which comes once the block is read */
        if (blocks_reader_init(&c->rd, sqlite3_column_blob(c->q, 3),
                               (size_t)sqlite3_column_bytes(c->q, 3),
                               sqlite3_column_int64(c->q, 2)) < 0)
            return fail(c, "a damaged block in sample_blocks");
        c->in_block = true;
    }
}

/* A bound on ts_ns from a constraint's value: a number (a real rounded outwards), else none
 * (@none: a text or NULL bound is left to SQLite, which checks every row again). */
static int64_t bound(sqlite3_value *v, bool upper, int64_t none)
{
    double d;

    switch (sqlite3_value_numeric_type(v)) {
    case SQLITE_INTEGER:
        return sqlite3_value_int64(v);
    case SQLITE_FLOAT:
        d = sqlite3_value_double(v);
        if (d >= 9.2e18 || d <= -9.2e18)
            return none;
        return upper ? (int64_t)d + 1 : (int64_t)d - 1;
    default:
        return none;
    }
}

static int samples_filter(sqlite3_vtab_cursor *cur, int plan, const char *idx_str, int argc,
                          sqlite3_value **argv)
{
    struct samples_cursor *c = (struct samples_cursor *)cur;
    int rc = prepare(c, plan), a = 0;

    (void)idx_str;
    (void)argc;
    if (rc != SQLITE_OK)
        return rc;
    c->lo = INT64_MIN;
    c->hi = INT64_MAX;
    c->eof = c->in_block = false;
    c->rowid = 0;
    if (plan & HAS_TARGET)
        sqlite3_bind_value(c->q, 1, argv[a++]);
    if (plan & HAS_LO) {
        if (plan & HAS_TS_EQ)
            c->hi = bound(argv[a], true, INT64_MAX);
        c->lo = bound(argv[a++], false, INT64_MIN);
    }
    if (plan & HAS_HI)
        c->hi = bound(argv[a++], true, INT64_MAX);
    if (((struct samples_vtab *)cur->pVtab)->minutes) {
        /* the minutes that hold the bounds (SQLite checks each row's start again) */
        c->lo = c->lo / MINUTE_NS - (c->lo % MINUTE_NS < 0);
        c->hi = c->hi / MINUTE_NS - (c->hi % MINUTE_NS < 0);
    }
    if (plan & HAS_LO)
        sqlite3_bind_int64(c->q, 2, c->lo);
    if (plan & (HAS_HI | HAS_TS_EQ))
        sqlite3_bind_int64(c->q, 3, c->hi);
    if (plan & HAS_TID)
        sqlite3_bind_value(c->q, 4, argv[a++]);
    return advance(c);
}

static int samples_next(sqlite3_vtab_cursor *cur)
{
    struct samples_cursor *c = (struct samples_cursor *)cur;

    c->rowid++;
    return advance(c);
}

static int samples_eof(sqlite3_vtab_cursor *cur)
{
    return ((struct samples_cursor *)cur)->eof;
}

static int samples_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    struct samples_cursor *c = (struct samples_cursor *)cur;

    if (((struct samples_vtab *)cur->pVtab)->minutes) {
        sqlite3_result_value(ctx, sqlite3_column_value(c->q, col));
        return SQLITE_OK;
    }
    switch (col) {
    case COL_TARGET:
        sqlite3_result_int64(ctx, c->target_id);
        break;
    case COL_TS:
        sqlite3_result_int64(ctx, c->cur.ts_ns);
        break;
    case COL_TID:
        sqlite3_result_int64(ctx, c->block_tid);
        break;
    case COL_STACK:
        sqlite3_result_int64(ctx, c->cur.stack_id);
        break;
    default:
        sqlite3_result_int(ctx, c->cur.state);
    }
    return SQLITE_OK;
}

static int samples_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *ret)
{
    *ret = ((struct samples_cursor *)cur)->rowid;
    return SQLITE_OK;
}

static const sqlite3_module samples_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous only: no CREATE VIRTUAL TABLE */
    .xConnect = samples_connect,
    .xBestIndex = samples_best_index,
    .xDisconnect = samples_disconnect,
    .xDestroy = samples_disconnect,
    .xOpen = samples_open,
    .xClose = samples_close,
    .xFilter = samples_filter,
    .xNext = samples_next,
    .xEof = samples_eof,
    .xColumn = samples_column,
    .xRowid = samples_rowid,
};

int samplestab_register(sqlite3 *db, struct samplestab_state *state)
{
    int rc = sqlite3_create_module(db, "samples", &samples_module, state);

    return rc == SQLITE_OK ? sqlite3_create_module(db, "minute_counts", &samples_module, state)
                           : rc;
}
