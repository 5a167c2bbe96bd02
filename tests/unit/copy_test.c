/*
 * copy_test.c - pyf_target__stack_of_copy() against real interpreters: a thread's frame chain
 * copied the way the eBPF sampler copies it (bpf/oncpu.bpf.c: from the thread state, through
 * the cframe where there is one, each frame's first fr_bytes and its back pointer) decodes to
 * the stack pyf_target__stack() reads; a copy whose chain does not hold together is torn, one
 * with too few bytes a frame is refused, and one deeper than the stack's room is truncated.
 * usage: copy_test <python> <target.py>   (tests/targets/shapes.py: threads parked in place)
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pyframes.h"
#include "remote.h"
#include "spawn.h"

#define THREADS_CAP 64
#define COPY_FRAMES 256
#define STRIDE 128 /* what the eBPF sampler copies of each frame */

struct copy {
    uint64_t raddrs[COPY_FRAMES];
    uint8_t bytes[COPY_FRAMES * STRIDE];
    struct pyf_frames_copy c;
};

/* The chain of @tstate as the eBPF program copies it. */
static int copy_chain(pid_t pid, const struct pyf_chain *ch, uint64_t tstate, struct copy *cp)
{
    const struct remote_src src = {.pid = pid}, *mem = &src;
    uint64_t f = 0;
    size_t n = 0;

    if (remote_read(mem, tstate + (uint64_t)ch->ts_frame, &f, 8) < 0)
        return -1;
    if (ch->cframe_frame >= 0 && f && remote_read(mem, f + (uint64_t)ch->cframe_frame, &f, 8) < 0)
        return -1;
    for (; f && n < COPY_FRAMES; n++) {
        cp->raddrs[n] = f;
        if (remote_read(mem, f, cp->bytes + n * STRIDE, ch->fr_bytes) < 0 ||
            remote_read(mem, f + (uint64_t)ch->fr_back, &f, 8) < 0)
            return -1;
    }
    cp->c = (struct pyf_frames_copy){
        .raddrs = cp->raddrs, .bytes = cp->bytes, .stride = STRIDE, .n = n};
    return f ? -1 : 0;
}

static bool same_frames(const struct pyf_stack *a, const struct pyf_stack *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct pyf_frame *x = &a->frames[i], *y = &b->frames[i];
        if (strcmp(x->func, y->func) != 0 || strcmp(x->file, y->file) != 0 || x->line != y->line ||
            x->frame_raddr != y->frame_raddr || x->entry != y->entry)
            return false;
    }
    return true;
}

static bool same_stack(const struct pyf_stack *a, const struct pyf_stack *b)
{
    return a->n_frames == b->n_frames && same_frames(a, b, a->n_frames);
}

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), 1)

/* Reads @th, copies its chain, reads it again: 1 when the two reads agree (the thread stayed
 * put meanwhile, so the copy is of that stack too), 0 when not, -1 on errors. */
static int read_and_copy(struct pyf_target *t, const struct pyf_chain *ch,
                         const struct pyf_thread *th, struct pyf_stack *read_st, struct copy *cp)
{
    static struct pyf_frame again_frames[PYF_DEPTH_MAX];
    struct pyf_stack again = {.frames = again_frames, .cap = PYF_DEPTH_MAX};
    struct pyf_err e;

    if (pyf_target__stack(t, th, read_st, &e) < 0 ||
        copy_chain(pyf_target__info(t)->pid, ch, th->tstate_raddr, cp) < 0 ||
        pyf_target__stack(t, th, &again, &e) < 0)
        return -1;
    return same_stack(read_st, &again);
}

static void print_both(const struct pyf_stack *copy_st, const struct pyf_stack *read_st)
{
    for (size_t i = 0; i < copy_st->n_frames || i < read_st->n_frames; i++)
        fprintf(stderr, "  %zu: copy %s:%d%s | read %s:%d%s\n", i,
                i < copy_st->n_frames ? copy_st->frames[i].func : "-",
                i < copy_st->n_frames ? copy_st->frames[i].line : 0,
                i < copy_st->n_frames && copy_st->frames[i].entry ? " entry" : "",
                i < read_st->n_frames ? read_st->frames[i].func : "-",
                i < read_st->n_frames ? read_st->frames[i].line : 0,
                i < read_st->n_frames && read_st->frames[i].entry ? " entry" : "");
}

/* One parked thread: the copy decodes to its stack; broken copies fail as they should. The
 * thread running (shapes.py's busy one) is left out: its copy and reads are of different
 * instants; a parked thread that moves between the reads all the same is tried again. */
static int check_thread(struct pyf_target *t, const struct pyf_chain *ch,
                        const struct pyf_thread *th, struct pyf_stack *read_st,
                        struct pyf_stack *copy_st, struct copy *cp, bool *ret_checked)
{
    struct pyf_err e;
    size_t cap = copy_st->cap;
    int attempt, r = 0;

    *ret_checked = false;
    if (th->on_cpu)
        return 0;
    for (attempt = 0; attempt < 5; attempt++) {
        r = read_and_copy(t, ch, th, read_st, cp);
        if (r < 0 || read_st->n_frames < 3)
            return 0; /* gone, or too shallow to tell anything */
        if (r == 0)
            continue;
        if (pyf_target__stack_of_copy(t, &cp->c, copy_st, &e) < 0)
            return FAIL("thread %d: the copy did not decode: %s\n", th->tid, e.msg);
        if (same_stack(read_st, copy_st) && !copy_st->truncated)
            break;
    }
    if (attempt == 5 && r == 0)
        return 0;
    if (attempt == 5) {
        print_both(copy_st, read_st);
        return FAIL("thread %d: the copy decoded to %zu frames, the read gave %zu\n", th->tid,
                    copy_st->n_frames, read_st->n_frames);
    }
    *ret_checked = true;
    /* room for 2 frames: the innermost two, and the stack says it is truncated */
    copy_st->cap = 2;
    if (pyf_target__stack_of_copy(t, &cp->c, copy_st, &e) < 0 || !copy_st->truncated ||
        copy_st->n_frames > 2 || !same_frames(read_st, copy_st, copy_st->n_frames))
        return FAIL("thread %d: a copy deeper than the stack's room\n", th->tid);
    copy_st->cap = cap;
    cp->raddrs[1] += 8; /* frame 0 no longer calls frame 1: not one instant's chain */
    if (pyf_target__stack_of_copy(t, &cp->c, copy_st, &e) != -EFAULT || e.kind != PYF_TORN ||
        !strstr(e.msg, "does not call the next one") || copy_st->n_frames != 0 || !copy_st->torn)
        return FAIL("thread %d: a broken chain gave kind %d '%s'\n", th->tid, e.kind, e.msg);
    cp->raddrs[1] -= 8;
    cp->c.stride = ch->fr_bytes - 8; /* fewer bytes a frame than the decoding reads */
    if (pyf_target__stack_of_copy(t, &cp->c, copy_st, &e) != -EINVAL || e.kind != PYF_INVALID)
        return FAIL("thread %d: short frames gave kind %d '%s'\n", th->tid, e.kind, e.msg);
    return 0;
}

static int run(pid_t pid)
{
    static struct pyf_thread threads[THREADS_CAP];
    static struct pyf_frame read_frames[PYF_DEPTH_MAX], copy_frames[PYF_DEPTH_MAX];
    static struct copy cp;
    struct pyf_stack read_st = {.frames = read_frames, .cap = PYF_DEPTH_MAX};
    struct pyf_stack copy_st = {.frames = copy_frames, .cap = PYF_DEPTH_MAX};
    struct pyf_target *t;
    struct pyf_chain ch;
    struct pyf_err e;
    size_t n, checked = 0;
    int failed = 0;

    if (pyf_target_open(pid, &t, &e) < 0)
        return FAIL("open: %s\n", e.msg);
    pyf_target__chain(t, &ch);
    if (ch.fr_bytes > STRIDE || ch.fr_bytes < 16) {
        pyf_target_free(t);
        return FAIL("fr_bytes %u: not what the eBPF sampler copies\n", ch.fr_bytes);
    }
    /* a thread list read while it changes is torn, as the API says: read again (CI: 3.8's
     * list read once through a thread state being freed, "thread list broken at 0x912f...") */
    for (int tries = 0; pyf_target__threads(t, threads, THREADS_CAP, &n, &e) < 0; tries++) {
        if (e.kind != PYF_TORN || tries == 20) {
            pyf_target_free(t);
            return FAIL("threads: %s\n", e.msg);
        }
        usleep(10000);
    }
    for (size_t i = 0; i < n; i++) {
        bool ok;
        failed |= check_thread(t, &ch, &threads[i], &read_st, &copy_st, &cp, &ok);
        checked += ok;
    }
    printf("%s: %zu of %zu threads compared, frames %u bytes each\n",
           pyf_target__info(t)->version_str, checked, n, ch.fr_bytes);
    pyf_target_free(t);
    if (checked < 3)
        return FAIL("only %zu parked threads could be compared\n", checked);
    return failed;
}

int main(int argc, char **argv)
{
    pid_t pid;
    int r;

    if (argc != 3)
        return fprintf(stderr, "usage: copy_test <python> <target.py>\n"), 2;
    if (access(argv[1], X_OK) != 0) {
        printf("copy_test: %s is not installed on this machine: skipped\n", argv[1]);
        return 77; /* CTest SKIP_RETURN_CODE: reported as skipped, with this line */
    }
    pid = spawn_target(argv[1], argv[2]);
    if (pid < 0)
        return fprintf(stderr, "copy_test: target did not start\n"), 2;
    r = run(pid);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return r;
}
