/*
 * stack.c - pyf_target__stack(): one thread's frames, read as one snapshot.
 * (Over 800 lines on purpose: the snapshot and every consistency check of it, for each
 * interpreter family, are one argument; split, the checks would hide from each other.)
 *
 * The innermost frames of a busy thread change every few hundred nanoseconds, faster than
 * a read frame by frame can follow, so a stack is read as a snapshot: the previous sample's
 * frames and code objects are the guess for this one, and one process_vm_readv() (batch.h)
 * copies, in this order, the thread state (whose current-frame pointer starts the chain),
 * the guessed frames (merged into a few contiguous spans: on 3.11+ they sit side by side on
 * the data stack, so the copy is one memcpy), the current-frame pointer again, and the heads
 * of the guessed code objects. The chain is followed from the word read *after* the frames
 * (a frame it names was pushed before that read), and a snapshot settles when the whole
 * chain lies in the copy; then the frames that had already returned by the time of the copy
 * are trimmed, as the copy itself shows (returned_inner_frames(): refcount 0 on <= 3.10,
 * stacktop on 3.12+; on 3.11, which has no such mark, the chain starts at the deepest frame
 * common to the chains of the words read before and after the copy). A snapshot that does
 * not settle becomes the guess and the read is repeated, a few times at most. On <= 3.10 the
 * same syscall also copies the innermost frames a second time after everything else: a
 * zombie frame re-used by the next call at the same address passes every other check, but
 * its caller moved meanwhile, and then the snapshot does not settle (callers_moved()); and
 * a caller must hold its callee's reference (returned_frame_below()). 3.11
 * and 3.12 have the same re-use on their data stack, and there a caller must be at an
 * instruction that pushes an inline frame (at_inline_call()), or the snapshot is read again.
 * On <= 3.10, where every frame may be entered from C, a caller standing where it calls no
 * Python function (caller_suspect()) is believed only when the next read finds it again.
 * pyf_target__sample() does the same for every thread in one syscall.
 *
 * Everything read can change or be freed between two reads, so every pointer is checked,
 * every loop is bounded, cycles are detected and each code object is checked to still be one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "linetable.h"
#include "pyobj.h"
#include "remote.h"
#include "target.h"

#define LINETABLE_MAX (1u << 20)
/* 3.11-3.13 bytecode kept for the call-site check; a larger code object is not checked */
#define BYTECODE_MAX (1u << 16)
#define SNAPSHOT_ATTEMPTS 6

/* What one attempt read; raw[] holds its frames. */
struct snapshot {
    size_t n;        /* frames in the chain */
    bool more;       /* the chain goes on past the depth limit */
    bool settled;    /* read in one copy, and the current frame did not change meanwhile */
    uint64_t cframe; /* 3.11/3.12: the _PyCFrame the thread state pointed at */
    uint64_t missed[PYF_RECENT_MAX]; /* frames of the chain the copy lacked (the first ones) */
    size_t n_missed;
};

/* @buf holds @len bytes of the frame (a copy made in one instant may lack the running mark:
 * it is taken as running). */
static void parse_frame(const struct pyf_target *t, const uint8_t *buf, size_t len, uint64_t raddr,
                        struct raw_frame *f)
{
    const struct pyf_layout *l = &t->lay;

    f->raddr = raddr;
    f->code = stackref_object(l, field_u64(buf, l->fr_code));
    f->back = field_u64(buf, l->fr_back);
    f->state = l->fr_state_model == PYF_STATE_REFCNT     ? (int64_t)field_u64(buf, l->fr_state)
               : l->fr_state_model == PYF_STATE_STACKTOP ? field_i32(buf, l->fr_state)
                                                         : 0;
    f->skip =
        l->fr_owner >= 0 && l->fr_owner_shim >= 0 && (int8_t)buf[l->fr_owner] >= l->fr_owner_shim;
    f->entry = l->fr_is_entry >= 0 && buf[l->fr_is_entry] != 0;
    f->running = l->fr_running < 0 || (size_t)l->fr_running >= len ||
                 (int8_t)buf[l->fr_running] == l->fr_running_value;
    if (l->frame_model == PYF_FRAME_OBJECT) {
        f->lasti = (int64_t)field_i32(buf, l->fr_lasti) * l->fr_lasti_scale;
    } else {
        /* prev_instr / instr_ptr points into co_code_adaptive, which is inside the code
         * object; one before the start means "not started". */
        uint64_t ip = field_u64(buf, l->fr_lasti);
        uint64_t start = f->code + (uint64_t)l->co_code_adaptive;
        f->lasti = ip >= start ? (int64_t)(ip - start) : -2;
        if (f->lasti > (1 << 26))
            f->lasti = -2; /* not in this code object: torn; reported as the def line */
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Adds @n remote structs of @len bytes, in address order so that neighbours merge; the one
 * at @grow_at is read for @grow_len bytes instead (when larger). Returns the window of spans
 * that hold them, ascending and disjoint (batch_find_in). */
static struct batch_window add_sorted(struct pyf_target *t, const uint64_t *raddrs, size_t n,
                                      size_t len, uint64_t grow_at, size_t grow_len)
{
    struct batch_window w = {.lo = (int)t->batch.n, .hi = (int)t->batch.n};
    uint64_t *sorted = t->scratch_u64;
    bool descending = true;

    /* Innermost first: on 3.11+ the data stack makes that descending already. */
    for (size_t i = 1; i < n && descending; i++)
        descending = raddrs[i] <= raddrs[i - 1];
    for (size_t i = 0; i < n; i++)
        sorted[i] = descending ? raddrs[n - 1 - i] : raddrs[i];
    if (!descending)
        qsort(sorted, n, sizeof(*sorted), cmp_u64);
    for (size_t i = 0; i < n; i++) {
        int span;
        if (!remote_plausible(sorted[i]) || (i > 0 && sorted[i] == sorted[i - 1]))
            continue;
        span = batch_add(&t->batch, sorted[i],
                         sorted[i] == grow_at && grow_len > len ? grow_len : len);
        if (span >= 0 && span < w.lo) /* merged into the span before the window */
            w.lo = span;
    }
    w.hi = (int)t->batch.n;
    return w;
}

/* How far to read past the innermost guessed frame: a deeper call's frame goes right after it
 * on the data stack (3.11+), so the rest of its page comes in the same copy (never more than
 * that page, which is mapped, and at most GROW_BYTES). */
#define GROW_BYTES 2048
static size_t grow_len(uint64_t innermost)
{
    uint64_t page_end = (innermost | 4095) + 1;
    return page_end - innermost < GROW_BYTES ? (size_t)(page_end - innermost) : GROW_BYTES;
}

/* Where the word naming the innermost frame lives: tstate->frame / current_frame, or on
 * 3.11/3.12 cframe->current_frame (0 when the cframe is not known yet). */
static uint64_t current_word(const struct pyf_target *t, uint64_t tstate, uint64_t cframe)
{
    if (t->lay.ts_cframe_frame >= 0)
        return remote_plausible(cframe) ? cframe + (uint64_t)t->lay.ts_cframe_frame : 0;
    return tstate + (uint64_t)t->lay.ts_frame;
}

/* The guessed frames: the stack's frames, its hidden shim frames, and the frames recent
 * reads found outside their guess. */
static size_t frame_guesses(struct pyf_target *t, const struct pyf_stack *guess)
{
    size_t n = 0;

    for (size_t i = 0; i < guess->n_frames; i++)
        t->guess_u64[n++] = guess->frames[i].frame_raddr;
    for (size_t i = 0; i < guess->n_hidden && i < PYF_HIDDEN_MAX; i++)
        t->guess_u64[n++] = guess->hidden[i];
    for (size_t i = 0; i < guess->n_recent && i < PYF_RECENT_MAX; i++)
        t->guess_u64[n++] = guess->recent[i];
    return n;
}

/*
 * A busy thread often flips between a few stacks faster than one read and the next: a loop
 * that drives a generator (whose frame lives in the generator object, not on the data
 * stack), calls Python through C (3.12's shim frame on the C stack), or alternates two
 * callees. The previous read's chain alone then misses whatever the other stacks hold, and
 * every attempt of a read can miss (a copy must hold the whole chain to settle): 2 % of the
 * reads of tests/targets/constructs.py under ASan and load were torn. So the frames a chain
 * found outside its copy are remembered for a while and read with every guess: then one
 * copy holds every stack the thread flips between. A frame not met for RECENT_READS reads
 * is forgotten (one freed since costs a failed copy, and then all are: read_one()).
 */
#define RECENT_READS 256

static void recent_drop(struct pyf_stack *st, size_t i)
{
    st->n_recent--;
    st->recent[i] = st->recent[st->n_recent];
    st->recent_at[i] = st->recent_at[st->n_recent];
}

/* Forgets the frames not met for RECENT_READS reads (at the start of a read). */
static void recent_age(struct pyf_stack *st)
{
    st->reads++;
    for (size_t i = st->n_recent; i-- > 0;)
        if (st->reads - st->recent_at[i] > RECENT_READS)
            recent_drop(st, i);
}

/* After an attempt: the frames its copy lacked are remembered (replacing the least recently
 * met), and those the chain went through are met again. */
static void recent_note(struct pyf_target *t, const struct snapshot *s, struct pyf_stack *st)
{
    for (size_t i = 0; i < st->n_recent; i++)
        for (size_t k = 0; k < s->n; k++)
            if (t->raw[k].raddr == st->recent[i]) {
                st->recent_at[i] = st->reads;
                break;
            }
    for (size_t m = 0; m < s->n_missed; m++) {
        size_t slot = 0, i = 0;

        while (i < st->n_recent && st->recent[i] != s->missed[m])
            i++;
        if (i < st->n_recent)
            continue; /* remembered already */
        if (st->n_recent < PYF_RECENT_MAX)
            slot = st->n_recent++;
        else
            for (i = 1; i < st->n_recent; i++)
                slot = st->reads - st->recent_at[i] > st->reads - st->recent_at[slot] ? i : slot;
        st->recent[slot] = s->missed[m];
        st->recent_at[slot] = st->reads;
    }
}

/* <= 3.10: callers checked against the second copy (callers_moved()): the innermost ones,
 * which change fastest. All 30 of a deep stack cost 50 % more CPU in retries (3.6) for no
 * gain. */
#define REREAD_CALLERS 8

/* A thread's spans before anything of it is added: none read. */
static const struct thread_spans NO_SPANS = {
    .ts = -1, .before = -1, .after = -1, .alt_before = -1, .alt_after = -1, .root = -1};

static size_t lasti_bytes(const struct pyf_target *t)
{
    return t->lay.frame_model == PYF_FRAME_OBJECT ? sizeof(int32_t) : sizeof(uint64_t);
}

/*
 * <= 3.10: the spans of the copy that hold the innermost guessed frames (REREAD_CALLERS of
 * them and the first) and the recent ones, copied again after everything else of the thread,
 * for callers_moved(). Whole spans: a frame the copy holds only because it lies near a guessed
 * one (merged into its span) is copied again too.
 */
static struct batch_window add_second_copy(struct pyf_target *t, const struct pyf_stack *guess,
                                           struct batch_window frames)
{
    struct batch *b = &t->batch;
    struct batch_window w;
    size_t n = 0;

    for (size_t i = 0; i < guess->n_frames && i <= REREAD_CALLERS; i++)
        t->guess_u64[n++] = (uint64_t)batch_span_in(b, frames, guess->frames[i].frame_raddr);
    for (size_t i = 0; i < guess->n_recent && i < PYF_RECENT_MAX; i++)
        t->guess_u64[n++] = (uint64_t)batch_span_in(b, frames, guess->recent[i]);
    qsort(t->guess_u64, n, sizeof(*t->guess_u64), cmp_u64); /* -1 (none) sorts last */
    w.lo = (int)b->n;
    for (size_t i = 0; i < n && t->guess_u64[i] != UINT64_MAX; i++)
        if (i == 0 || t->guess_u64[i] != t->guess_u64[i - 1]) {
            const struct batch_span *s = &b->spans[t->guess_u64[i]];
            batch_add_alone(b, s->lo, (size_t)(s->hi - s->lo));
        }
    w.hi = (int)b->n;
    return w;
}

/* Adds a thread's thread state (unless already in the batch, at span @ts >= 0), its
 * current-frame words and its guessed frames to the batch. */
static void add_thread(struct pyf_target *t, uint64_t tstate, int ts, const struct pyf_stack *guess,
                       struct thread_spans *sp)
{
    struct batch *b = &t->batch;
    uint64_t word = current_word(t, tstate, guess->cframe_hint);
    uint64_t alt = guess->cframe_alt != guess->cframe_hint && t->lay.ts_cframe_frame >= 0
                       ? current_word(t, tstate, guess->cframe_alt)
                       : 0;

    *sp = NO_SPANS;
    sp->ts = ts >= 0 ? ts : batch_add_alone(b, tstate, t->ts_read);
    if (sp->ts < 0)
        return;
    if (word && t->lay.ts_cframe_frame >= 0)
        sp->before = batch_add_alone(b, word, sizeof(uint64_t));
    if (alt)
        sp->alt_before = batch_add_alone(b, alt, sizeof(uint64_t));
    sp->frames = add_sorted(t, t->guess_u64, frame_guesses(t, guess), t->fr_read,
                            guess->n_frames ? guess->frames[0].frame_raddr : 0,
                            guess->n_frames ? grow_len(guess->frames[0].frame_raddr) : 0);
    if (word)
        sp->after = batch_add_alone(b, word, sizeof(uint64_t));
    if (alt)
        sp->alt_after = batch_add_alone(b, alt, sizeof(uint64_t));
    /* <= 3.10 only: 3.11 and 3.12 check their callers' instructions instead (at_inline_call();
     * a re-read there measurably tore more), and 3.13 marks the executing frame (stacktop). */
    if (t->lay.fr_state_model == PYF_STATE_REFCNT)
        sp->reread = add_second_copy(t, guess, sp->frames);
    /* <= 3.10: and the outermost guessed frame's f_back (outermost_settled()) */
    if (t->lay.fr_state_model == PYF_STATE_REFCNT && guess->n_frames > 0)
        sp->root = batch_add_alone(
            b, guess->frames[guess->n_frames - 1].frame_raddr + (uint64_t)t->lay.fr_back,
            sizeof(uint64_t));
}

/* Adds the heads of the guessed code objects of @n stacks (immutable: read last), but for
 * those kept unread (unchanged). */
static void add_codes(struct pyf_target *t, const struct pyf_stack *guesses, size_t n)
{
    size_t n_codes = 0;

    for (size_t k = 0; k < n; k++)
        for (size_t i = 0;
             i < guesses[k].n_frames && n_codes < SCRATCH_SLOTS && !guesses[k].unchanged; i++)
            if (guesses[k].frames[i].code_raddr)
                t->guess_u64[n_codes++] = guesses[k].frames[i].code_raddr;
    t->code_window = add_sorted(t, t->guess_u64, n_codes, t->co_read, 0, 0);
}

/* The one syscall of an attempt for one thread. */
static int read_one(struct pyf_target *t, uint64_t tstate, struct pyf_stack *guess,
                    struct thread_spans *sp, struct pyf_err *e)
{
    struct batch *b = &t->batch;
    int r;

    batch_reset(b);
    t->code_window = (struct batch_window){0, 0};
    add_thread(t, tstate, -1, guess, sp);
    add_codes(t, guess, 1);
    r = batch_read(b, &t->mem);
    if (r == -EFAULT && b->n > 1) { /* a guessed struct was freed and unmapped */
        guess->n_recent = 0;        /* (which one is not known) */
        guess->cframe_alt = guess->cframe_hint;
        batch_reset(b);
        *sp = NO_SPANS;
        sp->ts = batch_add_alone(b, tstate, t->ts_read);
        t->code_window = (struct batch_window){0, 0};
        r = batch_read(b, &t->mem);
    }
    return r < 0 ? target_fail_read(t, e, r, tstate, "thread state") : 0;
}

/*
 * The deepest frame on both the chain from @before and the chain from @after, as copied.
 * The copy was made between the two reads, and that frame was on the stack throughout:
 * either executing (then it was the innermost) or calling (then it was the innermost at
 * the instant of the call), so the stack from there is one the thread had. 0 when the
 * chains do not meet in the copy.
 */
static uint64_t common_frame(struct pyf_target *t, struct batch_window w, uint64_t before,
                             uint64_t after)
{
    uint64_t *later = t->scratch_u64;
    size_t n = 0;

    for (uint64_t f = after; remote_plausible(f) && n < PYF_DEPTH_MAX; n++) {
        const uint8_t *buf = batch_find_in(&t->batch, w, f, t->fr_read);
        if (!buf)
            break;
        later[n] = f;
        f = field_u64(buf, t->lay.fr_back);
    }
    qsort(later, n, sizeof(*later), cmp_u64);
    for (size_t depth = 0; remote_plausible(before) && depth < PYF_DEPTH_MAX; depth++) {
        const uint8_t *buf;
        if (bsearch(&before, later, n, sizeof(*later), cmp_u64))
            return before;
        buf = batch_find_in(&t->batch, w, before, t->fr_read);
        if (!buf)
            break;
        before = field_u64(buf, t->lay.fr_back);
    }
    return 0;
}

static int innermost(struct pyf_target *t, const struct pyf_stack *guess,
                     const struct thread_spans *sp, uint64_t *ret_frame, struct snapshot *s,
                     struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    uint64_t f = field_u64(batch_span_data(&t->batch, sp->ts), l->ts_frame), later;
    int before = sp->before, after = sp->after;
    int r;

    s->cframe = 0;
    s->settled = true;
    if (l->ts_cframe_frame >= 0 && f) { /* 3.11/3.12: f is the cframe */
        s->cframe = f;
        if (f != guess->cframe_hint) { /* the other cframe's words, or none */
            before = f == guess->cframe_alt ? sp->alt_before : -1;
            after = f == guess->cframe_alt ? sp->alt_after : -1;
        }
        if (before >= 0) {
            f = field_u64(batch_span_data(&t->batch, before), 0);
        } else {
            r = target_read_u64(t, f + (uint64_t)l->ts_cframe_frame, &f, e, "cframe");
            if (r < 0)
                return r;
            s->settled = false;
            after = -1; /* it was read at the old cframe */
        }
    } else if (l->ts_cframe_frame >= 0) {
        *ret_frame = 0; /* no cframe: no Python frames, as of the one word read */
        return 0;
    }
    if (after < 0) {
        s->settled = false;
        *ret_frame = f;
        return 0;
    }
    later = field_u64(batch_span_data(&t->batch, after), 0);
    if (l->fr_state_model == PYF_STATE_NONE && later != f) {
        later = common_frame(t, sp->frames, f, later);
        if (!later) { /* the chains do not meet in the copy: read again */
            s->settled = false;
            later = f;
        }
    }
    *ret_frame = later;
    return 0;
}

/* Follows the chain through the batch; frames it lacks are read as it goes (and leave the
 * snapshot unsettled: the chain read is the next attempt's guess). 3.11+ keeps a thread's
 * frames on a data stack, each one's callers below it: a frame the batch lacks is read with
 * the rest of its page below it, so a stack deeper than guessed costs a syscall a page, not
 * one a frame (a 30-deep one was 30). */
static int chain(struct pyf_target *t, struct batch_window w, uint64_t f, size_t limit,
                 struct snapshot *s, struct pyf_err *e)
{
    uint8_t one[512], page[4096 + sizeof(one)];
    uint64_t page_lo = 0, page_hi = 0; /* what page[] holds */
    int r;

    s->n = 0;
    s->n_missed = 0;
    while (f && s->n < limit) {
        struct raw_frame *raw = &t->raw[s->n];
        const uint8_t *buf;

        if (!remote_plausible(f) || (f & 7)) {
            /* Most often the copy of a frame pushed just after it was made: read again. */
            s->settled = false;
            return 0;
        }
        buf = batch_find_in(&t->batch, w, f, t->fr_read);
        if (!buf && s->n_missed < PYF_RECENT_MAX)
            s->missed[s->n_missed++] = f;
        if (!buf && f >= page_lo && f + t->fr_read <= page_hi)
            buf = page + (f - page_lo);
        if (!buf && t->lay.frame_model == PYF_FRAME_INTERP && t->fr_read <= sizeof(one)) {
            uint64_t lo = f & ~(uint64_t)4095; /* mapped, as f is */
            size_t len = (size_t)(f - lo) + t->fr_read;
            if (remote_read(&t->mem, lo, page, len) == 0) {
                page_lo = lo;
                page_hi = lo + len;
                buf = page + (f - lo);
                s->settled = false;
            }
        }
        if (!buf) {
            if (t->fr_read > sizeof(one))
                return pyf_fail(e, PYF_INVALID, ENOBUFS, f, "frame larger than expected");
            r = remote_read(&t->mem, f, one, t->fr_read);
            if (r == -EFAULT) { /* a stale pointer into memory freed since: read again */
                s->settled = false;
                return 0;
            }
            if (r < 0)
                return target_fail_read(t, e, r, f, "frame");
            buf = one;
            s->settled = false;
        }
        parse_frame(t, buf, t->fr_read, f, raw);
        if (raw->back == f) { /* as above */
            s->settled = false;
            return 0;
        }
        f = raw->back;
        s->n++;
    }
    s->more = f != 0;
    return 0;
}

/*
 * How many of the chain's innermost frames had already returned when the batch copied them.
 * The chain starts at the current-frame pointer, read a few hundred nanoseconds before the
 * frames; a leaf call can return in less. Its frame memory is still there, so it still
 * links to its caller, and the caller, copied after it returned, is no longer at the call.
 * The copy itself tells: <= 3.10, a returned frame has no references left; >= 3.12, the
 * frame executing is the innermost one whose stacktop is -1 (callers and returned frames
 * saved theirs), and so is one not started yet (just pushed: 3.13 clears a returned frame's
 * stacktop to 0 and initialises a new one to its local count). Only inline calls are looked
 * through: at a shim frame (a call through C) the walk stops.
 */
static size_t returned_inner_frames(const struct pyf_target *t, size_t n)
{
    const struct raw_frame *raw = t->raw;
    size_t i = 0;

    switch (t->lay.fr_state_model) {
    case PYF_STATE_REFCNT:
        while (i < n && raw[i].state == 0)
            i++;
        return i < n ? i : 0;
    case PYF_STATE_STACKTOP: /* a frame at its first instruction has no inline callee */
        for (i = 0; i < n && !raw[i].skip; i++)
            if (raw[i].state == -1 || raw[i].lasti <= 0)
                return i;
        return 0;
    default:
        return 0;
    }
}

/*
 * <= 3.10: -EAGAIN when a frame below the innermost live one had returned (no references
 * left) in the copy. A live frame is referenced by its callee's f_back, so the chain went
 * through a frame that was freed between the reads of its callee and of it: into the frame
 * free list, whose frames link through f_back to one another, or a code object's zombie
 * frame, whose f_back still names its last caller. Either way the frames past it belong to
 * no stack the thread had (a chain ending in a free frame, or looping through the list).
 *
 * Nor is a caller holding a single reference. A frame is owned by the call that runs it
 * (or its generator), and its callee's f_back is a second, strong reference, dropped only
 * as the callee is freed, while the caller still stands at its call: so a frame with one
 * reference has no callee, and stands where it calls nothing, at that instant. Its callee in
 * the copy is a zombie frame of an earlier or a later call, copied alive at another instant
 * (loops.py: a caller at `range(2)`, calling C, under its next leaf; the two copies of
 * callers_moved() match when the caller went round its whole call between them and its own
 * caller's copies fell on either side of that: 1 in about 100,000 stacks under ASan and
 * load, CI). The count and the instruction lie in one copy of the frame, nanoseconds apart.
 * More references (a traceback, sys._getframe()) only let a read through to the other checks.
 */
static int returned_frame_below(const struct pyf_target *t, uint64_t tstate, size_t n,
                                struct pyf_err *e)
{
    if (t->lay.fr_state_model != PYF_STATE_REFCNT)
        return 0;
    /* Nor is a frame not marked as running: a frame being made again out of a free or zombie
     * frame (referenced, its f_back still the free list's or its last caller's) was copied in
     * place of the caller it replaced, or, as the innermost frame, before its f_back was set
     * (CI: a 3.9 stack of one `recurse` frame, its f_back the free list's NULL). A frame that
     * really is innermost is unmarked only for a moment, as it starts and as it returns: that
     * read is torn and made again. */
    for (size_t i = 0; i < n; i++) {
        if (t->raw[i].state <= 0 || !t->raw[i].running)
            return pyf_fail(e, PYF_TORN, EAGAIN, t->raw[i].raddr,
                            "pid %d: thread 0x%" PRIx64 ": frame 0x%" PRIx64
                            " had returned when its callee was read",
                            t->info.pid, tstate, t->raw[i].raddr);
        if (i > 0 && t->raw[i].state < 2)
            return pyf_fail(e, PYF_TORN, EAGAIN, t->raw[i].raddr,
                            "pid %d: thread 0x%" PRIx64 ": frame 0x%" PRIx64
                            " had no callee when it was read",
                            t->info.pid, tstate, t->raw[i].raddr);
    }
    return 0;
}

/* A chain that hit the depth limit is either deep or a cycle: tell which. */
static bool chain_has_cycle(struct pyf_target *t, size_t n)
{
    uint64_t *scratch = t->scratch_u64;

    for (size_t i = 0; i < n; i++)
        scratch[i] = t->raw[i].raddr;
    qsort(scratch, n, sizeof(*scratch), cmp_u64);
    for (size_t i = 1; i < n; i++)
        if (scratch[i] == scratch[i - 1])
            return true;
    return false;
}

/* Points t->heads[i] at the head of frame i's code object: from the batch when it was
 * guessed, else read now (code objects do not change, so a later read is as good). */
static int find_code_heads(struct pyf_target *t, size_t n, struct pyf_err *e)
{
    size_t m = 0;
    int r;

    for (size_t i = 0; i < n; i++) {
        const struct raw_frame *raw = &t->raw[i];

        t->heads[i] = NULL;
        if (raw->skip)
            continue;
        if (!remote_plausible(raw->code))
            return pyf_fail(e, PYF_TORN, EFAULT, raw->code,
                            "pid %d: frame 0x%" PRIx64 " has a bad code pointer", t->info.pid,
                            raw->raddr);
        t->heads[i] = batch_find_in(&t->batch, t->code_window, raw->code, t->co_read);
        if (t->heads[i])
            continue;
        t->heads[i] = t->code_buf + i * t->co_read;
        t->liov[m] =
            (struct iovec){.iov_base = t->code_buf + i * t->co_read, .iov_len = t->co_read};
        t->riov[m++] =
            (struct iovec){.iov_base = (void *)(uintptr_t)raw->code, .iov_len = t->co_read};
    }
    r = remote_readv(&t->mem, t->liov, t->riov, m);
    return r < 0 ? target_fail_read(t, e, r, 0, "code objects") : 0;
}

static void code_key(const struct pyf_target *t, const uint8_t *head, uint64_t *key)
{
    const struct pyf_layout *l = &t->lay;

    key[0] = field_u64(head, l->ob_type);
    key[1] = field_u64(head, l->co_filename);
    key[2] = field_u64(head, l->co_qualname >= 0 ? l->co_qualname : l->co_name);
    key[3] = field_u64(head, l->co_linetable);
    key[4] = (uint64_t)(uint32_t)field_i32(head, l->co_firstlineno);
}

/* Where in a code object's bytecode a caller may stand while its callee runs: per code unit,
 * SITE_CALL on an instruction that pushes an inline frame and on its last cache unit (3.13's
 * instr_ptr points at the one, 3.11's and 3.12's prev_instr at the other), SITE_GENERIC for
 * such an instruction still in the generic form of a family some of whose specialised forms
 * call C, SITE_UNKNOWN from the first instruction whose length is not known (an instrumented
 * one), SITE_NONE elsewhere. The bytecode is walked from its start, instruction by
 * instruction: a cache unit holds counters and versions, whose bytes look like any opcode. */
enum { SITE_NONE, SITE_CALL, SITE_GENERIC, SITE_UNKNOWN };

static void map_sites(const uint8_t *ops, const uint8_t *code, size_t n_units, uint8_t *sites)
{
    size_t u = 0;

    memset(sites, SITE_NONE, n_units);
    while (u < n_units) {
        uint8_t op = ops[code[u * 2]]; /* the opcode is a unit's low byte */
        size_t len = op & PYF_OP_UNITS;
        if (len == 0) {
            memset(sites + u, SITE_UNKNOWN, n_units - u);
            return;
        }
        if (op & PYF_OP_INLINE_CALL) {
            sites[u] = op & PYF_OP_GENERIC ? SITE_GENERIC : SITE_CALL;
            if (u + len - 1 < n_units)
                sites[u + len - 1] = sites[u];
        }
        u += len;
    }
}

/* 3.11-3.13: a copy of the bytecode of the code object at @raddr (whose head is @head) and
 * its call sites, for at_inline_call(). Too large, or no memory: *ret_code stays NULL. */
static int read_bytecode(struct pyf_target *t, uint64_t raddr, const uint8_t *head,
                         uint8_t **ret_code, uint8_t **ret_sites, size_t *ret_n, struct pyf_err *e)
{
    int64_t units = (int64_t)field_u64(head, t->lay.var_size);
    size_t n = units > 0 ? (size_t)units * 2 : 0;
    int r;

    if (n == 0 || n > BYTECODE_MAX || !(*ret_code = malloc(n)))
        return 0;
    if (!(*ret_sites = malloc(n / 2))) {
        free(*ret_code);
        *ret_code = NULL;
        return 0;
    }
    r = remote_read(&t->mem, raddr + (uint64_t)t->lay.co_code_adaptive, *ret_code, n);
    if (r < 0) {
        free(*ret_code);
        free(*ret_sites);
        *ret_code = *ret_sites = NULL;
        return target_fail_read(t, e, r, raddr, "bytecode");
    }
    map_sites(t->lay.ops, *ret_code, n / 2, *ret_sites);
    *ret_n = n;
    return 0;
}

/* <= 3.10: a copy of the code object's bytecode (co_code, immutable), for caller_suspect();
 * past BYTECODE_MAX bytes the rest is not kept, and callers there are not checked. */
static int read_co_code(struct pyf_target *t, const uint8_t *head, uint8_t **ret_code,
                        size_t *ret_n, struct pyf_err *e)
{
    size_t len = 0;
    int r = pyobj_bytes(t, field_u64(head, t->lay.co_code), BYTECODE_MAX, ret_code, &len, e);

    if (r == 0)
        *ret_n = len < BYTECODE_MAX ? len : BYTECODE_MAX;
    return r;
}

/* A code object met for the first time: its names and line table, into the cache. */
static int load_code(struct pyf_target *t, uint64_t raddr, const uint8_t *head, const uint64_t *key,
                     struct code_info **ret, struct pyf_err *e)
{
    struct code_info *ci;
    char *func = NULL, *file = NULL;
    uint8_t *lines = NULL, *code = NULL, *sites = NULL;
    size_t n_lines = 0, n_code = 0;
    int r;

    r = pyobj_str(t, key[2], PYOBJ_NAME_MAX, &func, e);
    if (r == 0)
        r = pyobj_str(t, key[1], PYOBJ_NAME_MAX, &file, e);
    if (r == 0)
        r = pyobj_bytes(t, key[3], LINETABLE_MAX, &lines, &n_lines, e);
    if (r == 0 && n_lines > LINETABLE_MAX)
        n_lines = LINETABLE_MAX; /* lines past 1 MiB of table are reported as -1 */
    if (r == 0 && t->lay.ops)
        r = read_bytecode(t, raddr, head, &code, &sites, &n_code, e);
    else if (r == 0 && t->lay.calls)
        r = read_co_code(t, head, &code, &n_code, e);
    ci = r == 0 ? codecache__insert(t->codes, raddr, key) : NULL;
    if (!ci) {
        free(func);
        free(file);
        free(lines);
        free(code);
        free(sites);
        return r < 0 ? r : pyf_fail(e, PYF_INVALID, ENOMEM, 0, "code cache");
    }
    ci->code = code;
    ci->sites = sites;
    ci->n_code = n_code;
    ci->code_stamp = ci->stamp;
    ci->func = func;
    ci->file = file;
    ci->lines = lines;
    ci->n_lines = n_lines;
    ci->first_line = (int32_t)key[4];
    ci->flags = (uint32_t)field_i32(head, t->lay.co_flags);
    *ret = ci;
    return 0;
}

static int32_t code_line(const struct pyf_target *t, struct code_info *ci, int64_t lasti)
{
    if (ci->memo_addr != lasti) {
        ci->memo_line =
            linetable_frame_line(t->lay.line_format, ci->lines, ci->n_lines, ci->first_line, lasti);
        ci->memo_addr = lasti;
    }
    return ci->memo_line;
}

/* A generic call site's copy is taken again after this many walks: the interpreter
 * specialises an instruction after its first runs, often after the code was first met. */
#define SITES_STALE_WALKS 100

/*
 * 3.11-3.13: whether a caller, at byte @lasti of @ci's bytecode, is at an instruction that
 * pushes an inline frame. A leaf that returned and was called again at the same address
 * between the reads that check a copy is otherwise invisible (3.11 has no mark of the
 * executing frame; 3.12 and 3.13 have one, but a copy that spans the return holds none): the
 * copy then holds the returned leaf under a caller already past the call (at its loop head,
 * or returning too). The bytecode kept may predate the interpreter's specialising, which
 * changes instructions only within their family: a caller that fails the check is checked
 * again against a fresh copy, and so is one at a generic instruction (CALL, which its
 * CALL_BUILTIN_O form turns into a call of C) whose copy is older than SITES_STALE_WALKS.
 * Unknown bytecode passes.
 */
static bool at_inline_call(struct pyf_target *t, struct code_info *ci, int64_t lasti)
{
    size_t unit = lasti >= 0 ? (size_t)lasti / 2 : 0;
    uint8_t site;

    if (lasti < 0) /* not started: it has called nothing yet */
        return false;
    if (!ci->code || unit * 2 >= ci->n_code)
        return true;
    site = ci->sites[unit];
    if (site == SITE_CALL || site == SITE_UNKNOWN ||
        (site == SITE_GENERIC && ci->stamp - ci->code_stamp < SITES_STALE_WALKS))
        return true;
    if (remote_read(&t->mem, ci->raddr + (uint64_t)t->lay.co_code_adaptive, ci->code, ci->n_code) <
        0)
        return true;
    map_sites(t->lay.ops, ci->code, ci->n_code / 2, ci->sites);
    ci->code_stamp = ci->stamp;
    return ci->sites[unit] != SITE_NONE;
}

/*
 * <= 3.10: whether a caller, at byte @lasti of @ci's bytecode, stands where it calls no
 * Python function while @callee runs above it (layout.h: PYF_CALLS_*): at an instruction
 * that only moves values, jumps or returns, or at a FOR_ITER whose callee is neither a
 * generator nor a __next__. A leaf that returned and was called again from a loop, at the
 * same address (its zombie frame), between the copies of its caller and of itself, leaves
 * such a copy: the new call under a caller at its loop head or past the call (loops.py: 2 to
 * 98 in 25,000 stacks a run). Python does run there, rarely, through a signal handler, a
 * trace function, the collector, a __del__ or a map()'s function; such a stack stays, so the
 * next read finds it again, and is believed then (resolve_frames()); a torn copy does not
 * recur read after read. Bytecode not kept is not checked.
 */
static bool caller_suspect(const struct pyf_target *t, const struct code_info *ci, int64_t lasti,
                           const struct code_info *callee)
{
    size_t at = (size_t)lasti;

    if (lasti < 0) /* not started: only a trace function's call event runs above it */
        return true;
    if (!ci->code)
        return false;
    while (at < ci->n_code && t->lay.calls[ci->code[at]] == PYF_CALLS_PREFIX)
        at += 2; /* EXTENDED_ARG: the frame runs the instruction after it */
    if (at >= ci->n_code)
        return false;
    switch (t->lay.calls[ci->code[at]]) {
    case PYF_CALLS_QUIET:
        return true;
    case PYF_CALLS_ITER:
        return !(callee->flags & PYF_CO_GENERATOR) && strcmp(callee->func, "__next__") != 0;
    default:
        return false;
    }
}

/* 3.12+: the interpreter pushes a shim frame before the first frame it runs for a call from
 * C; the frame above the shim (the last one kept) is that entry frame. */
static void mark_entry(struct pyf_stack *st)
{
    if (st->n_frames > 0)
        st->frames[st->n_frames - 1].entry = true;
}

/* The frames' code objects, names and lines, into @st. A copy taken in one instant
 * (@snapshot false) needs no check of its callers. */
static int resolve_frames(struct pyf_target *t, size_t n, struct pyf_stack *st, bool snapshot,
                          struct pyf_err *e)
{
    const struct code_info *callee = NULL;
    uint64_t suspect[3];
    int r = find_code_heads(t, n, e);

    memcpy(suspect, st->suspect, sizeof(suspect));
    memset(st->suspect, 0, sizeof(st->suspect));
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        const struct raw_frame *raw = &t->raw[i];
        uint64_t key[CODE_KEY_WORDS];
        struct code_info *ci;

        if (raw->skip) {
            if (st->n_hidden < PYF_HIDDEN_MAX)
                st->hidden[st->n_hidden++] = raw->raddr;
            mark_entry(st);
            callee = NULL;
            continue;
        }
        code_key(t, t->heads[i], key);
        if (t->types.code && key[0] != t->types.code) {
            if (t->lay.frame_model == PYF_FRAME_INTERP && t->lay.fr_owner_shim >= 0) {
                /* 3.13+: a frame whose f_executable is not code (a shim) */
                if (st->n_hidden < PYF_HIDDEN_MAX)
                    st->hidden[st->n_hidden++] = raw->raddr;
                mark_entry(st);
                callee = NULL;
                continue;
            }
            return pyf_fail(e, PYF_TORN, EFAULT, raw->code,
                            "pid %d: 0x%" PRIx64 " is no longer a code object", t->info.pid,
                            raw->code);
        }
        ci = codecache__find(t->codes, raw->code, key);
        if (!ci) {
            r = load_code(t, raw->code, t->heads[i], key, &ci, e);
            if (r < 0)
                return r;
        }
        if (t->lay.ops && i > 0 && !raw[-1].entry && !raw[-1].skip &&
            !at_inline_call(t, ci, raw->lasti))
            return pyf_fail(e, PYF_TORN, EAGAIN, raw->raddr,
                            "pid %d: frame 0x%" PRIx64 " is past the call of its callee",
                            t->info.pid, raw->raddr);
        if (t->lay.calls && snapshot && callee && caller_suspect(t, ci, raw->lasti, callee)) {
            uint64_t seen[3] = {raw->raddr, (uint64_t)raw->lasti, raw[-1].code};
            if (memcmp(seen, suspect, sizeof(seen)) != 0) {
                memcpy(st->suspect, seen, sizeof(seen));
                return pyf_fail(e, PYF_TORN, EAGAIN, raw->raddr,
                                "pid %d: frame 0x%" PRIx64 " calls nothing at byte %" PRId64
                                " (read again to confirm)",
                                t->info.pid, raw->raddr, raw->lasti);
            }
        }
        callee = ci;
        st->frames[st->n_frames++] = (struct pyf_frame){
            .func = ci->func,
            .file = ci->file,
            .line = code_line(t, ci, raw->lasti),
            .first_line = ci->first_line,
            .frame_raddr = raw->raddr,
            .code_raddr = raw->code,
            /* <= 3.10: every frame; 3.11: its flag; 3.12+: a shim below it (mark_entry) */
            .entry = t->lay.frame_model == PYF_FRAME_OBJECT || raw->entry,
            .coroutine = (ci->flags & (PYF_CO_COROUTINE | PYF_CO_ITERABLE_COROUTINE)) != 0,
        };
    }
    return 0;
}

/* 3.11/3.12: the cframe the next read guesses, the one before kept as the other guess. */
static void set_cframe(struct pyf_stack *st, uint64_t cframe)
{
    if (cframe != st->cframe_hint)
        st->cframe_alt = st->cframe_hint;
    st->cframe_hint = cframe;
}

/* The chain of this attempt becomes the guess of the next: frames and code pointers. */
static void guess_from_chain(struct pyf_target *t, const struct snapshot *s, struct pyf_stack *st)
{
    size_t n = s->n < st->cap ? s->n : st->cap;

    for (size_t i = 0; i < n; i++)
        st->frames[i] = (struct pyf_frame){.frame_raddr = t->raw[i].raddr,
                                           .code_raddr = t->raw[i].skip ? 0 : t->raw[i].code};
    st->n_frames = n;
    st->n_hidden = 0;
    set_cframe(st, s->cframe);
}

/* <= 3.10: whether a frame's first locals (up to FRAME_LOCALS_CHECKED words, and no more
 * than the frame holds: ob_size) differ between its two copies. */
static bool locals_moved(const struct pyf_target *t, const uint8_t *then, const uint8_t *now)
{
    int64_t words = (int64_t)field_u64(then, t->lay.var_size);

    if (words > FRAME_LOCALS_CHECKED)
        words = FRAME_LOCALS_CHECKED;
    return words > 0 && memcmp(now + t->lay.fr_localsplus, then + t->lay.fr_localsplus,
                               (size_t)words * sizeof(uint64_t)) != 0;
}

/*
 * <= 3.10: true when the copy may mix two instants that the current-frame words, equal before
 * and after, cannot tell apart: a callee returned and was called again at the same address
 * (a zombie frame) while its caller was copied at another instruction (its loop head, or
 * past the call: a leaf called every microsecond under a `for`, 7 in 100,000 stacks, 3.8,
 * and 4 to 94 in 25,000 when the callers were not all read again). The innermost frames'
 * spans are copied a second time after the first (add_second_copy()): each frame must run
 * the same code in both (a frame of the free list is another function's on its next call),
 * each caller stand at the same instruction, and the innermost live frame be alive in the
 * second.
 * Then at the instant the callee was copied alive, in whichever copy falls between its
 * caller's two, the caller stood where both copies show it, unless it went away and came
 * back to the same instruction in between: called again (a leaf's caller copied twice at
 * `range(2)`, its callee alive in between: 1 in 12,500 stacks under load, 3.9) or round its
 * loop. Then its own caller stands at the same call but with another loop variable, so the
 * callers above the first also keep their first locals (locals_moved()). The first caller's
 * locals change with each call it makes in a loop, while its callee stays right, so they are
 * not compared: that tore 4 to 5 times more (deep.py, 3.9). A frame not copied again (one
 * outside the guess) means another read, with it in the guess.
 */
static bool callers_moved(struct pyf_target *t, const struct thread_spans *sp, size_t n)
{
    size_t len = lasti_bytes(t), live = 0;

    while (live < n && t->raw[live].state <= 0)
        live++; /* returned at the copy: trimmed (returned_inner_frames()) */
    for (size_t i = live; i < n && i <= live + REREAD_CALLERS; i++) {
        const uint8_t *then = batch_find_in(&t->batch, sp->frames, t->raw[i].raddr, t->fr_read);
        const uint8_t *now = batch_find_in(&t->batch, sp->reread, t->raw[i].raddr, t->fr_read);
        if (!then || !now || field_u64(now, t->lay.fr_code) != field_u64(then, t->lay.fr_code))
            return true;
        if (i == live ? field_u64(now, t->lay.fr_state) == 0
                      : memcmp(now + t->lay.fr_lasti, then + t->lay.fr_lasti, len) != 0)
            return true;
        if (i >= live + 2 && locals_moved(t, then, now))
            return true;
    }
    return false;
}

/*
 * <= 3.10: whether a chain that ends (its outermost frame's f_back NULL) ends at a thread's
 * real outermost frame: the guessed outermost, whose f_back, read again after the copy, is
 * still NULL. A frame taken from the free list is referenced, with the list's NULL as f_back,
 * until its caller is set; a copy of it stalled in the middle (its head copied then, its
 * running mark and instruction after it started) passes every other check as a stack of one
 * frame (3.7, the recursion stress test: `recurse` alone, once in 23,000 reads). A chain
 * ending elsewhere is read again with itself as the guess: a thread's outermost frame stays,
 * a torn one does not.
 */
static bool outermost_settled(struct pyf_target *t, const struct thread_spans *sp, size_t n)
{
    const struct raw_frame *last = n ? &t->raw[n - 1] : NULL;

    if (t->lay.fr_state_model != PYF_STATE_REFCNT || !last || last->back != 0)
        return true;
    return sp->root >= 0 && t->batch.spans[sp->root].lo == last->raddr + (uint64_t)t->lay.fr_back &&
           field_u64(batch_span_data(&t->batch, sp->root), 0) == 0;
}

/* One attempt, from what the batch read for this thread. */
static int take_snapshot(struct pyf_target *t, const struct pyf_stack *st,
                         const struct thread_spans *sp, size_t limit, struct snapshot *s,
                         struct pyf_err *e)
{
    uint64_t f = 0;
    int r = innermost(t, st, sp, &f, s, e);

    if (r == 0)
        r = chain(t, sp->frames, f, limit, s, e);
    if (r == 0 && s->settled && t->lay.fr_state_model == PYF_STATE_REFCNT &&
        callers_moved(t, sp, s->n))
        s->settled = false;
    if (r == 0 && s->settled && !s->more && !outermost_settled(t, sp, s->n))
        s->settled = false;
    return r;
}

static size_t stack_limit(const struct pyf_stack *st)
{
    return st->cap < PYF_DEPTH_MAX ? st->cap : PYF_DEPTH_MAX;
}

/* From a settled snapshot to @st: trim, check, resolve the code objects. */
static int finish(struct pyf_target *t, uint64_t tstate, struct snapshot *s, struct pyf_stack *st,
                  struct pyf_err *e)
{
    size_t gone = returned_inner_frames(t, s->n);
    int r = 0;

    memmove(t->raw, t->raw + gone, (s->n - gone) * sizeof(*t->raw));
    s->n -= gone;
    if (s->more && chain_has_cycle(t, s->n))
        r = pyf_fail(e, PYF_TORN, ELOOP, tstate, "pid %d: frame chain loops", t->info.pid);
    else
        r = returned_frame_below(t, tstate, s->n, e);
    st->n_frames = 0;
    st->n_hidden = 0;
    set_cframe(st, s->cframe);
    if (r == 0)
        r = resolve_frames(t, s->n, st, true, e);
    if (r < 0) {
        st->n_frames = 0;
        return r;
    }
    st->truncated = s->more;
    return 0;
}

/* Starts a call on @st: its previous content stays as the guess. */
static int begin(uint64_t tstate, struct pyf_stack *st, struct pyf_err *e)
{
    st->truncated = false;
    st->torn = false;
    st->unchanged = false;
    recent_age(st);
    if (!remote_plausible(tstate)) {
        st->n_frames = 0;
        return pyf_fail(e, PYF_INVALID, EINVAL, tstate, "bad thread state");
    }
    if (st->n_frames > stack_limit(st))
        st->n_frames = stack_limit(st);
    return 0;
}

/* The stack of one thread, codecache__begin() already called. */
static int stack_of(struct pyf_target *t, const struct pyf_thread *th, struct pyf_stack *st,
                    struct pyf_err *e)
{
    struct snapshot s = {0};
    int r = begin(th->tstate_raddr, st, e);

    for (int attempt = 0; r == 0 && attempt < SNAPSHOT_ATTEMPTS; attempt++) {
        struct thread_spans sp;

        /* st still holds the previous sample (or attempt): that is the guess. */
        r = read_one(t, th->tstate_raddr, st, &sp, e);
        if (r == 0)
            r = take_snapshot(t, st, &sp, stack_limit(st), &s, e);
        if (r == 0)
            recent_note(t, &s, st);
        if (r == 0 && s.settled) {
            r = finish(t, th->tstate_raddr, &s, st, e);
            /* done, or failed; torn (a caller past its call, a frame freed meanwhile): read
             * again while attempts remain */
            if (r == 0 || e->kind != PYF_TORN || attempt + 1 == SNAPSHOT_ATTEMPTS)
                break;
            r = 0;
            s.settled = false;
        }
        if (r < 0)
            break;
        guess_from_chain(t, &s, st);
    }
    if (r == 0 && !s.settled)
        r = pyf_fail(e, PYF_TORN, EAGAIN, th->tstate_raddr,
                     "pid %d: stack kept changing while read", t->info.pid);
    if (r < 0) {
        st->n_frames = 0;
        st->torn = e->kind == PYF_TORN;
    }
    return r;
}

int pyf_target__stack(struct pyf_target *t, const struct pyf_thread *th, struct pyf_stack *st,
                      struct pyf_err *reterr)
{
    st->kept_tid = 0; /* read without its state read first: not known to stay */
    codecache__begin(t->codes);
    return stack_of(t, th, st, reterr);
}

/*
 * Whether @st, read by an earlier sample of thread @tid, still is its stack: the thread's
 * schedstat, read before that read and again now (@sched, before this batch), is the same and
 * the thread is not running (@running). Its run time grows when it is switched out and its
 * count of runs when it is switched in, so it has run no instruction since (a running thread
 * switched out after the first read adds to its run time; one still running reads as
 * running): a thread's frames are its own to change. A waiting thread, most of a training
 * job's, costs no frame read then. The code entries its frames borrow strings from are pinned
 * for this walk; one evicted since means a read.
 */
static bool still_asleep(struct pyf_target *t, const struct pyf_stack *st, pid_t tid, int running,
                         const uint64_t sched[3])
{
    if (running != 0 || tid <= 0 || st->kept_tid != tid || sched[2] == 0 ||
        memcmp(sched, st->kept_sched, sizeof(st->kept_sched)) != 0)
        return false; /* (kept_tid is set only on a whole read: keep_if_known()) */
    for (size_t i = 0; i < st->n_frames; i++)
        if (!codecache__pin(t->codes, st->frames[i].code_raddr, st->frames[i].func,
                            st->frames[i].file))
            return false;
    return true;
}

/* After @st was read whole for thread @tid: its frames may be kept while it sleeps, when its
 * state was read before them (@sp->pre_tid). */
static void keep_if_known(struct pyf_stack *st, const struct thread_spans *sp, pid_t tid)
{
    st->kept_tid = sp->pre_tid > 0 && sp->pre_tid == tid && !st->truncated ? tid : 0;
    memcpy(st->kept_sched, sp->pre_sched, sizeof(st->kept_sched));
}

/*
 * The fast path of a sample: the guessed thread list and every guessed thread's snapshot in
 * one syscall. Returns 1 when the list was as guessed (@ret_threads filled, the batch holds
 * the stacks), 0 when it was not (or there is no guess), or a negative error.
 */
static int sample_as_guessed(struct pyf_target *t, struct pyf_thread *ret_threads,
                             struct pyf_stack *stacks, size_t cap, size_t *ret_n, struct pyf_err *e)
{
    struct thread_spans *sp = t->thread_spans;
    struct threads_guess g;
    int r;

    batch_reset(&t->batch);
    t->code_window = (struct batch_window){0, 0};
    if (threads__guess_begin(t, &g, cap) == 0)
        return 0;
    for (size_t i = 0; i < g.n; i++) {
        uint64_t tstate = t->guess_tstates[i];
        int ts = threads__guess_add(t, &g, i);

        sp[i] = NO_SPANS;
        stacks[i].unchanged = false;
        if (ts < 0)
            continue;
        if (still_asleep(t, &stacks[i], g.pre_tid[i], g.pre_running[i], g.pre_sched[i])) {
            sp[i].ts = ts; /* its thread state only, to check the list */
            stacks[i].unchanged = true;
        } else if (begin(tstate, &stacks[i], e) == 0) {
            add_thread(t, tstate, ts, &stacks[i], &sp[i]);
        }
        if (g.pre_running[i] >= 0) { /* after add_thread(), which sets the rest */
            sp[i].pre_tid = g.pre_tid[i];
            memcpy(sp[i].pre_sched, g.pre_sched[i], sizeof(sp[i].pre_sched));
        }
    }
    add_codes(t, stacks, g.n);
    r = batch_read(&t->batch, &t->mem);
    if (r == -EFAULT)
        return 0; /* something guessed was freed */
    if (r < 0)
        return target_fail_read(t, e, r, 0, "thread states and frames");
    return threads__guess_check(t, &g, ret_threads, ret_n);
}

/* The slow path: the thread list on its own, then every thread's snapshot in one syscall.
 * Returns what batch_read() returned (-EFAULT: some thread must be read on its own). */
static int sample_walked(struct pyf_target *t, struct pyf_thread *ret_threads,
                         struct pyf_stack *stacks, size_t cap, size_t *ret_n, struct pyf_err *e)
{
    struct thread_spans *sp = t->thread_spans;
    size_t n = 0;
    int r = pyf_target__threads(t, ret_threads, cap, &n, e);

    if (r < 0)
        return r;
    *ret_n = n;
    batch_reset(&t->batch);
    t->code_window = (struct batch_window){0, 0};
    for (size_t i = 0; i < n; i++) {
        sp[i] = NO_SPANS;
        if (begin(ret_threads[i].tstate_raddr, &stacks[i], e) == 0)
            add_thread(t, ret_threads[i].tstate_raddr, -1, &stacks[i], &sp[i]);
    }
    add_codes(t, stacks, n);
    r = batch_read(&t->batch, &t->mem);
    if (r < 0 && r != -EFAULT)
        return target_fail_read(t, e, r, 0, "thread states and frames");
    return r;
}

int pyf_target__sample(struct pyf_target *t, struct pyf_thread *ret_threads,
                       struct pyf_stack *stacks, size_t cap, size_t *ret_n, struct pyf_err *reterr)
{
    struct thread_spans *sp;
    size_t n = 0;
    int r;

    cap = target__thread_room(t, cap); /* may move t->thread_spans */
    sp = t->thread_spans;
    codecache__begin(t->codes);
    r = sample_as_guessed(t, ret_threads, stacks, cap, &n, reterr);
    if (r == 1)
        r = 0;
    else if (r == 0)
        r = sample_walked(t, ret_threads, stacks, cap, &n, reterr);
    if (r < 0 && r != -EFAULT)
        return r;
    *ret_n = n;
    for (size_t i = 0; i < n; i++) {
        struct snapshot s = {0};
        struct pyf_err e;

        if (stacks[i].unchanged && ret_threads[i].tid == sp[i].pre_tid)
            continue; /* asleep since it was read (still_asleep()): the same frames */
        stacks[i].kept_tid = 0;
        /* A thread read on its own reuses the batch: the threads after it do too. */
        if (r == 0 && sp[i].ts >= 0 && !stacks[i].unchanged &&
            take_snapshot(t, &stacks[i], &sp[i], stack_limit(&stacks[i]), &s, &e) == 0) {
            recent_note(t, &s, &stacks[i]);
            if (s.settled && finish(t, ret_threads[i].tstate_raddr, &s, &stacks[i], &e) == 0) {
                keep_if_known(&stacks[i], &sp[i], ret_threads[i].tid);
                continue;
            }
        }
        r = -EAGAIN;
        if (stack_of(t, &ret_threads[i], &stacks[i], &e) == 0)
            keep_if_known(&stacks[i], &sp[i], ret_threads[i].tid);
        else if (e.kind != PYF_TORN) {
            *reterr = e;
            return -(e.sys ? e.sys : EIO);
        }
    }
    return 0;
}

void pyf_target__chain(const struct pyf_target *t, struct pyf_chain *ret_chain)
{
    *ret_chain = (struct pyf_chain){.ts_frame = t->lay.ts_frame,
                                    .cframe_frame = t->lay.ts_cframe_frame,
                                    .fr_back = t->lay.fr_back,
                                    .fr_bytes = (uint32_t)t->fr_copy_read};
}

/* A copy taken in one instant needs none of a snapshot's checks: its chain is whole (each
 * frame's back pointer names the next), and the frames in it are all live, so nothing is
 * trimmed. Code objects are read as always (cached). */
int pyf_target__stack_of_copy(struct pyf_target *t, const struct pyf_frames_copy *c,
                              struct pyf_stack *st, struct pyf_err *reterr)
{
    size_t n = c->n < stack_limit(st) ? c->n : stack_limit(st);
    int r = 0;

    st->n_frames = 0;
    st->n_hidden = 0;
    st->torn = false;
    st->truncated = n < c->n;
    st->kept_tid = 0;
    st->unchanged = false;
    if (c->stride < t->fr_copy_read)
        return pyf_fail(reterr, PYF_INVALID, EINVAL, 0,
                        "pid %d: copied frames hold %zu bytes, %zu needed", t->info.pid, c->stride,
                        t->fr_copy_read);
    for (size_t i = 0; i < n && r == 0; i++) {
        parse_frame(t, c->bytes + i * c->stride, c->stride, c->raddrs[i], &t->raw[i]);
        if (i + 1 < c->n && t->raw[i].back != c->raddrs[i + 1])
            r = pyf_fail(reterr, PYF_TORN, EFAULT, c->raddrs[i],
                         "pid %d: copied frame 0x%" PRIx64 " does not call the next one",
                         t->info.pid, c->raddrs[i]);
    }
    if (r == 0)
        r = resolve_frames(t, n, st, false, reterr);
    if (r == 0 && n < c->n) {
        /* cut short: the outermost frame kept was entered from C when the next one copied is
         * a shim (3.14's threads start run() through Context.run, in C) */
        struct raw_frame next;
        parse_frame(t, c->bytes + n * c->stride, c->stride, c->raddrs[n], &next);
        if (next.skip)
            mark_entry(st);
    }
    if (r < 0) {
        st->n_frames = 0;
        st->torn = reterr->kind == PYF_TORN;
    }
    return r;
}
