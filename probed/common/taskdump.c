/* taskdump.c - the JSON document of a process's asyncio tasks; see taskdump.h. */
#define _GNU_SOURCE
#include "common/taskdump.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TORN_RETRIES 5 /* a read that failed torn as a whole (not one task): read again */

static json_t *task_id(uint64_t raddr)
{
    char id[24];

    snprintf(id, sizeof(id), "0x%" PRIx64, raddr);
    return json_string(id);
}

/* Tasks by name, then address: the same program reads the same way each time. */
static int cmp_task(const void *x, const void *y)
{
    const struct pyf_task *a = x, *b = y;
    int c = strcmp(a->name, b->name);

    return c ? c : a->raddr < b->raddr ? -1 : a->raddr > b->raddr;
}

static json_t *render(const struct pyf_target_info *info, const struct pyf_tasks *ts)
{
    struct pyf_task *sorted = malloc((ts->n_tasks ? ts->n_tasks : 1) * sizeof(*sorted));
    json_t *doc, *tasks;

    if (!sorted)
        return NULL;
    if (ts->n_tasks) /* none: tasks may be NULL */
        memcpy(sorted, ts->tasks, ts->n_tasks * sizeof(*sorted));
    qsort(sorted, ts->n_tasks, sizeof(*sorted), cmp_task);
    doc = json_object();
    tasks = json_array();

    json_object_set_new(doc, "pid", json_integer(info->pid));
    json_object_set_new(doc, "python_version", json_string(info->version_str));
    json_object_set_new(doc, "total", json_integer((json_int_t)ts->total));
    json_object_set_new(doc, "torn", json_integer((json_int_t)ts->torn));
    for (size_t i = 0; i < ts->n_tasks; i++) {
        const struct pyf_task *t = &sorted[i];
        json_t *jt = json_object(), *frames = json_array(), *by = json_array();

        json_object_set_new(jt, "id", task_id(t->raddr));
        json_object_set_new(jt, "name", json_string(t->name));
        json_object_set_new(jt, "state", json_string(pyf_task_state_name(t->state)));
        if (t->state == PYF_TASK_RUNNING && t->tid)
            json_object_set_new(jt, "tid", json_integer(t->tid));
        if (t->state == PYF_TASK_WAITING && t->waits_for) {
            json_t *w =
                json_pack("{s:o, s:s}", "id", task_id(t->waits_for), "type", t->waits_for_type);
            json_object_set_new(jt, "waits_for", w);
        }
        for (size_t k = 0; k < t->n_frames; k++) {
            const struct pyf_task_frame *f = &ts->frames[t->frame0 + k];

            json_array_append_new(frames, json_pack("{s:s, s:s, s:i}", "func", f->func, "file",
                                                    f->file, "line", (int)f->line));
        }
        for (size_t k = 0; k < t->n_parents; k++)
            json_array_append_new(by, task_id(ts->tasks[ts->parents[t->parent0 + k]].raddr));
        json_object_set_new(jt, "frames", frames);
        json_object_set_new(jt, "awaited_by", by);
        json_array_append_new(tasks, jt);
    }
    json_object_set_new(doc, "tasks", tasks);
    free(sorted);
    return doc;
}

int taskdump_json(pid_t pid, size_t max, json_t **ret, struct pyf_err *e)
{
    struct pyf_target *t = NULL;
    struct pyf_tasks *ts = NULL;
    int r = pyf_target_open(pid, &t, e);

    *ret = NULL;
    for (int i = 0; r == 0 && i < TORN_RETRIES; i++) {
        r = pyf_target__tasks(t, max, &ts, e);
        if (r == 0 || e->kind != PYF_TORN)
            break;
    }
    if (r == 0 && !(*ret = render(pyf_target__info(t), ts))) {
        *e = (struct pyf_err){.kind = PYF_INVALID, .sys = ENOMEM};
        snprintf(e->msg, sizeof(e->msg), "pid %d: out of memory for %zu tasks", (int)pid,
                 ts->n_tasks);
        r = -ENOMEM;
    }
    pyf_tasks_free(ts);
    pyf_target_free(t);
    return r;
}
