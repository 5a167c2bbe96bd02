/* backtrace.c - `probectl backtrace`; see backtrace.h. */
#define _GNU_SOURCE
#include "backtrace.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pyframes.h"

#define THREADS_CAP 1024
#define TORN_RETRIES 20 /* a busy target can tear a read; each retry is a fresh snapshot */

struct bt_opts {
    pid_t pid;
    bool json;
    int locals_depth; /* frames (innermost first) whose locals are shown; 0: none */
};

/* One thread as read: its stack, or why it could not be read. */
struct bt_thread {
    struct pyf_thread th;
    char name[32];
    struct pyf_stack st;
    char error[240];
};

static void usage(FILE *out)
{
    fprintf(out, "usage: probectl backtrace <pid> [--locals[=N]] [--json]\n"
                 "  Prints every thread's Python stack, innermost frame first.\n"
                 "  --locals[=N]  also show the local variables of the N innermost frames (all)\n"
                 "  --json        machine-readable output (see docs/backtrace.md)\n");
}

static int parse_args(int argc, char **argv, struct bt_opts *o)
{
    static const struct option longopts[] = {
        {"locals", optional_argument, NULL, 'l'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    long pid;
    int c;

    while ((c = getopt_long(argc, argv, "l::jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            o->locals_depth = optarg ? atoi(optarg) : PYF_DEPTH_MAX;
            if (o->locals_depth <= 0) {
                fprintf(stderr, "probectl backtrace: --locals=N needs N > 0\n");
                return -1;
            }
            break;
        case 'j':
            o->json = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return -1;
    }
    errno = 0;
    pid = strtol(argv[optind], &end, 10);
    if (errno || *end || pid <= 0 || pid > 0x7fffffff) {
        fprintf(stderr, "probectl backtrace: '%s' is not a pid\n", argv[optind]);
        return -1;
    }
    o->pid = (pid_t)pid;
    return 0;
}

static void read_cmdline(pid_t pid, char *buf, size_t size)
{
    char path[64];
    ssize_t n = -1;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        close(fd);
    }
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = i == n - 1 ? '\0' : ' ';
}

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

/* ---- text output --------------------------------------------------------------------- */

static int print_local(void *ctx, const char *name, const char *value)
{
    (void)ctx;
    printf("        %s = %s\n", name, value);
    return 0;
}

static void print_thread_text(struct pyf_target *t, const struct bt_thread *bt, int depth)
{
    printf("\nThread %d \"%s\"%s%s", (int)bt->th.tid, bt->name, bt->th.holds_gil ? " (gil)" : "",
           bt->th.on_cpu ? " (active)" : " (idle)");
    if (bt->th.interp_id > 0)
        printf(" (interpreter %lld)", (long long)bt->th.interp_id);
    printf("\n");
    if (bt->error[0]) {
        printf("    <unreadable: %s>\n", bt->error);
        return;
    }
    for (size_t i = 0; i < bt->st.n_frames; i++) {
        const struct pyf_frame *f = &bt->st.frames[i];
        struct pyf_err e;

        printf("    %s (%s:%d)\n", f->func, f->file, f->line);
        if ((int)i < depth && pyf_target__locals(t, f, print_local, NULL, &e) < 0)
            printf("        <locals unreadable: %s>\n", e.msg);
    }
    if (bt->st.truncated)
        printf("    ... (deeper than %zu frames)\n", bt->st.n_frames);
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

static void print_json(struct pyf_target *t, const struct bt_thread *bts, size_t n,
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
    json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    printf("\n");
    json_decref(root);
}

/* ---- main ---------------------------------------------------------------------------- */

int backtrace_main(int argc, char **argv)
{
    struct bt_opts o = {0};
    struct pyf_thread *threads = NULL;
    struct bt_thread *bts = NULL;
    struct pyf_target *t = NULL;
    struct pyf_frame *frames = NULL;
    char cmdline[512];
    struct pyf_err e;
    size_t n = 0;
    int ret = 1;

    if (parse_args(argc, argv, &o) < 0)
        return 2;
    if (pyf_target_open(o.pid, &t, &e) < 0) {
        fprintf(stderr, "probectl: %s\n", e.msg);
        return 1;
    }
    read_cmdline(o.pid, cmdline, sizeof(cmdline));
    threads = calloc(THREADS_CAP, sizeof(*threads));
    if (!threads || read_threads(t, threads, &n, &e) < 0) {
        fprintf(stderr, "probectl: %s\n", threads ? e.msg : "out of memory");
        goto out;
    }
    bts = calloc(n ? n : 1, sizeof(*bts));
    frames = calloc((n ? n : 1) * PYF_DEPTH_MAX, sizeof(*frames));
    if (!bts || !frames) {
        fprintf(stderr, "probectl: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        bts[i].th = threads[i];
        bts[i].st = (struct pyf_stack){.frames = frames + i * PYF_DEPTH_MAX, .cap = PYF_DEPTH_MAX};
        read_stack(t, &bts[i], o.pid);
    }
    if (o.json) {
        print_json(t, bts, n, cmdline, o.locals_depth);
    } else {
        const struct pyf_target_info *info = pyf_target__info(t);
        printf("Process %d: %s\nPython %s (%s)\n", (int)o.pid, cmdline, info->version_str,
               info->runtime_file);
        for (size_t i = 0; i < n; i++)
            print_thread_text(t, &bts[i], o.locals_depth);
    }
    ret = 0;
out:
    free(frames);
    free(bts);
    free(threads);
    pyf_target_free(t);
    return ret;
}
