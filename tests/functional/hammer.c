/*
 * hammer.c - reads a target's threads and stacks N times as fast as it can, for the stress
 * tests: every read must end in success or a clean error, never a crash or a hang. Even
 * rounds read thread by thread, odd rounds with pyf_target__sample().
 * usage: hammer [-p <us>] <pid> <iterations> [<max depth> <roots>]; prints {"ok":..,...}.
 * -p: a pause of <us> microseconds after each round. Back to back, 5,000 rounds take 80 ms:
 * one preemption of the target then covers hundreds of reads of one frozen instant, and an
 * instant no read can make sense of (3.12 entering its eval loop, its cframe pointed at
 * before it is filled in) counts hundreds of times. Paced, reads spread over the target's
 * running time as a sampler's do.
 * With the ground truth of the target (its deepest stack, and the functions its threads
 * start in, comma-separated), every stack returned is also checked against it: "deeper"
 * counts stacks with more frames than the target ever has (a looped chain), "rootless"
 * complete stacks whose outermost frame is not a root (a torn chain ending elsewhere).
 * Exit status: 0 when only ok/torn/gone were seen, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pyframes.h"

#define THREADS_CAP 256
#define DEPTH_CAP 256 /* the daemon's */

struct counts {
    unsigned long ok, torn, gone, other, frames, stacks, deeper, rootless;
    char last_other[240], last_wrong[240];
};

/* The ground truth: 0 / NULL when not given. */
static size_t max_depth;
static const char *roots;

/* Whether @func is one of the comma-separated @roots. */
static int is_root(const char *func)
{
    size_t len = strlen(func);

    for (const char *p = roots; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);

        if (n == len && strncmp(p, func, n) == 0)
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static void check_truth(struct counts *c, const struct pyf_stack *st)
{
    const struct pyf_frame *root = st->n_frames ? &st->frames[st->n_frames - 1] : NULL;

    if (!max_depth || st->torn)
        return;
    if (st->n_frames > max_depth) {
        c->deeper++;
        snprintf(c->last_wrong, sizeof(c->last_wrong), "%zu frames, innermost %s:%d", st->n_frames,
                 st->frames[0].func, st->frames[0].line);
    } else if (root && !st->truncated && !is_root(root->func)) {
        c->rootless++;
        snprintf(c->last_wrong, sizeof(c->last_wrong), "%zu frames from %s:%d", st->n_frames,
                 root->func, root->line);
    }
}

static void count(struct counts *c, int r, const struct pyf_err *e)
{
    if (r == 0)
        c->ok++;
    else if (e->kind == PYF_TORN)
        c->torn++;
    else if (e->kind == PYF_GONE)
        c->gone++;
    else
        c->other++, snprintf(c->last_other, sizeof(c->last_other), "%s", e->msg);
}

static int on_local(void *ctx, const char *name, const char *value)
{
    (void)ctx;
    return name && value ? 0 : -1;
}

int main(int argc, char **argv)
{
    static struct pyf_thread threads[THREADS_CAP];
    static struct pyf_frame frames[THREADS_CAP][DEPTH_CAP];
    struct pyf_stack stacks[THREADS_CAP] = {{0}};
    struct counts c = {0};
    struct pyf_target *t;
    struct pyf_err e;
    long n_iter, pause_us = 0;
    int opt;

    while ((opt = getopt(argc, argv, "p:")) != -1)
        if (opt == 'p' && (pause_us = atol(optarg)) >= 0 && pause_us < 1000000)
            continue;
        else
            return fprintf(stderr, "hammer: -p takes microseconds, below 1,000,000\n"), 2;
    argc -= optind - 1;
    argv += optind - 1;
    if (argc != 3 && argc != 5)
        return fprintf(stderr,
                       "usage: hammer [-p <us>] <pid> <iterations> [<max depth> <roots>]\n"),
               2;
    n_iter = atol(argv[2]);
    if (argc == 5) {
        max_depth = (size_t)atol(argv[3]);
        roots = argv[4];
    }
    if (pyf_target_open(atoi(argv[1]), &t, &e) < 0)
        return fprintf(stderr, "hammer: %s\n", e.msg), e.kind == PYF_GONE ? 3 : 1;
    for (int i = 0; i < THREADS_CAP; i++)
        stacks[i] = (struct pyf_stack){.frames = frames[i], .cap = DEPTH_CAP};
    for (long it = 0; it < n_iter && c.gone == 0; it++) {
        size_t n = 0;
        int r;

        if (pause_us > 0)
            nanosleep(&(struct timespec){.tv_nsec = pause_us * 1000}, NULL);
        if (it % 2) { /* odd rounds: the daemon's call, all threads in one go */
            r = pyf_target__sample(t, threads, stacks, THREADS_CAP, &n, &e);
            count(&c, r, &e);
            for (size_t i = 0; r == 0 && i < n; i++) {
                c.torn += stacks[i].torn;
                c.stacks += !stacks[i].torn;
                c.frames += stacks[i].n_frames;
                check_truth(&c, &stacks[i]);
            }
            continue;
        }
        r = pyf_target__threads(t, threads, THREADS_CAP, &n, &e);
        count(&c, r, &e);
        for (size_t i = 0; r == 0 && i < n; i++) {
            int rs = pyf_target__stack(t, &threads[i], &stacks[i], &e);
            count(&c, rs, &e);
            c.stacks += rs == 0;
            c.frames += rs == 0 ? stacks[i].n_frames : 0;
            if (rs == 0)
                check_truth(&c, &stacks[i]);
            if (rs == 0 && stacks[i].n_frames && it % 50 == 0) /* locals: a slower path */
                count(&c, pyf_target__locals(t, &stacks[i].frames[0], on_local, &c, &e), &e);
            if (c.gone)
                break;
        }
    }
    printf("{\"ok\": %lu, \"torn\": %lu, \"gone\": %lu, \"other\": %lu, \"stacks\": %lu, "
           "\"frames\": %lu, \"deeper\": %lu, \"rootless\": %lu, \"last_other\": \"%s\", "
           "\"last_wrong\": \"%s\"}\n",
           c.ok, c.torn, c.gone, c.other, c.stacks, c.frames, c.deeper, c.rootless, c.last_other,
           c.last_wrong);
    pyf_target_free(t);
    return c.other ? 1 : 0;
}
