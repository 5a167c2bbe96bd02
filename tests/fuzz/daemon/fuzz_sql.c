/*
 * fuzz_sql.c - libFuzzer on read-only SQL: the daemon's own query_run() (the authorizer, the
 * limits, the views a user sees through, the live and view tables) over a real database made
 * by store.c, holding the rows of two users' targets.
 *
 * Input: byte 0 picks who asks (root, uid 1000, uid 1000 about one pid); the rest, up to a
 * NUL, is the SQL. After each query the harness aborts (a crash for libFuzzer) when:
 *   - the database changed (PRAGMA data_version on a connection of its own moved): a write
 *     got through;
 *   - uid 1000's answer depends on uid 2000's rows. Two databases differ only in the text of
 *     uid 2000's rows (SECRET_A, SECRET_B); uid 1000's query runs on A, on B, and on A again.
 *     A differing answer on B while A gave the same twice is a leak. Comparing answers rather
 *     than looking for the secret in them is what keeps the oracle sound: a query may spell
 *     the secret itself (a CI run found printf('%secret...') "leaking" its own literal), and
 *     a query that is not deterministic (random(), 'now') differs from itself on A.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "query/query.h"
#include "query/sqlmem.h"
#include "store/store.h"

/* Same length, so that no length or offset differs between the two databases. */
#define SECRET_A "secret_of_uid_2000_alpha"
#define SECRET_B "hidden_by_uid_2000_omega"

static char db_path[2][256];
static sqlite3 *watch[2];
static int64_t version[2];

static int64_t data_version(sqlite3 *db)
{
    sqlite3_stmt *q;
    int64_t v = -1;

    if (sqlite3_prepare_v2(db, "PRAGMA data_version", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

/* Two users' targets, their samples and their strings, as the writer would store them; every
 * %1$s is uid 2000's secret. */
static const char rows[] =
    "INSERT INTO targets (id, pid, start_time, uid, cmdline, py_version, rate_hz, attached_ns)"
    " VALUES (1, 100, 1, 1000, 'python3 mine.py', '3.11.2', 100, 1),"
    " (2, 200, 2, 2000, 'python3 %1$s.py', '3.11.2', 100, 1);"
    "INSERT INTO strings (id, text) VALUES (11, 'my_function'), (12, '/home/me/mine.py'),"
    " (21, '%1$s'), (22, '/home/other/%1$s.py');"
    "INSERT INTO frames (id, func_id, file_id, line, first_line) VALUES (101, 11, 12, 3, 1),"
    " (201, 21, 22, 7, 5);"
    "INSERT INTO stack_frames (stack_id, depth, frame_id) VALUES (1001, 0, 101), (2001, 0, 201);"
    "INSERT INTO threads (target_id, tid, name) VALUES (1, 100, 'MainThread'),"
    " (2, 200, '%1$s');"
    /* samples (1, 1 ns, tid 100, stack 1001, state 3), (1, 1 ms later, 100, 1001, 1) and
     * (2, 1, 200, 2001, 3) packed as store/blocks.h says, and counted */
    "INSERT INTO sample_blocks (target_id, first_ns, tid, last_ns, n, data) VALUES"
    " (1, 1, 100, 1000001, 2, X'01E907030001D00F'), (2, 1, 200, 1, 1, X'01D10F0300');"
    "INSERT INTO stack_counts (target_id, span_s, bucket, tid, stack_id, state, n) VALUES"
    " (1, 60, 0, 100, 1001, 3, 1), (1, 60, 0, 100, 1001, 1, 1), (1, 3600, 0, 100, 1001, 3, 1),"
    " (1, 3600, 0, 100, 1001, 1, 1), (2, 60, 0, 200, 2001, 3, 1), (2, 3600, 0, 200, 2001, 3, 1);"
    "INSERT INTO evals (ts_ns, uid, pid, start_time, target_uid, mode, code, status,"
    " output_bytes, elapsed_ms, injected) VALUES (1, 2000, 200, 2, 2000, 'eval', '%1$s',"
    " 'ok', 0, 1, 1);";

/* A database made by store.c in a directory of its own, holding rows with this secret. */
static void make_db(int which, const char *secret)
{
    char dir[] = "/tmp/probed-fuzz-sql-XXXXXX";
    struct store *st = NULL;
    struct errbuf err;
    sqlite3 *db = NULL;
    char *sql;

    if (!mkdtemp(dir) || asprintf(&sql, rows, secret) < 0)
        abort();
    snprintf(db_path[which], sizeof(db_path[which]), "%s/probed.db", dir);
    if (store_open(db_path[which], &st, &err) < 0) {
        fprintf(stderr, "fuzz_sql: %s\n", err.msg);
        abort();
    }
    store_free(st);
    if (sqlite3_open(db_path[which], &db) != SQLITE_OK ||
        sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "fuzz_sql: %s\n", sqlite3_errmsg(db));
        abort();
    }
    sqlite3_close(db);
    free(sql);
    if (sqlite3_open_v2(db_path[which], &watch[which], SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        abort();
    version[which] = data_version(watch[which]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (sqlmem_install(QUERY_ALL_MEMORY_BYTES) < 0)
        abort();
    /* random() and randomblob() give the same numbers to every run of a query: the PRNG is
     * seeded once, saved, and restored before each run (answer()). */
    sqlite3_randomness(sizeof(version), version);
    sqlite3_test_control(SQLITE_TESTCTRL_PRNG_SAVE);
    make_db(0, SECRET_A);
    make_db(1, SECRET_B);
    return 0;
}

/* The answer to sql on database `which`, as text: the JSON reply or the error's message. */
static char *answer(int which, const struct query_scope *scope, const char *sql)
{
    static const struct query_limits lim = {.time_ms = 200, .max_rows = 100};
    struct errbuf err;
    json_t *out = NULL;
    char *text = NULL;
    int r;

    sqlite3_test_control(SQLITE_TESTCTRL_PRNG_RESTORE);
    if ((r = query_run(db_path[which], scope, &lim, sql, &out, &err)) == 0) {
        text = json_dumps(out, 0);
        json_decref(out);
    } else if (asprintf(&text, "error %d: %s", r, err.msg) < 0) {
        text = NULL;
    }
    if (!text)
        abort();
    if (data_version(watch[which]) != version[which]) {
        fprintf(stderr, "fuzz_sql: the database changed after: %s\n", sql);
        abort();
    }
    return text;
}

/* Whether uid 1000's answers to sql on A and on B differ for a reason other than chance: run
 * alternately (A B A B A), every A gives one answer, every B another, and none ran out of
 * time. A query that reads the clock (now_ns(), 'now') cannot pass that by chance. */
static bool answers_depend_on_b(const struct query_scope *scope, const char *sql, char *a, char *b)
{
    bool depends = strcmp(a, b) != 0 && !strstr(a, "error 408") && !strstr(b, "error 408");

    for (int run = 2; depends && run < 5; run++) {
        char *again = answer(run % 2, scope, sql);

        depends = strcmp(again, run % 2 ? b : a) == 0;
        free(again);
    }
    return depends;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct query_scope scope = {.root = true};
    char *sql, *a, *b;

    if (size < 2)
        return 0;
    if (data[0] % 3 == 1)
        scope = (struct query_scope){.uid = 1000};
    else if (data[0] % 3 == 2)
        scope = (struct query_scope){.uid = 1000, .pid = 100};
    sql = strndup((const char *)data + 1, size - 1);
    if (!sql)
        return 0;
    a = answer(0, &scope, sql);
    if (!scope.root) {
        b = answer(1, &scope, sql);
        if (answers_depend_on_b(&scope, sql, a, b)) {
            fprintf(stderr,
                    "fuzz_sql: uid 1000's answer depends on uid 2000's rows: %s\n"
                    "with A: %s\nwith B: %s\n",
                    sql, a, b);
            abort();
        }
        free(b);
    }
    free(a);
    free(sql);
    return 0;
}
