/*
 * store_synth.c - builds a probed store holding a long training job's samples, quickly, for
 * bench/queries.py: T ranks of one program, each with N threads sampled at RATE Hz for H
 * hours, ending now. The schema is the daemon's own (store_open applies every migration) and
 * the samples are packed by the writer's own encoder (blocks.c), one block per thread per
 * minute as compaction leaves them, with stack_counts' minute and hour rows beside them, as
 * the writer keeps them. Nothing is sampled: every figure is drawn from a fixed seed.
 *
 * The shape, per rank (the ranks run the same code, so they share stacks, as real ones do):
 *   - MainThread: 320 stacks 25-45 frames deep (a forward, a backward, an optimizer step), drawn
 *     with Zipf-like weights, staying on the previous one half the time; on the CPU 95 % of
 *     samples, holding the GIL in 90 % of those, collecting garbage in 1 %;
 *   - 3 loader threads: 24 stacks, on the CPU a third of the time;
 *   - the rest: waiting threads, each on 1 or 2 stacks, off the CPU.
 *
 *   usage: store_synth PATH [--hours H] [--targets T] [--threads N] [--rate HZ]
 * Prints one line of JSON: samples, blocks, stack_counts rows, first and last ns.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "errbuf.h"
#include "store/blocks.h"
#include "store/store.h"

#define FUNCS 400
#define FILES 30
#define FRAMES 3000
#define MAIN_STACKS 320
#define LOADER_STACKS 24
#define WAIT_STACKS 12
#define STACKS (MAIN_STACKS + LOADER_STACKS + WAIT_STACKS)
#define DEPTH_MAX 48

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static double rnd01(void)
{
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

static void die(sqlite3 *db, const char *what)
{
    fprintf(stderr, "store_synth: %s: %s\n", what, db ? sqlite3_errmsg(db) : strerror(errno));
    exit(1);
}

static void exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        die(db, sql);
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        die(db, sql);
    return st;
}

static void step(sqlite3 *db, sqlite3_stmt *st)
{
    if (sqlite3_step(st) != SQLITE_DONE)
        die(db, sqlite3_sql(st));
    sqlite3_reset(st);
}

/* One kind of thread: which stacks it draws from, and how. */
struct kind {
    int first, n;       /* its stacks: stack_ids[first .. first + n) */
    double stay;        /* the chance the next sample keeps the previous stack */
    double on_cpu, gil; /* chances per sample */
    double cum[MAIN_STACKS];
};

static int64_t stack_ids[STACKS];

static void kind_init(struct kind *k, int first, int n, double stay, double on_cpu, double gil)
{
    double total = 0;

    *k = (struct kind){.first = first, .n = n, .stay = stay, .on_cpu = on_cpu, .gil = gil};
    for (int i = 0; i < n; i++)
        k->cum[i] = (total += 1.0 / (i + 1));
    for (int i = 0; i < n; i++)
        k->cum[i] /= total;
}

static int kind_pick(const struct kind *k)
{
    double x = rnd01();
    int lo = 0, hi = k->n - 1;

    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (k->cum[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return k->first + lo;
}

/* The dictionaries: strings, frames and stacks, ids random 63-bit values as the sampler's
 * hashes are (their varints in a block are as long as real ones). */
static void dictionaries(sqlite3 *db)
{
    sqlite3_stmt *str = prepare(db, "INSERT INTO strings(id, text) VALUES (?, ?)");
    sqlite3_stmt *fr = prepare(db, "INSERT INTO frames(id, func_id, file_id, line, first_line)"
                                   " VALUES (?, ?, ?, ?, ?)");
    sqlite3_stmt *sf = prepare(db, "INSERT INTO stack_frames(stack_id, depth, frame_id)"
                                   " VALUES (?, ?, ?)");
    static int64_t func_ids[FUNCS], file_ids[FILES], frame_ids[FRAMES];
    char text[128];

    for (int i = 0; i < FUNCS + FILES; i++) {
        int64_t id = (int64_t)(rnd() >> 1);
        if (i < FUNCS) {
            snprintf(text, sizeof(text), i % 7 ? "Model.layer%d_forward" : "aten_op_%d", i);
            func_ids[i] = id;
        } else {
            snprintf(text, sizeof(text), "/app/train/module_%02d.py", i - FUNCS);
            file_ids[i - FUNCS] = id;
        }
        sqlite3_bind_int64(str, 1, id);
        sqlite3_bind_text(str, 2, text, -1, SQLITE_TRANSIENT);
        step(db, str);
    }
    for (int i = 0; i < FRAMES; i++) {
        int line = 1 + (int)(rnd() % 900);
        frame_ids[i] = (int64_t)(rnd() >> 1);
        sqlite3_bind_int64(fr, 1, frame_ids[i]);
        sqlite3_bind_int64(fr, 2, func_ids[rnd() % FUNCS]);
        sqlite3_bind_int64(fr, 3, file_ids[rnd() % FILES]);
        sqlite3_bind_int(fr, 4, line);
        sqlite3_bind_int(fr, 5, line > 20 ? line - 20 : 1);
        step(db, fr);
    }
    for (int s = 0; s < STACKS; s++) {
        /* stacks share their outer frames, as a program's do: 16 roots of 20 frames */
        int depth = s < MAIN_STACKS ? 25 + (int)(rnd() % 21) : 12 + (int)(rnd() % 8);
        int base = (s % 16) * 20;

        stack_ids[s] = (int64_t)(rnd() >> 1);
        for (int d = 0; d < depth; d++) {
            int outer = depth - 1 - d; /* 0: the root */
            int64_t f =
                outer < 20 ? frame_ids[base + outer] : frame_ids[320 + rnd() % (FRAMES - 320)];
            sqlite3_bind_int64(sf, 1, stack_ids[s]);
            sqlite3_bind_int(sf, 2, d);
            sqlite3_bind_int64(sf, 3, f);
            step(db, sf);
        }
    }
    sqlite3_finalize(str);
    sqlite3_finalize(fr);
    sqlite3_finalize(sf);
}

struct counts {
    uint32_t n[STACKS][8]; /* samples per stack and state */
};

static void write_counts(sqlite3 *db, sqlite3_stmt *st, int64_t target, int span_s, int64_t bucket,
                         int tid, struct counts *c, int64_t *rows)
{
    for (int s = 0; s < STACKS; s++)
        for (int state = 0; state < 8; state++) {
            if (!c->n[s][state])
                continue;
            sqlite3_bind_int64(st, 1, target);
            sqlite3_bind_int(st, 2, span_s);
            sqlite3_bind_int64(st, 3, bucket);
            sqlite3_bind_int(st, 4, tid);
            sqlite3_bind_int64(st, 5, stack_ids[s]);
            sqlite3_bind_int(st, 6, state);
            sqlite3_bind_int64(st, 7, c->n[s][state]);
            step(db, st);
            ++*rows;
        }
    memset(c, 0, sizeof(*c));
}

int main(int argc, char **argv)
{
    double hours = 24;
    int targets = 8, threads = 10, rate = 100;
    const char *path = NULL;
    struct errbuf err = {0};
    struct store *store;
    sqlite3 *db;
    struct timespec now;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hours") == 0 && i + 1 < argc)
            hours = atof(argv[++i]);
        else if (strcmp(argv[i], "--targets") == 0 && i + 1 < argc)
            targets = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: store_synth PATH [--hours H] [--targets T] [--threads N]"
                            " [--rate HZ]\n");
            return 2;
        }
    }
    if (!path || hours <= 0 || targets < 1 || threads < 5 || rate < 1 || rate > 10000) {
        fprintf(stderr, "store_synth: a path, hours > 0, targets >= 1, threads >= 5, rate"
                        " 1-10000\n");
        return 2;
    }
    if (store_open(path, &store, &err) < 0) { /* the daemon's schema, every migration */
        fprintf(stderr, "store_synth: %s\n", err.msg);
        return 1;
    }
    store_free(store);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die(db, path);
    exec(db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -200000;"
             " BEGIN");
    dictionaries(db);

    struct kind main_k, loader_k;
    kind_init(&main_k, 0, MAIN_STACKS, 0.5, 0.95, 0.9);
    kind_init(&loader_k, MAIN_STACKS, LOADER_STACKS, 0.3, 0.33, 0.5);

    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t minute_ns = 60000000000LL, minutes = (int64_t)(hours * 60 + 0.5);
    const int64_t end_min = ((int64_t)now.tv_sec * 1000000000LL + now.tv_nsec) / minute_ns;
    const int64_t first_min = end_min - minutes;
    const int64_t period_ns = 1000000000LL / rate;
    const size_t per_minute = (size_t)(60LL * rate);

    sqlite3_stmt *tg = prepare(
        db, "INSERT INTO targets(id, pid, start_time, uid, cmdline, py_version, rate_hz, rank,"
            " local_rank, world_size, attached_ns, ended_ns, end_reason)"
            " VALUES (?, ?, ?, 0, ?, '3.12.3', ?, ?, ?, ?, ?, ?, 'detached')");
    sqlite3_stmt *th = prepare(db, "INSERT INTO threads(target_id, tid, name, os_name)"
                                   " VALUES (?, ?, ?, ?)");
    sqlite3_stmt *bl = prepare(db, "INSERT INTO sample_blocks(target_id, first_ns, tid, last_ns,"
                                   " n, data) VALUES (?, ?, ?, ?, ?, ?)");
    sqlite3_stmt *sc = prepare(db, "INSERT INTO stack_counts(target_id, span_s, bucket, tid,"
                                   " stack_id, state, n) VALUES (?, ?, ?, ?, ?, ?, ?)");
    struct block_sample *samples = calloc(per_minute, sizeof(*samples));
    uint32_t *idx = calloc(per_minute, sizeof(*idx));
    uint8_t *out = malloc(blocks_encode_max(per_minute, STACKS));
    struct counts *minute_c = calloc(1, sizeof(*minute_c));
    struct counts *hour_c = calloc((size_t)threads, sizeof(*hour_c));
    int *wait_stack = calloc((size_t)threads, sizeof(int));
    int64_t n_samples = 0, n_blocks = 0, n_counts = 0;

    if (!samples || !idx || !out || !minute_c || !hour_c || !wait_stack)
        die(NULL, "memory");
    for (int t = 0; t < threads; t++)
        wait_stack[t] = MAIN_STACKS + LOADER_STACKS + (int)(rnd() % WAIT_STACKS);
    for (int tgt = 1; tgt <= targets; tgt++) {
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "python3 train.py --rank %d", tgt - 1);
        sqlite3_bind_int(tg, 1, tgt);
        sqlite3_bind_int(tg, 2, 900000 + tgt);
        sqlite3_bind_int(tg, 3, tgt);
        sqlite3_bind_text(tg, 4, cmd, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(tg, 5, rate);
        sqlite3_bind_int(tg, 6, tgt - 1);
        sqlite3_bind_int(tg, 7, tgt - 1);
        sqlite3_bind_int(tg, 8, targets);
        sqlite3_bind_int64(tg, 9, first_min * minute_ns);
        sqlite3_bind_int64(tg, 10, end_min * minute_ns);
        step(db, tg);
        for (int t = 0; t < threads; t++) {
            char name[32];
            int tid = (900000 + tgt) * 16 + t;
            if (t == 0)
                snprintf(name, sizeof(name), "MainThread");
            else if (t < 4)
                snprintf(name, sizeof(name), "pt_data_worker_%d", t - 1);
            else
                snprintf(name, sizeof(name), "Thread-%d", t);
            sqlite3_bind_int(th, 1, tgt);
            sqlite3_bind_int(th, 2, tid);
            sqlite3_bind_text(th, 3, name, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(th, 4, t == 0 ? "python3" : name, -1, SQLITE_TRANSIENT);
            step(db, th);
        }
    }
    for (int tgt = 1; tgt <= targets; tgt++) {
        for (int64_t m = first_min; m < end_min; m++) {
            for (int t = 0; t < threads; t++) {
                int tid = (900000 + tgt) * 16 + t, prev = -1, block_of[STACKS];
                int64_t stacks_k[STACKS], last_ns;
                size_t k = 0;
                const struct kind *kd = t == 0 ? &main_k : t < 4 ? &loader_k : NULL;

                memset(block_of, -1, sizeof(block_of));
                for (size_t i = 0; i < per_minute; i++) {
                    int s, state = 0;
                    if (!kd)
                        s = wait_stack[t] + (rnd() % 500 == 0); /* now and then another */
                    else if (prev >= 0 && rnd01() < kd->stay)
                        s = prev;
                    else
                        s = kind_pick(kd);
                    if (s >= STACKS)
                        s = STACKS - 1;
                    if (kd && rnd01() < kd->on_cpu)
                        state = 1 | (rnd01() < kd->gil ? 2 : 0);
                    if (t == 0 && rnd() % 100 == 0)
                        state |= 4;
                    prev = s;
                    if (block_of[s] < 0) {
                        block_of[s] = (int)k;
                        stacks_k[k++] = stack_ids[s];
                    }
                    /* the sampler's ticks, a few microseconds late now and then */
                    samples[i] =
                        (struct block_sample){.ts_ns = m * minute_ns + (int64_t)i * period_ns +
                                                       (int64_t)(rnd() % 4) * 1000,
                                              .stack_id = stack_ids[s],
                                              .state = state};
                    idx[i] = (uint32_t)block_of[s];
                    minute_c->n[s][state]++;
                    hour_c[t].n[s][state]++;
                }
                size_t len = blocks_encode(samples, idx, per_minute, stacks_k, k, samples[0].ts_ns,
                                           out, &last_ns);
                sqlite3_bind_int(bl, 1, tgt);
                sqlite3_bind_int64(bl, 2, samples[0].ts_ns);
                sqlite3_bind_int(bl, 3, tid);
                sqlite3_bind_int64(bl, 4, last_ns);
                sqlite3_bind_int64(bl, 5, (int64_t)per_minute);
                sqlite3_bind_blob(bl, 6, out, (int)len, SQLITE_STATIC);
                step(db, bl);
                write_counts(db, sc, tgt, 60, m, tid, minute_c, &n_counts);
                n_samples += (int64_t)per_minute;
                n_blocks++;
                /* an hour's counts once its last minute is written (or the store's) */
                if ((m + 1) % 60 == 0 || m + 1 == end_min)
                    write_counts(db, sc, tgt, 3600, m / 60, tid, &hour_c[t], &n_counts);
            }
        }
        fprintf(stderr, "store_synth: rank %d of %d written (%" PRId64 " samples)\n", tgt, targets,
                n_samples);
    }
    sqlite3_finalize(tg);
    sqlite3_finalize(th);
    sqlite3_finalize(bl);
    sqlite3_finalize(sc);
    exec(db, "COMMIT"); /* no ANALYZE: the daemon runs none, so plans stay its own */
    if (sqlite3_close(db) != SQLITE_OK)
        die(db, "closing");
    printf("{\"samples\": %" PRId64 ", \"blocks\": %" PRId64 ", \"stack_counts\": %" PRId64
           ", \"first_ns\": %" PRId64 ", \"end_ns\": %" PRId64 "}\n",
           n_samples, n_blocks, n_counts, first_min * minute_ns, end_min * minute_ns);
    free(samples);
    free(idx);
    free(out);
    free(minute_c);
    free(hour_c);
    free(wait_stack);
    return 0;
}
