/* dump.c - see dump.h. */
#define _GNU_SOURCE
#include "dump.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"

#define THREADS_CAP 1024
#define TORN_RETRIES 20 /* a busy target can tear a read; each retry is a fresh snapshot */

/* One thread as read: its stack, or why it could not be read. */
struct bt_thread {
    struct pyf_thread th;
    char name[32];
    struct pyf_stack st;
    char error[240];
};

/* The threads, retrying torn reads: the list can change while we walk it. */
static int read_threads(struct pyf_target *t, struct pyf_thread *th, size_t *n, struct pyf_err *e)
{
    int r = 0;

    for (int i = 0; i < TORN_RETRIES; i++) {
        r = pyf_target__threads(t, th, THREADS_CAP, n, e);
        if (r == 0 || pyf_err_fatal(e))
            return r;
    }
    return r;
}

static void read_stack(struct pyf_target *t, struct bt_thread *bt, pid_t pid)
{
    struct pyf_err e;
    int r = 0;

    pyf_thread_name(pid, bt->th.tid, bt->name, sizeof(bt->name));
    for (int i = 0; i < TORN_RETRIES; i++) {
        r = pyf_target__stack(t, &bt->th, &bt->st, &e);
        if (r == 0 || pyf_err_fatal(&e))
            break;
    }
    if (r < 0)
        snprintf(bt->error, sizeof(bt->error), "%s", e.msg);
}

/* ---- JSON output --------------------------------------------------------------------- */

static int json_local(void *ctx, const char *name, const char *value)
{
    json_t *arr = ctx;
    return json_array_append_new(arr, json_pack("{s:s, s:s}", "name", name, "value", value));
}

static json_t *frame_json(struct pyf_target *t, const struct pyf_frame *f, bool with_locals)
{
    json_t *jf = json_pack("{s:s, s:s, s:i, s:i}", "function", f->func, "file", f->file, "line",
                           (json_int_t)f->line, "first_line", (json_int_t)f->first_line);
    struct pyf_err e;

    if (jf && with_locals) {
        json_t *locals = json_array();
        if (pyf_target__locals(t, f, json_local, locals, &e) < 0)
            json_object_set_new(jf, "locals_error", json_string(e.msg));
        json_object_set_new(jf, "locals", locals);
    }
    return jf;
}

static json_t *thread_json(struct pyf_target *t, const struct bt_thread *bt, int depth)
{
    json_t *frames = json_array();
    json_t *jt =
        json_pack("{s:i, s:s, s:I, s:b, s:b, s:b}", "tid", (int)bt->th.tid, "name", bt->name,
                  "interpreter", (json_int_t)bt->th.interp_id, "holds_gil", bt->th.holds_gil,
                  "on_cpu", bt->th.on_cpu, "truncated", bt->st.truncated);

    for (size_t i = 0; i < bt->st.n_frames; i++)
        json_array_append_new(frames, frame_json(t, &bt->st.frames[i], (int)i < depth));
    json_object_set_new(jt, "frames", frames);
    if (bt->error[0])
        json_object_set_new(jt, "error", json_string(bt->error));
    return jt;
}

static json_t *process_json(struct pyf_target *t, const struct bt_thread *bts, size_t n,
                            const char *cmdline, int depth)
{
    const struct pyf_target_info *info = pyf_target__info(t);
    json_t *threads = json_array();
    json_t *root;

    for (size_t i = 0; i < n; i++)
        json_array_append_new(threads, thread_json(t, &bts[i], depth));
    root = json_pack("{s:i, s:s, s:s, s:s, s:o}", "pid", (int)info->pid, "python_version",
                     info->version_str, "command", cmdline, "runtime_file", info->runtime_file,
                     "threads", threads);
    return root;
}

int dump_json(pid_t pid, int locals_depth, json_t **ret, struct pyf_err *e)
{
    struct pyf_thread *threads = NULL;
    struct bt_thread *bts = NULL;
    struct pyf_target *t = NULL;
    struct pyf_frame *frames = NULL;
    char cmdline[512];
    size_t n = 0;
    int r;

    r = pyf_target_open(pid, &t, e);
    if (r < 0)
        return r;
    procfs_cmdline(pid, cmdline, sizeof(cmdline));
    threads = calloc(THREADS_CAP, sizeof(*threads));
    r = threads ? read_threads(t, threads, &n, e) : -ENOMEM;
    if (r == 0) {
        bts = calloc(n ? n : 1, sizeof(*bts));
        frames = calloc((n ? n : 1) * PYF_DEPTH_MAX, sizeof(*frames));
        r = bts && frames ? 0 : -ENOMEM;
    }
    for (size_t i = 0; r == 0 && i < n; i++) {
        bts[i].th = threads[i];
        bts[i].st = (struct pyf_stack){.frames = frames + i * PYF_DEPTH_MAX, .cap = PYF_DEPTH_MAX};
        read_stack(t, &bts[i], pid);
    }
    if (r == 0) {
        *ret = process_json(t, bts, n, cmdline, locals_depth);
        r = *ret ? 0 : -ENOMEM;
    }
    if (r == -ENOMEM)
        snprintf(e->msg, sizeof(e->msg), "pid %d: out of memory reading its stacks", (int)pid);
    free(frames);
    free(bts);
    free(threads);
    pyf_target_free(t);
    return r;
}
