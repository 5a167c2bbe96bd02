/* test_daemon_parts.c - the daemon's small pure parts: units, outbox, content-hash ids. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sample/hashid.h"
#include "sample/outbox.h"
#include "sample/targets.h"
#include "unit.h"
#include "common/procfs.h"
#include "common/units.h"

int test_units(void);
int test_outbox_fills_drops_and_swaps(void);
int test_hashid_stable(void);
int test_targets_make_room(void);
int test_identity_of_an_exited_child(void);

int test_units(void)
{
    CHECK(units_duration_ns("30s") == 30000000000LL);
    CHECK(units_duration_ns("90") == 90000000000LL);
    CHECK(units_duration_ns("250ms") == 250000000LL);
    CHECK(units_duration_ns("5m") == 300000000000LL);
    CHECK(units_duration_ns("5 min") == 300000000000LL);
    CHECK(units_duration_ns("1.5h") == 5400000000000LL);
    CHECK(units_duration_ns("7d") == 7 * 86400000000000LL);
    CHECK(units_duration_ns("") == -1 && units_duration_ns(NULL) == -1);
    CHECK(units_duration_ns("5x") == -1 && units_duration_ns("-3s") == -1);
    CHECK(units_duration_ns("s") == -1);
    CHECK(units_duration_ns("nan") == -1 && units_duration_ns("inf") == -1);
    CHECK(units_duration_ns("1e12d") == -1 && units_size_bytes("1e30") == -1);
    /* compound, fractions, the units people write (issue 39) */
    CHECK(units_duration_ns("1h30m") == 5400000000000LL);
    CHECK(units_duration_ns("1h30m15s") == 5415000000000LL);
    CHECK(units_duration_ns("2m 30s") == 150000000000LL);
    CHECK(units_duration_ns("1d12h") == 129600000000000LL);
    CHECK(units_duration_ns("0.5") == 500000000LL && units_duration_ns(".5s") == 500000000LL);
    CHECK(units_duration_ns("2m") == 120000000000LL && units_duration_ns("2min") == 120000000000LL);
    CHECK(units_duration_ns("1500us") == 1500000LL && units_duration_ns("10ns") == 10);
    CHECK(units_duration_ns("1h30") == -1 && units_duration_ns("1h30 ") == -1); /* bare: alone */
    CHECK(units_duration_ns("5mx") == -1 && units_duration_ns("1hh") == -1);
    CHECK(units_duration_ns("0x10") == -1 && units_duration_ns("1e3") == -1);
    CHECK(units_duration_ns("+5s") == -1 && units_duration_ns(".") == -1);
    CHECK(units_duration_ns("5 m") == 300000000000LL && units_duration_ns("5s ") == 5000000000LL);
    CHECK(units_size_bytes("nanG") == -1 && units_size_bytes("1e9T") == -1);
    CHECK(units_size_bytes("1000") == 1000);
    CHECK(units_size_bytes("300K") == 300 * 1024);
    CHECK(units_size_bytes("1G") == 1LL << 30 && units_size_bytes("1GiB") == 1LL << 30);
    CHECK(units_size_bytes("2MB") == 2LL << 20);
    CHECK(units_size_bytes("1Q") == -1 && units_size_bytes("G") == -1);
    CHECK(units_size_bytes("1Gx") == -1);
    return 0;
}

int test_outbox_fills_drops_and_swaps(void)
{
    struct outbox *ob;
    struct ob_half *h, *full;
    struct ob_sample s = {.ts_ns = 1, .target_id = 2, .stack_id = 3, .tid = 4, .state = 1};
    int64_t frames[3] = {7, 8, 9};
    size_t cap;

    CHECK(outbox_new(16, &ob) == 0);
    cap = ob->cap_samples;
    h = outbox__lock(ob);
    for (size_t i = 0; i < cap; i++)
        CHECK(ob_half__sample(ob, h, &s));
    CHECK(!ob_half__sample(ob, h, &s)); /* full: dropped and counted, never grown */
    CHECK(h->n_dropped == 1);
    CHECK(ob_half__string(ob, h, 42, "spin_inner"));
    CHECK(ob_half__stack(ob, h, 43, frames, 3, 0));
    CHECK(ob_half__thread(ob, h, 2, 4, "worker", "python3"));
    outbox__unlock(ob);
    full = outbox__swap(ob);
    CHECK(full == h && ob->fill != h);
    CHECK(full->n_samples == cap && full->n_dropped == 1);
    CHECK(full->strings[0].len == 10 &&
          memcmp(full->arena + full->strings[0].off, "spin_inner", 10) == 0);
    CHECK(full->stacks[0].len == 3 &&
          memcmp(full->arena + full->stacks[0].off, frames, sizeof(frames)) == 0);
    CHECK(full->threads[0].id == 2 && full->threads[0].extra == 4);
    h = outbox__lock(ob); /* the other half, empty */
    CHECK(h->n_samples == 0 && h->n_dropped == 0 && h->arena_used == 0);
    outbox__unlock(ob);
    full = outbox__swap(ob); /* and back: the first half comes back emptied */
    h = outbox__lock(ob);
    CHECK(h->n_samples == 0 && h->n_strings == 0 && h->n_stacks == 0);
    outbox__unlock(ob);
    outbox_free(ob);
    return 0;
}

int test_hashid_stable(void)
{
    int64_t a = hashid_frame(hashid_string("f"), hashid_string("x.py"), 10, 1);

    CHECK(a == hashid_frame(hashid_string("f"), hashid_string("x.py"), 10, 1));
    CHECK(a != hashid_frame(hashid_string("f"), hashid_string("x.py"), 11, 1));
    CHECK(a != hashid_frame(hashid_string("g"), hashid_string("x.py"), 10, 1));
    CHECK(hashid_of("", 0) != 0); /* 0 is the empty stack */
    return 0;
}

static struct target *ended_target(pid_t pid)
{
    struct target *t = calloc(1, sizeof(*t));

    if (t) {
        t->pid = pid;
        t->state = TARGET_EXITED;
    }
    return t;
}

/* Lists @t as resumed (its id given: no attach row to record). */
static int add(struct targets *reg, struct target *t)
{
    return targets__add(reg, t, &(struct attach_opts){.resume_id = t->pid}, NULL);
}

/* Ended targets stay listed, but never keep a new attach out: the oldest makes room. */
int test_targets_make_room(void)
{
    struct outbox *ob;
    struct targets *reg;

    CHECK(outbox_new(16, &ob) == 0);
    CHECK(targets_new(ob, 1, &reg) == 0);
    for (pid_t pid = 1; pid <= TARGETS_MAX; pid++)
        CHECK(add(reg, ended_target(pid)) == 0);
    CHECK(reg->n == TARGETS_MAX);
    CHECK(add(reg, ended_target(5000)) == 0); /* pid 1, the oldest, made room */
    CHECK(reg->n == TARGETS_MAX && reg->list[0]->pid == 2);
    CHECK(reg->list[TARGETS_MAX - 1]->pid == 5000);
    CHECK(add(reg, ended_target(700)) == 0); /* the old pid 700 is replaced */
    CHECK(reg->n == TARGETS_MAX && reg->list[TARGETS_MAX - 1]->pid == 700);
    for (size_t i = 0; i + 1 < reg->n; i++)
        CHECK(reg->list[i]->pid != 700);
    for (size_t i = 0; i < reg->n; i++) /* all sampling: a new one is refused */
        reg->list[i]->state = TARGET_SAMPLING;
    {
        struct target *t = ended_target(9999);
        CHECK(add(reg, t) == -ENOSPC);
        free(t);
    }
    for (size_t i = 0; i < reg->n; i++)
        reg->list[i]->state = TARGET_EXITED;
    targets_free(reg);
    outbox_free(ob);
    return 0;
}

/* A child that exited but is not yet reaped (a zombie: `probectl run` waits on its target) has
 * exited, though its pid and start time are still there: its startstack reads 0 then, which
 * once ended such targets as "exec'd another program" (CI, test_run_attaches_from_the_start). */
int test_identity_of_an_exited_child(void)
{
    int pipefd[2];
    int64_t start, start2;
    uint64_t stack, stack2;
    char c;
    pid_t pid;
    int r = -1;

    CHECK(pipe(pipefd) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pipefd[1]);
        (void)!read(pipefd[0], &c, 1); /* lives until the parent closes its end */
        _exit(0);
    }
    close(pipefd[0]);
    CHECK(procfs_identity(pid, &start, &stack) == 0);
    CHECK(start > 0 && stack != 0);
    close(pipefd[1]);
    for (int i = 0; i < 2000; i++) { /* until it is a zombie: up to 2 s */
        r = procfs_identity(pid, &start2, &stack2);
        if (r < 0)
            break;
        /* still itself until it is gone (its memory may go first: a start of stack of 0) */
        CHECK(start2 == start && (stack2 == stack || stack2 == 0));
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    CHECK(r == -ESRCH);
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK(procfs_identity(pid, &start2, &stack2) == -ENOENT);
    return 0;
}
