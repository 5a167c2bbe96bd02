/* backtrace.c - `probectl backtrace`; see backtrace.h. */
#define _GNU_SOURCE
#include "ctl/backtrace.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/client.h"
#include "common/dump.h"
#include "common/taskdump.h"

struct bt_opts {
    pid_t pid;
    bool json, direct, native, probed, tasks;
    int locals_depth; /* frames (innermost first) whose locals are shown; 0: none */
    const char *socket;
    const char *core, *executable; /* --core: a core file instead of a process */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: probectl backtrace <pid> [--native] [--locals[=N]] [--json] [--direct]\n"
            "                          [--probed] [--socket S]\n"
            "       probectl backtrace <pid> --tasks [--json] [--direct] [--socket S]\n"
            "       probectl backtrace --core FILE [--executable PYTHON] [--native] [--locals]\n"
            "  Prints every thread's Python stack, innermost frame first.\n"
            "  --core FILE   a core file (the kernel's, or gcore's) of a Python process instead\n"
            "                of a live one; its files are read from this machine, its main\n"
            "                program from --executable when it is elsewhere here\n"
            "  --native      mixed stacks: C/C++ frames too, Python frames in place of the\n"
            "                interpreter's (the threads are stopped for a moment with ptrace)\n"
            "  --locals[=N]  also show the local variables of the N innermost frames (all)\n"
            "  --tasks       the asyncio tasks instead of the threads: each task's state, the\n"
            "                coroutine stack it waits in, and the tasks awaiting it, as a tree\n"
            "  --json        machine-readable output (see docs/backtrace.md)\n"
            "  --direct      read the process here instead of through the daemon\n"
            "  --probed      also probed's own threads (the stub's, when eval or the torch\n"
            "                trace has loaded it) and frames (<probed...>), left out otherwise\n"
            "  --socket S    the daemon's socket (default $PROBED_SOCKET or %s)\n"
            "  Without a daemon listening, the process is read directly.\n",
            PROBED_DEFAULT_SOCKET);
}

static int parse_args(int argc, char **argv, struct bt_opts *o)
{
    static const struct option longopts[] = {
        {"locals", optional_argument, NULL, 'l'},
        {"json", no_argument, NULL, 'j'},
        {"native", no_argument, NULL, 'n'},
        {"probed", no_argument, NULL, 'P'},
        {"direct", no_argument, NULL, 'd'},
        {"socket", required_argument, NULL, 's'},
        {"core", required_argument, NULL, 'c'},
        {"executable", required_argument, NULL, 'e'},
        {"tasks", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    long pid;
    int c;

    while ((c = getopt_long(argc, argv, "l::jnds:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            o->locals_depth = optarg ? atoi(optarg) : 1024;
            if (o->locals_depth <= 0) {
                fprintf(stderr, "probectl backtrace: --locals=N needs N > 0\n");
                return -1;
            }
            break;
        case 'j':
            o->json = true;
            break;
        case 'd':
            o->direct = true;
            break;
        case 'P':
            o->probed = true;
            break;
        case 'n':
            o->native = true;
            break;
        case 's':
            o->socket = optarg;
            break;
        case 'c':
            o->core = optarg;
            break;
        case 'e':
            o->executable = optarg;
            break;
        case 't':
            o->tasks = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (o->executable && !o->core) {
        fprintf(stderr, "probectl backtrace: --executable goes with --core\n");
        return -1;
    }
    if (o->tasks && (o->native || o->locals_depth || o->core || o->probed)) {
        fprintf(stderr, "probectl backtrace: --tasks goes with neither --native, --locals, "
                        "--core nor --probed\n");
        return -1;
    }
    if (o->core && optind == argc)
        return 0;
    if (optind != argc - 1 || o->core) {
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

/* ---- text output, from the JSON document ------------------------------------------ */

/* A native frame of a mixed stack: function+offset (object) [file:line]; false otherwise. */
static bool print_native_frame(json_t *f)
{
    const char *fn = json_string_value(json_object_get(f, "function"));
    const char *object = json_string_value(json_object_get(f, "object"));
    const char *file = json_string_value(json_object_get(f, "file"));
    const char *base = object ? strrchr(object, '/') : NULL;

    const char *kind = json_string_value(json_object_get(f, "kind"));

    if (!kind || strcmp(kind, "native") != 0)
        return false;
    if (fn)
        printf("    [native] %s+0x%llx", fn,
               (unsigned long long)json_integer_value(json_object_get(f, "offset")));
    else
        printf("    [native] %s", json_string_value(json_object_get(f, "pc")));
    printf(" (%s+0x%llx)",
           base     ? base + 1
           : object ? object
                    : "anonymous memory",
           (unsigned long long)json_integer_value(json_object_get(f, "object_offset")));
    if (file)
        printf(" %s:%d", file, (int)json_integer_value(json_object_get(f, "line")));
    printf("\n");
    return true;
}

static void print_thread_text(json_t *jt)
{
    json_t *frames = json_object_get(jt, "frames"), *f;
    const char *error = json_string_value(json_object_get(jt, "error"));
    json_int_t interp = json_integer_value(json_object_get(jt, "interpreter"));
    size_t i;

    printf("\nThread %d \"%s\"%s%s", (int)json_integer_value(json_object_get(jt, "tid")),
           json_string_value(json_object_get(jt, "name")),
           json_is_true(json_object_get(jt, "holds_gil")) ? " (gil)" : "",
           json_is_true(json_object_get(jt, "on_cpu")) ? " (active)" : " (idle)");
    if (interp > 0)
        printf(" (interpreter %lld)", (long long)interp);
    if (json_is_true(json_object_get(jt, "gc_collecting")))
        printf(" (garbage collecting)");
    if (json_is_false(json_object_get(jt, "python")))
        printf(" (no Python)");
    if (json_is_true(json_object_get(jt, "probed")))
        printf(" (probed's)");
    if (json_is_object(json_object_get(jt, "task"))) { /* the asyncio task it runs */
        const char *name = json_string_value(json_object_get(json_object_get(jt, "task"), "name"));
        printf(" (task \"%s\")",
               name && *name
                   ? name
                   : json_string_value(json_object_get(json_object_get(jt, "task"), "id")));
    }
    printf("\n");
    if (error) {
        printf("    <unreadable: %s>\n", error);
        return;
    }
    json_array_foreach(frames, i, f)
    {
        json_t *locals = json_object_get(f, "locals"), *l;
        const char *lerr = json_string_value(json_object_get(f, "locals_error"));
        size_t k;

        if (print_native_frame(f))
            continue;
        printf("    %s (%s:%d)\n", json_string_value(json_object_get(f, "function")),
               json_string_value(json_object_get(f, "file")),
               (int)json_integer_value(json_object_get(f, "line")));
        json_array_foreach(locals, k, l)
            printf("        %s = %s\n", json_string_value(json_object_get(l, "name")),
                   json_string_value(json_object_get(l, "value")));
        if (lerr)
            printf("        <locals unreadable: %s>\n", lerr);
    }
    if (json_string_value(json_object_get(jt, "native_error")))
        printf("    <native frames unreadable: %s>\n",
               json_string_value(json_object_get(jt, "native_error")));
    if (json_is_true(json_object_get(jt, "truncated")))
        printf("    ... (deeper than %zu frames)\n", json_array_size(frames));
}

void backtrace_print_text(json_t *doc)
{
    json_t *threads = json_object_get(doc, "threads"), *jt;
    size_t i;

    printf("Process %d: %s\nPython %s (%s)\n", (int)json_integer_value(json_object_get(doc, "pid")),
           json_string_value(json_object_get(doc, "command")),
           json_string_value(json_object_get(doc, "python_version")),
           json_string_value(json_object_get(doc, "runtime_file")));
    if (json_is_string(json_object_get(doc, "note")))
        printf("Note: %s\n", json_string_value(json_object_get(doc, "note")));
    if (json_is_number(json_object_get(doc, "native_pause_ms")))
        printf("Native stacks: every thread held %.1f ms\n",
               json_number_value(json_object_get(doc, "native_pause_ms")));
    json_array_foreach(threads, i, jt) print_thread_text(jt);
}

/* ---- asyncio tasks: the await tree ------------------------------------------------ */

#define TREE_DEPTH_MAX 64 /* a deeper await tree (or a cycle) is cut with "..." */

static bool awaited_by(json_t *task, const char *id)
{
    json_t *by = json_object_get(task, "awaited_by"), *x;
    size_t i;

    json_array_foreach(by, i, x)
    {
        if (strcmp(json_string_value(x), id) == 0)
            return true;
    }
    return false;
}

/* A root of the tree: no task of the document awaits it (an awaiter left out counts not). */
static bool is_root(json_t *tasks, json_t *task)
{
    json_t *by = json_object_get(task, "awaited_by"), *x, *t;
    size_t i, k;

    json_array_foreach(by, i, x)
    {
        json_array_foreach(tasks, k, t)
        {
            if (strcmp(json_string_value(json_object_get(t, "id")), json_string_value(x)) == 0)
                return false;
        }
    }
    return true;
}

static void print_task(json_t *tasks, json_t *task, int depth)
{
    const char *name = json_string_value(json_object_get(task, "name"));
    const char *state = json_string_value(json_object_get(task, "state"));
    const char *id = json_string_value(json_object_get(task, "id"));
    json_t *waits = json_object_get(task, "waits_for"), *f, *child;
    int pad = depth * 4;
    size_t i;

    printf("%s%*s%sTask \"%s\" (%s", depth ? "" : "\n", pad, "", depth ? "└── " : "",
           name && *name ? name : id, state);
    if (json_is_integer(json_object_get(task, "tid")))
        printf(" on thread %d", (int)json_integer_value(json_object_get(task, "tid")));
    if (waits)
        printf(" for %s", json_string_value(json_object_get(waits, "type")));
    printf(")\n");
    pad += depth ? 4 : 0;
    json_array_foreach(json_object_get(task, "frames"), i, f)
        printf("%*s    %s (%s:%d)\n", pad, "", json_string_value(json_object_get(f, "func")),
               json_string_value(json_object_get(f, "file")),
               (int)json_integer_value(json_object_get(f, "line")));
    if (depth >= TREE_DEPTH_MAX) {
        printf("%*s    ...\n", pad, "");
        return;
    }
    json_array_foreach(tasks, i, child)
    {
        if (awaited_by(child, id))
            print_task(tasks, child, depth + 1);
    }
}

static void print_tasks_text(json_t *doc)
{
    json_t *tasks = json_object_get(doc, "tasks"), *t;
    json_int_t torn = json_integer_value(json_object_get(doc, "torn"));
    json_int_t total = json_integer_value(json_object_get(doc, "total"));
    size_t i;

    printf("Process %d: Python %s, %zu asyncio task%s",
           (int)json_integer_value(json_object_get(doc, "pid")),
           json_string_value(json_object_get(doc, "python_version")), json_array_size(tasks),
           json_array_size(tasks) == 1 ? "" : "s");
    if (total > (json_int_t)json_array_size(tasks))
        printf(" (of %lld)", (long long)total);
    if (torn)
        printf(", %lld left out: they changed each time they were read", (long long)torn);
    printf("\n");
    /* the roots: tasks no task awaits; the rest print under each task awaiting them */
    json_array_foreach(tasks, i, t)
    {
        if (is_root(tasks, t))
            print_task(tasks, t, 0);
    }
}

/* ---- main ---------------------------------------------------------------------------- */

/* Through the daemon: 1 = no daemon (read directly), 0 = *doc set, -1 = error printed. */
static int from_daemon(const struct bt_opts *o, json_t **doc)
{
    char path[128], err[512];
    long status = 0;
    int r;

    if (o->tasks)
        snprintf(path, sizeof(path), "/v1/backtrace?pid=%d&tasks=1", (int)o->pid);
    else
        snprintf(path, sizeof(path), "/v1/backtrace?pid=%d&locals=%d&native=%d&probed=%d",
                 (int)o->pid, o->locals_depth, o->native, o->probed);
    r = client_call(client_socket_path(o->socket), "GET", path, NULL, &status, doc, NULL, NULL, err,
                    sizeof(err));
    if (r == -ENOENT || r == -ECONNREFUSED)
        return 1;
    if (r < 0) {
        fprintf(stderr, "probectl: %s\n", err);
        return -1;
    }
    if (status != 200 || !*doc) {
        fprintf(stderr, "probectl: %s\n", client_error_text(*doc));
        json_decref(*doc);
        return -1;
    }
    return 0;
}

int backtrace_main(int argc, char **argv)
{
    struct bt_opts o = {0};
    json_t *doc = NULL;
    struct pyf_err e;
    int r;

    if (parse_args(argc, argv, &o) < 0)
        return 2;
    if (o.core) { /* read here, with the user's own rights to the core and its files */
        struct dump *d = NULL;
        r = dump_open_core(o.core, o.executable, o.native, &d, &e);
        if (r == 0)
            r = dump_capture(d, &e);
        if (r == 0)
            r = dump_render(d, o.locals_depth, &doc, &e);
        dump_free(d);
        if (r < 0) {
            fprintf(stderr, "probectl: %s\n", e.msg);
            return 1;
        }
    }
    r = o.core ? 0 : o.direct ? 1 : from_daemon(&o, &doc);
    if (r < 0)
        return 1;
    if (r == 1 && o.tasks && taskdump_json(o.pid, TASKDUMP_MAX, &doc, &e) < 0) {
        fprintf(stderr, "probectl: %s\n", e.msg);
        return 1;
    }
    if (r == 1 && !o.tasks &&
        dump_json(o.pid, o.locals_depth,
                  (o.native ? DUMP_NATIVE : 0) | (o.probed ? DUMP_PROBED : 0), &doc, &e) < 0) {
        fprintf(stderr, "probectl: %s\n", e.msg);
        return 1;
    }
    if (o.json) {
        json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        printf("\n");
    } else if (o.tasks) {
        print_tasks_text(doc);
    } else {
        backtrace_print_text(doc);
    }
    json_decref(doc);
    return 0;
}
