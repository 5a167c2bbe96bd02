/*
 * fault_test.c - every remote read in libpyframes, made to fail in turn.
 *
 * Built against pyframes_faults (PYF_FAULTS): remote_faults makes the Nth read from now fail
 * with EFAULT, ESRCH or EPERM. For each N until a whole pass (open, threads, stacks, locals;
 * with `tasks`, open and the asyncio tasks) completes without reaching the fault, the pass must
 * end in a clean error (right kind, message set) and free everything: run under ASan, a leak or
 * overflow fails the test.
 * usage: fault_test <python> <target.py> [threads|tasks [STRIDE]]
 * STRIDE: only every STRIDE-th read is made to fail, from a different first one for each errno
 * (the tasks pass reads ~2,700 times; every read, each errno: 8,000 passes, 4 minutes). With a
 * STRIDE of 3, each read still fails once, with one of the three errnos (the sanitizer run's
 * threads passes: a third of the time).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pyframes.h"
#include "remote.h"
#include "spawn.h"

#define THREADS_CAP 64

static int on_local(void *ctx, const char *name, const char *value)
{
    (void)ctx, (void)name, (void)value;
    return 0;
}

/* One full pass; returns 0 on success, the error otherwise. @tasks: the asyncio tasks (all,
 * then the running ones) instead of the threads, stacks and locals. */
static int pass(pid_t pid, bool tasks, struct pyf_err *e)
{
    static struct pyf_thread threads[THREADS_CAP];
    static struct pyf_frame frames[PYF_DEPTH_MAX];
    struct pyf_stack st = {.frames = frames, .cap = PYF_DEPTH_MAX};
    struct pyf_target *t;
    size_t n;
    int r = pyf_target_open(pid, &t, e);

    if (r < 0)
        return r;
    if (tasks) { /* a read that fails leaves a task out (torn) or fails the call */
        struct pyf_tasks *all = NULL;
        struct pyf_running_task run[4];
        struct pyf_current_task current[4];

        r = pyf_target__tasks(t, 64, &all, e);
        pyf_tasks_free(all);
        if (r == 0)
            r = pyf_target__running_tasks(t, NULL, 0, run, 4, &n, e);
        if (r == 0)
            r = pyf_target__current_tasks(t, NULL, 0, current, 4, &n, e);
        pyf_target_free(t);
        return r;
    }
    r = pyf_target__threads(t, threads, THREADS_CAP, &n, e);
    for (size_t i = 0; r == 0 && i < n; i++) {
        st.n_frames = 0;
        r = pyf_target__stack(t, &threads[i], &st, e);
        for (size_t f = 0; r == 0 && f < st.n_frames && f < 3; f++)
            r = pyf_target__locals(t, &st.frames[f], on_local, NULL, e);
    }
    pyf_target_free(t);
    return r;
}

int main(int argc, char **argv)
{
    static const int errs[] = {EFAULT, ESRCH, EPERM};
    unsigned long passed = 0, failed = 0;
    pid_t pid;

    bool tasks = argc >= 4 && strcmp(argv[3], "tasks") == 0;
    bool threads = argc < 4 || strcmp(argv[3], "threads") == 0;
    long stride = argc == 5 ? atol(argv[4]) : 1;

    if (argc < 3 || argc > 5 || !(tasks || threads) || stride < 1)
        return fprintf(stderr, "usage: fault_test <python> <target.py> [threads|tasks [STRIDE]]\n"),
               2;
    if (access(argv[1], X_OK) != 0) {
        printf("fault_test: %s is not installed on this machine: skipped\n", argv[1]);
        return 77; /* CTest SKIP_RETURN_CODE: reported as skipped, with this line */
    }
    pid = spawn_target(argv[1], argv[2]);
    if (pid < 0)
        return fprintf(stderr, "fault_test: target did not start\n"), 2;
    for (size_t k = 0; k < sizeof(errs) / sizeof(errs[0]); k++) {
        for (long nth = 1 + (long)k % stride;; nth += stride) {
            struct pyf_err e;
            int r;

            memset(&e, 0, sizeof(e));
            remote_faults = (struct remote_faults){.countdown = nth, .err = errs[k]};
            r = pass(pid, tasks, &e);
            if (remote_faults.countdown > 0) /* the fault was never reached: swept them all */
                break;
            if (r < 0 && e.msg[0] && e.kind != PYF_OK) {
                passed++;
            } else if (r == 0) {
                passed++; /* a failed read that the library legitimately retries around */
            } else {
                failed++;
                fprintf(stderr, "read %ld (%s): r=%d kind=%d msg='%s'\n", nth, strerror(errs[k]), r,
                        e.kind, e.msg);
            }
            if (errs[k] == ESRCH && r < 0 && e.kind != PYF_GONE && e.kind != PYF_TORN) {
                failed++;
                fprintf(stderr, "read %ld: ESRCH gave kind %d\n", nth, e.kind);
            }
        }
    }
    remote_faults = (struct remote_faults){0};
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("%lu passed, %lu failed\n", passed, failed);
    return failed != 0 || passed == 0;
}
