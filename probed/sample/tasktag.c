/* tasktag.c - see tasktag.h. */
#define _GNU_SOURCE
#include "sample/tasktag.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sample/hashid.h"

void tasktag__before(struct tasktag *tt, struct pyf_target *t, const struct pyf_thread *threads,
                     size_t n_threads, int64_t mono_ns)
{
    struct pyf_err e;

    tt->have_before = tt->have_after = false;
    tt->n_before = tt->n_after = 0;
    if (!tt->seen_ns || mono_ns - tt->seen_ns > TASKTAG_RECENT_NS)
        return;
    tt->stats.reads++;
    if (pyf_target__current_tasks(t, threads, n_threads, tt->before, TASKTAG_RUNNING_MAX,
                                  &tt->n_before, &e) < 0) {
        tt->stats.reads_failed++;
        return;
    }
    tt->have_before = true;
}

static bool has_coroutine(const struct pyf_stack *st)
{
    for (size_t i = 0; i < st->n_frames; i++)
        if (st->frames[i].coroutine)
            return true;
    return false;
}

/* Whether @r was running before the stacks were read, with the same coroutine. */
static bool ran_before(const struct tasktag *tt, const struct pyf_running_task *r)
{
    for (size_t i = 0; i < tt->n_before; i++)
        if (tt->before[i].task == r->task && tt->before[i].coro == r->coro)
            return true;
    return false;
}

void tasktag__after(struct tasktag *tt, struct pyf_target *t, const struct pyf_thread *threads,
                    const struct pyf_stack *stacks, size_t n, bool all, int64_t mono_ns)
{
    struct pyf_running_task now[TASKTAG_RUNNING_MAX];
    size_t n_now = 0;
    bool any = false;
    struct pyf_err e;

    for (size_t i = 0; i < n && !any; i++)
        any = !stacks[i].torn && (all || !stacks[i].unchanged) && has_coroutine(&stacks[i]);
    if (!any)
        return;
    tt->seen_ns = mono_ns;
    if (!tt->have_before)
        return; /* no proof this tick: the next one reads before too */
    tt->stats.reads++;
    if (pyf_target__running_tasks(t, threads, n, now, TASKTAG_RUNNING_MAX, &n_now, &e) < 0) {
        tt->stats.reads_failed++;
        return;
    }
    for (size_t i = 0; i < n_now; i++) {
        if (ran_before(tt, &now[i]))
            tt->after[tt->n_after++] = now[i];
        else
            tt->stats.unproven++;
    }
    tt->have_after = true;
}

/* A name asyncio made up: "Task-N", or none (3.6 and 3.7 have no names). */
static bool made_up(const char *name)
{
    if (!name[0])
        return true;
    if (strncmp(name, "Task-", 5) != 0 || !name[5])
        return false;
    for (const char *p = name + 5; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return true;
}

/* Whether label hash @h may be stored: known, or room for one more. */
static bool label_allowed(struct tasktag *tt, uint64_t h)
{
    size_t cap = sizeof(tt->labels) / sizeof(tt->labels[0]);

    h |= 1; /* 0 marks an empty slot */
    for (size_t i = h % cap, probes = 0; probes < cap; i = (i + 1) % cap, probes++) {
        if (tt->labels[i] == h)
            return true;
        if (tt->labels[i] == 0) {
            if (tt->n_labels >= TASKTAG_LABELS_MAX)
                return false;
            tt->labels[i] = h;
            tt->n_labels++;
            return true;
        }
    }
    return false;
}

bool tasktag__of(struct tasktag *tt, const struct pyf_stack *st, char *label, size_t size,
                 size_t *ret_frame)
{
    const struct pyf_running_task *r;
    const char *coro_name;

    if (!tt->have_after || tt->n_after == 0)
        return false;
    r = pyf_running_task_on(st, tt->after, tt->n_after, ret_frame);
    if (!r)
        return false;
    coro_name = st->frames[*ret_frame].func ? st->frames[*ret_frame].func : "?";
    if (made_up(r->name) || !label_allowed(tt, (uint64_t)hashid_string(r->name)))
        snprintf(label, size, "%.*s", TASKTAG_LABEL_CHARS, coro_name);
    else
        snprintf(label, size, "%.*s", TASKTAG_LABEL_CHARS, r->name);
    tt->stats.tagged++;
    return true;
}
