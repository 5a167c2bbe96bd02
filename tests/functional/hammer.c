/*
 * hammer.c - reads a target's threads and stacks N times as fast as it can, for the stress
 * tests: every read must end in success or a clean error, never a crash or a hang. Even
 * rounds read thread by thread, odd rounds with pyf_target__sample().
 * usage: hammer <pid> <iterations>; prints {"ok":..,"torn":..,"gone":..,"other":..,...}.
 * Exit status: 0 when only ok/torn/gone were seen, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pyframes.h"

#define THREADS_CAP 256

struct counts {
    unsigned long ok, torn, gone, other, frames, stacks;
    char last_other[240];
};

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
    static struct pyf_frame frames[THREADS_CAP][64];
    struct pyf_stack stacks[THREADS_CAP] = {{0}};
    struct counts c = {0};
    struct pyf_target *t;
    struct pyf_err e;
    long n_iter;

    if (argc != 3)
        return fprintf(stderr, "usage: hammer <pid> <iterations>\n"), 2;
    n_iter = atol(argv[2]);
    if (pyf_target_open(atoi(argv[1]), &t, &e) < 0)
        return fprintf(stderr, "hammer: %s\n", e.msg), e.kind == PYF_GONE ? 3 : 1;
    for (int i = 0; i < THREADS_CAP; i++)
        stacks[i] = (struct pyf_stack){.frames = frames[i], .cap = 64};
    for (long it = 0; it < n_iter && c.gone == 0; it++) {
        size_t n = 0;
        int r;

        if (it % 2) { /* odd rounds: the daemon's call, all threads in one go */
            r = pyf_target__sample(t, threads, stacks, THREADS_CAP, &n, &e);
            count(&c, r, &e);
            for (size_t i = 0; r == 0 && i < n; i++) {
                c.torn += stacks[i].torn;
                c.stacks += !stacks[i].torn;
                c.frames += stacks[i].n_frames;
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
            if (rs == 0 && stacks[i].n_frames && it % 50 == 0) /* locals: a slower path */
                count(&c, pyf_target__locals(t, &stacks[i].frames[0], on_local, &c, &e), &e);
            if (c.gone)
                break;
        }
    }
    printf("{\"ok\": %lu, \"torn\": %lu, \"gone\": %lu, \"other\": %lu, \"stacks\": %lu, "
           "\"frames\": %lu, \"last_other\": \"%s\"}\n",
           c.ok, c.torn, c.gone, c.other, c.stacks, c.frames, c.last_other);
    pyf_target_free(t);
    return c.other ? 1 : 0;
}
