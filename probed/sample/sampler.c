/* sampler.c - see sampler.h. */
#define _GNU_SOURCE
#include "sample/sampler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "sample/hashid.h"
#include "native/native.h"
#include "common/procfs.h"
#include "stub/stub_proto.h"

/* How far a target may fall behind before ticks are skipped: a few periods, and never less
 * than CATCH_UP_NS, so that a preemption of the sampler (a busy machine's run queue, a VM's
 * hiccup) costs those ticks taken late, back to back, each with its own time, not lost. At
 * 10 kHz, 3 periods (300 us) turned 30-45 % of the ticks into skipped ones. */
#define CATCH_UP_PERIODS 3
#define CATCH_UP_NS 20000000LL

/* How far CLOCK_REALTIME may move against CLOCK_MONOTONIC (NTP's slewing, a step) before the
 * offset between them that stamps the samples (tick_time()) is taken again. */
#define REAL_OFFSET_SLACK_NS 100000LL

/* True when @id was marked sent. The memory is lossy: a collision only costs a
 * definition sent twice. */
static bool already_sent(int64_t *slots, int64_t id)
{
    return slots[(uint64_t)id % SENT_SLOTS] == id;
}

static void mark_sent(int64_t *slots, int64_t id)
{
    slots[(uint64_t)id % SENT_SLOTS] = id;
}

static int64_t string_id(struct sampler *s, struct ob_half *h, const char *str)
{
    int64_t id = hashid_string(str);

    if (!already_sent(s->sent_strings, id) && ob_half__string(s->ob, h, id, str))
        mark_sent(s->sent_strings, id);
    return id;
}

/* A frame of probed's own code in the job's thread (the torch trace's and the collective
 * tracer's wrappers, compiled as "<probed torch>"): the id that stack_id_of_frames() leaves
 * out, so that a stack reads as the job's own program. */
#define PROBED_FRAME_ID 0

static int64_t frame_id_of(struct sampler *s, struct ob_half *h, const struct pyf_frame *f)
{
    struct ob_frame of = {
        .func_id = string_id(s, h, f->func),
        .file_id = string_id(s, h, f->file),
        .line = f->line,
        .first_line = f->first_line,
    };

    of.id = hashid_frame(of.func_id, of.file_id, of.line, of.first_line);
    if (!already_sent(s->sent_frames, of.id) && ob_half__frame(s->ob, h, &of))
        mark_sent(s->sent_frames, of.id);
    return of.id;
}

static int64_t frame_id(struct sampler *s, struct ob_half *h, const struct pyf_frame *f)
{
    if (!s->show_own && f->file && strncmp(f->file, "<probed", 7) == 0)
        return PROBED_FRAME_ID;
    return frame_id_of(s, h, f);
}

/* The id of the stack of the first @n of s->frame_ids, its definition sent when new (with
 * @task_id, the string id of the task it ran for; 0: none). 0: no frames. */
static int64_t stack_id_of_frames(struct sampler *s, struct ob_half *h, size_t n, int64_t task_id)
{
    int64_t id;
    size_t kept = 0;

    for (size_t i = 0; i < n; i++) /* probed's own frames out */
        if (s->frame_ids[i] != PROBED_FRAME_ID)
            s->frame_ids[kept++] = s->frame_ids[i];
    n = kept;
    if (n == 0)
        return 0;
    id = hashid_of(s->frame_ids, n * sizeof(s->frame_ids[0]));
    if (!already_sent(s->sent_stacks, id) && ob_half__stack(s->ob, h, id, s->frame_ids, n, task_id))
        mark_sent(s->sent_stacks, id);
    return id;
}

/* A frame of our own in a stored stack, where frames were left out: "[N frames elided]". */
static int64_t marker_frame_id(struct sampler *s, struct ob_half *h, const char *what)
{
    const struct pyf_frame f = {.func = what, .file = "<probed>"};

    return frame_id_of(s, h, &f); /* probed's words about the stack: kept, unlike its code */
}

/* The asyncio task @st ran this tick (tasktag.h): its frame's id (kind task, named by the
 * task's label) in *ret_frame_id, the index of the task's coroutine frame in @st in *ret_at;
 * returns the label's string id, 0: none. */
static int64_t task_of(struct sampler *s, struct ob_half *h, struct target *t,
                       const struct pyf_stack *st, size_t *ret_at, int64_t *ret_frame_id)
{
    char label[TASKTAG_LABEL_CHARS + 1];
    struct ob_frame of = {.kind = OB_FRAME_TASK, .first_line = -OB_FRAME_TASK};

    if (!tasktag__of(&t->tasks, st, label, sizeof(label), ret_at))
        return 0;
    of.func_id = string_id(s, h, label);
    of.file_id = string_id(s, h, "<task>");
    /* first_line -kind in the hash keeps the id apart from any other kind's */
    of.id = hashid_frame(of.func_id, of.file_id, 0, of.first_line);
    if (!already_sent(s->sent_frames, of.id) && ob_half__frame(s->ob, h, &of))
        mark_sent(s->sent_frames, of.id);
    *ret_frame_id = of.id;
    return of.func_id;
}

/* s->frame_ids[0..n) with frame @id put just outside the one at @k (toward the root). */
static size_t insert_outside(struct sampler *s, size_t n, size_t k, int64_t id)
{
    memmove(&s->frame_ids[k + 2], &s->frame_ids[k + 1], (n - k - 1) * sizeof(s->frame_ids[0]));
    s->frame_ids[k + 1] = id;
    return n + 1;
}

/* The id of Python stack @st (of @t's). A stack deeper than TARGET_DEPTH_MAX keeps both ends,
 * its innermost frames (where time goes) and its outermost (where the thread started, the root
 * of every flame graph), with a marker frame for those in between; a thread deeper than
 * TARGET_READ_DEPTH, whose outermost frames were not read, ends in a marker saying so. The
 * task it ran for goes just outside that task's coroutine frame (none where that frame is
 * among those left out). */
static int64_t stack_id(struct sampler *s, struct ob_half *h, struct target *t,
                        const struct pyf_stack *st)
{
    size_t n = st->n_frames, inner = n, outer = 0, k = 0, at = 0;
    int64_t task_frame = 0, task = task_of(s, h, t, st, &at, &task_frame);
    char what[64];

    if (n + st->truncated > TARGET_DEPTH_MAX) {
        inner = TARGET_DEPTH_MAX / 2;
        outer = TARGET_DEPTH_MAX - inner - 1 - st->truncated;
    }
    if (task && at >= inner && at < n - outer)
        task = 0; /* left out */
    for (size_t i = 0; i < inner; i++) {
        s->frame_ids[k++] = frame_id(s, h, &st->frames[i]);
        if (task && i == at)
            s->frame_ids[k++] = task_frame;
    }
    if (outer || inner < n) {
        snprintf(what, sizeof(what), "[%zu frames elided]", n - inner - outer);
        s->frame_ids[k++] = marker_frame_id(s, h, what);
    }
    for (size_t i = n - outer; i < n; i++) {
        s->frame_ids[k++] = frame_id(s, h, &st->frames[i]);
        if (task && i == at)
            s->frame_ids[k++] = task_frame;
    }
    if (st->truncated) {
        snprintf(what, sizeof(what), "[deeper than %zu frames: the rest not read]", st->cap);
        s->frame_ids[k++] = marker_frame_id(s, h, what);
    }
    return stack_id_of_frames(s, h, k, task);
}

/* The frame id of native address @pc, named once (the target's cache by address); the name
 * is its symbol, else its offset in the object. *ret_eval_loop: the interpreter's eval loop. */
static int64_t native_frame_id(struct sampler *s, struct ob_half *h, struct native *nat,
                               uint64_t pc, bool innermost, bool *ret_eval_loop)
{
    struct pyf_native_frame f;
    struct ob_frame of = {.kind = OB_FRAME_NATIVE};
    char offset[64];
    int64_t id;

    if (native__cached(nat, pc, &id, ret_eval_loop) && already_sent(s->sent_frames, id))
        return id;
    native__name(nat, pc, innermost, &f);
    /* no symbol (a stripped library, Ubuntu's libc): named by its object and offset, as
     * backtrace and perf name it, so that a table of functions says whose it is */
    if (f.object)
        snprintf(offset, sizeof(offset), "%.40s+0x%llx",
                 strrchr(f.object, '/') ? strrchr(f.object, '/') + 1 : f.object,
                 (unsigned long long)f.object_offset);
    else
        snprintf(offset, sizeof(offset), "0x%llx", (unsigned long long)f.object_offset);
    of.func_id = string_id(s, h, f.function ? f.function : offset);
    of.file_id = string_id(s, h, f.object ? f.object : "[anon]");
    /* line and first_line are 0; first_line -kind in the hash keeps the id apart from any
     * Python frame's (their first_line is >= 0) */
    of.id = hashid_frame(of.func_id, of.file_id, 0, -OB_FRAME_NATIVE);
    if (!already_sent(s->sent_frames, of.id) && ob_half__frame(s->ob, h, &of))
        mark_sent(s->sent_frames, of.id);
    native__remember(nat, pc, of.id, f.eval_loop);
    *ret_eval_loop = f.eval_loop;
    return of.id;
}

/* Python stack @st with native stack @ns, merged into s->frame_ids (pyf_mixed_order), with
 * the task it ran for (*ret_task: its label's string id, 0: none) outside its coroutine frame.
 * Returns the number of frames, or 0 when the two disagree: the Python stack moved on between
 * the kernel's sample and the read. */
static size_t merge_native(struct sampler *s, struct ob_half *h, struct target *t,
                           const struct pyf_stack *st, const struct native_stack *ns,
                           int64_t *ret_task)
{
    size_t n, at = 0;
    int64_t task_frame = 0;
    bool agree;

    *ret_task = 0;
    for (size_t i = 0; i < ns->n_pcs; i++)
        s->native_ids[i] = native_frame_id(s, h, t->native, ns->pcs[i], i == 0, &s->native_eval[i]);
    n = pyf_mixed_order(s->native_eval, ns->n_pcs, st, s->mixed_order, &agree);
    if (!agree)
        return 0;
    for (size_t k = 0; k < n; k++)
        s->frame_ids[k] = s->mixed_order[k] >= 0
                              ? s->native_ids[s->mixed_order[k]]
                              : frame_id(s, h, &st->frames[-s->mixed_order[k] - 1]);
    if ((*ret_task = task_of(s, h, t, st, &at, &task_frame)) == 0)
        return n;
    for (size_t k = 0; k < n; k++)
        if (s->mixed_order[k] == -(int32_t)at - 1)
            return insert_outside(s, n, k, task_frame);
    *ret_task = 0; /* not among the frames merged */
    return n;
}

/* Whether @tid's name was sent; *ret_at: where it goes in the sorted known_tids if not. */
static bool tid_known(const struct target *t, pid_t tid, size_t *ret_at)
{
    size_t lo = 0, hi = t->n_known_tids;

    while (lo < hi) { /* sorted: a binary search, as a target may have thousands */
        size_t mid = lo + (hi - lo) / 2;

        if (t->known_tids[mid] == tid)
            return true;
        if (t->known_tids[mid] < tid)
            lo = mid + 1;
        else
            hi = mid;
    }
    *ret_at = lo;
    return false;
}

static void remember_tid(struct target *t, pid_t tid, size_t at)
{
    if (t->n_known_tids == t->known_tids_cap) {
        size_t cap = t->known_tids_cap ? t->known_tids_cap * 2 : 64;
        pid_t *tids = realloc(t->known_tids, cap * sizeof(*tids));

        if (!tids)
            return; /* sent again next time: a row the store already has */
        t->known_tids = tids;
        t->known_tids_cap = cap;
    }
    memmove(t->known_tids + at + 1, t->known_tids + at, (t->n_known_tids - at) * sizeof(pid_t));
    t->known_tids[at] = tid;
    t->n_known_tids++;
}

/* Whether @tid is one of the stub's threads: known so, and still named so (a tid is reused
 * once a thread exits: the name is read again, for these few threads only). */
static bool is_own_thread(struct target *t, pid_t tid)
{
    char os_name[32];

    for (size_t i = 0; i < t->n_own_tids; i++) {
        if (t->own_tids[i] != tid)
            continue;
        pyf_thread_name(t->pid, tid, os_name, sizeof(os_name));
        if (!os_name[0] || strcmp(os_name, STUB_THREAD_NAME) == 0) /* "": gone meanwhile */
            return true;
        t->own_tids[i] = t->own_tids[--t->n_own_tids];
        return false;
    }
    return false;
}

/* A thread read in this tick and gone before its name was (its comm no longer there): the
 * stub's, when its stack runs probed's code (`<probed>`, `<probed torch>`). */
static bool runs_probed_code(const struct pyf_stack *st)
{
    for (size_t k = 0; k < st->n_frames; k++)
        if (st->frames[k].file && strncmp(st->frames[k].file, "<probed", 7) == 0)
            return true;
    return false;
}

static void note_own_thread(struct target *t, pid_t tid, const char *os_name)
{
    char name[32];

    if (strcmp(os_name, STUB_THREAD_NAME) != 0)
        return;
    /* full: a thread that has exited makes room (a request's); the stub's listening thread,
     * alive for good, keeps its place */
    for (size_t i = 0; t->n_own_tids == TARGET_OWN_TIDS && i < t->n_own_tids; i++) {
        pyf_thread_name(t->pid, t->own_tids[i], name, sizeof(name));
        if (strcmp(name, STUB_THREAD_NAME) != 0)
            t->own_tids[i] = t->own_tids[--t->n_own_tids];
    }
    if (t->n_own_tids == TARGET_OWN_TIDS) /* all alive: the oldest goes */
        memmove(t->own_tids, t->own_tids + 1, --t->n_own_tids * sizeof(pid_t));
    t->own_tids[t->n_own_tids++] = tid;
}

/* Sends the name of a thread with no Python state, seen for the first time: its OS name. */
static void name_thread(struct sampler *s, struct ob_half *h, struct target *t, pid_t tid)
{
    char name[64];
    size_t at;

    if (tid_known(t, tid, &at))
        return;
    pyf_thread_name(t->pid, tid, name, sizeof(name));
    note_own_thread(t, tid, name);
    if ((!s->show_own && strcmp(name, STUB_THREAD_NAME) == 0) ||
        ob_half__thread(s->ob, h, t->id, tid, name, name))
        remember_tid(t, tid, at); /* the stub's, hidden: known, and no row in the job's threads */
}

/* Sends one Python thread's names: threading's (""  when it has none yet) and the OS's. */
static bool send_thread_names(struct sampler *s, struct target *t, pid_t tid, uint64_t ident,
                              const struct pyf_stack *st, bool *ret_has_py_name)
{
    char name[64], os_name[32];
    struct pyf_err e;
    struct ob_half *h;
    bool sent;

    pyf_thread_name(t->pid, tid, os_name, sizeof(os_name));
    if (!os_name[0] && st && runs_probed_code(st))
        snprintf(os_name, sizeof(os_name), "%s", STUB_THREAD_NAME);
    note_own_thread(t, tid, os_name);
    if (strcmp(os_name, STUB_THREAD_NAME) == 0 && !s->show_own) { /* no row in the job's */
        *ret_has_py_name = true;
        return true;
    }
    if (strcmp(os_name, STUB_THREAD_NAME) == 0) /* shown: named as probed's, never the job's */
        snprintf(name, sizeof(name), "%s", STUB_THREAD_NAME);
    else if (pyf_target__thread_py_name(t->pyf, ident, name, sizeof(name), &e) < 0)
        name[0] = '\0';
    *ret_has_py_name = name[0] != '\0';
    h = outbox__lock(s->ob);
    sent = ob_half__thread(s->ob, h, t->id, tid, name[0] ? name : os_name, os_name);
    outbox__unlock(s->ob);
    return sent;
}

/*
 * Names the Python threads seen for the first time, before the tick's samples are recorded
 * and outside the outbox's lock: threading's name costs a read of its registry (a few
 * hundred syscalls, once per new thread, never per sample). A thread found before threading
 * registered it (a moment at its start) is named by its OS name and asked again a second
 * later, a few times at most.
 */
static void name_new_threads(struct sampler *s, struct target *t, size_t n, int64_t mono)
{
    for (size_t k = 0; k < t->n_name_rechecks;) {
        struct name_recheck *rc = &t->name_rechecks[k];
        bool named = false;

        if (mono < rc->due_ns) {
            k++;
            continue;
        }
        send_thread_names(s, t, rc->tid, rc->ident, NULL, &named);
        if (named || ++rc->tries >= TARGET_NAME_TRIES) {
            *rc = t->name_rechecks[--t->n_name_rechecks];
        } else {
            rc->due_ns = mono + 1000000000LL;
            k++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct pyf_thread *th = &t->threads[i];
        bool named = false;
        size_t at;

        if (!th->tid || tid_known(t, th->tid, &at))
            continue;
        if (!send_thread_names(s, t, th->tid, th->ident, &t->stacks[i], &named))
            continue;
        remember_tid(t, th->tid, at);
        if (!named && t->n_name_rechecks < TARGET_NAME_RECHECKS)
            t->name_rechecks[t->n_name_rechecks++] = (struct name_recheck){
                .tid = th->tid, .ident = th->ident, .due_ns = mono + 1000000000LL};
    }
}

static void add_sample(struct sampler *s, struct ob_half *h, struct target *t,
                       const struct ob_sample *smp)
{
    name_thread(s, h, t, smp->tid);
    if (ob_half__sample(s->ob, h, smp)) {
        t->stats.samples++;
        t->stats.by_state[smp->state & 3]++;
    } else
        t->stats.dropped++;
}

/* The Python frames the eBPF sampler copied with native stack @ns, merged with it: 0 when
 * there are none, or they do not decode or agree (the caller then merges the frames read). */
static size_t merge_same_instant(struct sampler *s, struct ob_half *h, struct target *t,
                                 const struct native_stack *ns, int64_t *ret_task)
{
    struct native_stats *stats = native__stats(t->native);
    struct pyf_err e;
    size_t n;

    *ret_task = 0;
    if (!ns->py) { /* always so with perf, whose figures do not show it */
        stats->py_uncopied++;
        return 0;
    }
    s->instant = (struct pyf_stack){.frames = s->instant_frames, .cap = TARGET_DEPTH_MAX};
    n = pyf_target__stack_of_copy(t->pyf, ns->py, &s->instant, &e) == 0 && !s->instant.truncated
            ? merge_native(s, h, t, &s->instant, ns, ret_task)
            : 0;
    if (n == 0)
        stats->py_undecoded++;
    return n;
}

/* The stack id of Python thread @i of this tick: with its native frames when the kernel
 * sampled it since the last tick and the Python frames of that instant (eBPF), or those read
 * now, agree with them. */
static int64_t thread_stack_id(struct sampler *s, struct ob_half *h, struct target *t, size_t i,
                               int64_t mono)
{
    const struct pyf_thread *th = &t->threads[i];
    struct native_stack *ns = t->native ? native__take(t->native, th->tid) : NULL;
    struct native_stats *stats = t->native ? native__stats(t->native) : NULL;
    int64_t task = 0;
    size_t n;

    if (!ns && t->native && !th->on_cpu && th->tid > 0 &&
        t->stacks[i].n_frames <= TARGET_DEPTH_MAX) {
        /* waiting: where, read from the process once per wait; merged with the frames read
         * now, which the wait keeps still (their agreement is checked as any merge's) */
        ns = native__waiting(t->native, th->tid, th->sched);
        n = ns ? merge_native(s, h, t, &t->stacks[i], ns, &task) : 0;
        if (ns && n == 0)
            stats->mismatched++;
        if (n > 0) {
            stats->waiting++;
            return stack_id_of_frames(s, h, n, task);
        }
        return stack_id(s, h, t, &t->stacks[i]);
    }
    if (!ns)
        return stack_id(s, h, t, &t->stacks[i]);
    if (t->stacks[i].n_frames > TARGET_DEPTH_MAX) { /* deep: its Python frames, both ends */
        stats->mismatched++;
        return stack_id(s, h, t, &t->stacks[i]);
    }
    n = merge_same_instant(s, h, t, ns, &task);
    if (n > 0) {
        stats->merged++;
        stats->same_instant++; /* no lag: the frames are those of the native sample */
        return stack_id_of_frames(s, h, n, task);
    }
    n = merge_native(s, h, t, &t->stacks[i], ns, &task);
    if (n == 0) {
        stats->mismatched++;
        return stack_id(s, h, t, &t->stacks[i]);
    }
    stats->merged++;
    stats->lag_ns += (uint64_t)(mono - ns->mono_ns);
    return stack_id_of_frames(s, h, n, task);
}

static void add_native_only(struct sampler *s, struct ob_half *h, struct target *t, int64_t ts,
                            const struct native_stack *ns, int32_t state)
{
    struct ob_sample smp = {.ts_ns = ts, .target_id = t->id, .tid = ns->tid, .state = state};
    bool eval_loop;

    name_thread(s, h, t, ns->tid);
    if (!s->show_own && t->n_own_tids && is_own_thread(t, ns->tid)) { /* the stub's listener */
        t->stats.own_skipped++;
        return;
    }
    for (size_t i = 0; i < ns->n_pcs; i++)
        s->frame_ids[i] = native_frame_id(s, h, t->native, ns->pcs[i], i == 0, &eval_loop);
    smp.stack_id = stack_id_of_frames(s, h, ns->n_pcs, 0);
    native__stats(t->native)->native_only++;
    add_sample(s, h, t, &smp);
}

/* Samples of the threads with no Python thread state (OpenMP, NCCL, a library's own): native
 * frames only, of those perf saw running (on CPU), and of those that wait, where they wait. */
static void record_native_only(struct sampler *s, struct ob_half *h, struct target *t, size_t n,
                               int64_t ts)
{
    struct native_stack *ns;

    while ((ns = native__next_unclaimed(t->native)) != NULL)
        add_native_only(s, h, t, ts, ns, 1);
    while ((ns = native__next_waiting(t->native, t->pyf, t->threads, n)) != NULL) {
        native__stats(t->native)->waiting++;
        add_native_only(s, h, t, ts, ns, 0);
    }
}

static void record(struct sampler *s, struct target *t, size_t n, int64_t ts, int64_t mono)
{
    struct ob_half *h = outbox__lock(s->ob);

    for (size_t i = 0; i < n; i++) {
        const struct pyf_thread *th = &t->threads[i];
        struct ob_sample smp = {.ts_ns = ts, .target_id = t->id, .tid = th->tid};

        if (!s->show_own && t->n_own_tids && is_own_thread(t, th->tid)) { /* not the job's */
            t->stats.own_skipped++;
            if (t->native)
                native__take(t->native, th->tid);
            continue;
        }
        if (t->stacks[i].torn) {
            t->stats.torn++;
            if (t->native) /* its native stack goes too, not filed as a native-only thread's */
                native__take(t->native, th->tid);
            continue;
        }
        /* a thread that has not run since the last tick has the same stack: its id again,
         * while the definition is known sent (the memory is lossy, and reset after a loss) */
        if (t->stacks[i].unchanged && !t->native && t->stack_ids[i] &&
            already_sent(s->sent_stacks, t->stack_ids[i]))
            smp.stack_id = t->stack_ids[i];
        else
            smp.stack_id = thread_stack_id(s, h, t, i, mono);
        t->stack_ids[i] = smp.stack_id;
        t->stats.unchanged += t->stacks[i].unchanged;
        if (th->tid == t->pid && (smp.stack_id != t->main_stack_id || !t->main_stack_since_ns)) {
            t->main_stack_id = smp.stack_id;
            t->main_stack_since_ns = ts;
        }
        smp.state = (th->on_cpu ? 1 : 0) | (th->holds_gil ? 2 : 0) | (th->gc_collecting ? 4 : 0);
        add_sample(s, h, t, &smp);
    }
    if (t->native)
        record_native_only(s, h, t, n, ts);
    outbox__unlock(s->ob);
}

/* NULL when @t is still the process attached, else why not: it exited (and its pid may be
 * another's now), or it exec'd another program (the layout read at the attach is garbage). */
static const char *process_changed(const struct target *t)
{
    int64_t start;
    uint64_t stack;
    int r = procfs_identity(t->pid, &start, &stack);

    /* Only a pid that is gone or another process's is an exit: a read that failed for want
     * of fds or memory (EMFILE, ENOMEM) says nothing about the target. */
    if (r == -ENOENT || r == -ESRCH || (r == 0 && start != t->start_time))
        return "exited";
    if (r < 0)
        return NULL;
    /* No memory: it is exiting (exec swaps one memory for another, never leaves none) */
    if (stack == 0 && t->start_stack != 0)
        return "exited";
    return stack == t->start_stack ? NULL : "exec'd another program";
}

/* A thread found deeper than TARGET_DEPTH_MAX gets room for TARGET_READ_DEPTH frames and is
 * read again at once, whole: stored with its outermost frames (stack_id()), not cut. */
static void read_deep_threads(struct target *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct pyf_stack *st = &t->stacks[i];
        struct pyf_err e;

        if (!st->truncated || target__deepen(t, i) < 0)
            continue;
        if (pyf_target__stack(t->pyf, &t->threads[i], st, &e) < 0)
            st->torn = true; /* dropped and counted, as any stack not read whole */
    }
}

/*
 * The time stored with the samples of @t's tick: the instant it was due, on CLOCK_REALTIME.
 * So a thread's samples are evenly spaced, and a run of the same stack costs a few bytes
 * (store/blocks.h). A tick is read at most catch_up_ns() after it was due (the sampler skips
 * ahead past that): a tick caught up after the sampler was held up stands for its own
 * period, in time order, not for the instant it was read. The offset between the two clocks
 * is kept to the microsecond and taken again only when it moved by more than
 * REAL_OFFSET_SLACK_NS: a sample's time is within that of the clock's.
 */
static int64_t tick_time(struct sampler *s, const struct target *t)
{
    int64_t offset = real_ns() - mono_ns();

    if (offset - s->real_offset_ns > REAL_OFFSET_SLACK_NS ||
        s->real_offset_ns - offset > REAL_OFFSET_SLACK_NS)
        s->real_offset_ns = offset / 1000 * 1000;
    return t->next_ns + s->real_offset_ns;
}

static void sample_target(struct sampler *s, struct target *t, int64_t now)
{
    const char *changed;
    struct pyf_err e = {0};
    size_t n = 0;
    int r;

    if (t->deadline_ns && now >= t->deadline_ns) {
        targets__end(s->reg, t, TARGET_DETACHED, "duration");
        return;
    }
    /* Once a second, and after any error: is it still the same process? A pid can be
     * reused, and a process can exec another program: reading its memory through the old
     * layout is garbage. */
    if ((t->stats.ticks % t->rate_hz == 0 || t->stats.errors != t->errors_seen) &&
        (changed = process_changed(t)) != NULL) {
        targets__end(s->reg, t, TARGET_EXITED, changed);
        return;
    }
    t->errors_seen = t->stats.errors;
    if (t->native) /* the kernel's samples since the last tick, then the Python frames now */
        native__collect(t->native, t->stats.ticks % (t->rate_hz / 10 + 1) == 0);
    /* asyncio's running tasks before the stacks are read, when coroutines ran lately: a
     * thread runs a task only if it was its loop's before and after (tasktag.h) */
    tasktag__before(&t->tasks, t->pyf, t->threads, t->n_threads, mono_ns());
    r = pyf_target__sample(t->pyf, t->threads, t->stacks, t->threads_cap, &n, &e);
    /* every slot full: there may be more threads, so the tick is read again with room for
     * twice as many (a rare allocation), not stored in part: the main thread is the oldest,
     * last in the list, and <= 3.10 finds every thread's id only once it has seen it */
    while (r == 0 && n == t->threads_cap && target__grow_threads(t) == 0)
        r = pyf_target__sample(t->pyf, t->threads, t->stacks, t->threads_cap, &n, &e);
    t->stats.ticks++;
    if (r < 0 && (e.kind == PYF_GONE || pyf_err_fatal(&e))) {
        if (e.kind == PYF_GONE)
            targets__end(s->reg, t, TARGET_EXITED, "exited");
        else
            targets__end(s->reg, t, TARGET_FAILED, e.msg);
        return;
    }
    t->n_threads = r == 0 ? n : 0;
    if (r < 0) {
        t->stats.errors++;
        /* stacks read in part are not stored: the ids of the last tick stored may be of
         * other frames than those a thread unchanged next tick has */
        memset(t->stack_ids, 0, t->threads_cap * sizeof(*t->stack_ids));
        return;
    }
    read_deep_threads(t, n);
    if (t->native) /* the eBPF sampler copies these threads' Python frames from now on */
        native__track(t->native, t->threads, n);
    tasktag__after(&t->tasks, t->pyf, t->threads, t->stacks, n, t->native != NULL, mono_ns());
    name_new_threads(s, t, n, mono_ns());
    record(s, t, n, tick_time(s, t), mono_ns());
    if (n == TARGET_THREADS_MAX) /* at the maximum, the threads past it are left out */
        t->stats.threads_cut++;
}

/* The target due first, or NULL when none is sampling. */
static struct target *next_due(struct sampler *s)
{
    struct target *best = NULL;

    for (size_t i = 0; i < s->reg->n; i++) {
        struct target *t = s->reg->list[i];
        if (t->state == TARGET_SAMPLING && (!best || t->next_ns < best->next_ns))
            best = t;
    }
    return best;
}

const double sampler_hist_bounds_us[SAMPLER_HIST_N] = {10,  25,   50,   100,   250,
                                                       500, 1000, 2500, 10000, 100000};

static void count_tick(struct sampler *s, int64_t ns)
{
    int b = 0;

    while (b < SAMPLER_HIST_N && (double)ns > sampler_hist_bounds_us[b] * 1000)
        b++;
    s->tick_hist[b]++;
    s->tick_ns_sum += (uint64_t)ns;
}

static int64_t catch_up_ns(const struct target *t)
{
    int64_t periods = CATCH_UP_PERIODS * t->period_ns;

    return periods > CATCH_UP_NS ? periods : CATCH_UP_NS;
}

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;

    /* A timed wait ends up to the thread's timer slack late (50 us by default: half of a
     * 10 kHz period); the sampler's wake-ups are what it is for. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    pthread_mutex_lock(&s->reg->lock);
    while (!s->stopping) {
        struct target *t = next_due(s);
        int64_t now = mono_ns();

        if (outbox__take_forget(s->ob)) {
            memset(s->sent_strings, 0, sizeof(s->sent_strings));
            memset(s->sent_frames, 0, sizeof(s->sent_frames));
            memset(s->sent_stacks, 0, sizeof(s->sent_stacks));
        }
        if (!t) {
            targets__sleep_until(s->reg, now + 1000000000LL);
            continue;
        }
        if (t->next_ns > now) {
            targets__sleep_until(s->reg, t->next_ns);
            continue; /* the list may have changed meanwhile */
        }
        /* A hiccup (the thread was descheduled for a while) is caught up on the same
         * schedule; falling further behind (catch_up_ns) skips ahead rather than burst, to
         * the last instant of the schedule that every target at this rate shares. */
        if (now - t->next_ns > catch_up_ns(t)) {
            t->stats.late++;
            t->next_ns = now - now % t->period_ns;
        }
        s->show_own = s->config && config_num(s->config, CFG_PROBED_THREADS) == 1;
        sample_target(s, t, now);
        count_tick(s, mono_ns() - now);
        t->next_ns += t->period_ns;
        /* last: while the lock is let go, a detach may free t (ASan caught t->next_ns written
         * after a detach in that window) */
        targets__let_others_in(s->reg);
    }
    pthread_mutex_unlock(&s->reg->lock);
    return NULL;
}

int sampler_new(struct targets *reg, struct outbox *ob, struct config *config, struct sampler **ret)
{
    struct sampler *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->reg = reg;
    s->ob = ob;
    s->config = config;
    *ret = s;
    return 0;
}

int sampler_start(struct sampler *s)
{
    int r = pthread_create(&s->thread, NULL, sampler_main, s);

    if (r != 0)
        return -r;
    pthread_setname_np(s->thread, "probed-sampler");
    s->started = true;
    return 0;
}

void sampler_stop(struct sampler *s)
{
    if (!s || !s->started)
        return;
    targets__lock(s->reg);
    s->stopping = true;
    targets__wake(s->reg);
    targets__unlock(s->reg);
    pthread_join(s->thread, NULL);
    s->started = false;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    sampler_stop(s);
    free(s);
}
