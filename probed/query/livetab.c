/* livetab.c - see livetab.h: python.backtrace, then python.tasks. */
#define _GNU_SOURCE
#include "query/livetab.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pyframes.h"

enum col {
    COL_PID,
    COL_TID,
    COL_THREAD,
    COL_DEPTH,
    COL_FUNC,
    COL_FILE,
    COL_LINENO,
    COL_FIRST_LINE,
    COL_HOLDS_GIL,
    COL_ON_CPU,
    COL_LOCALS,
    COL_TASK
};

#define LIVE_PIDS_MAX 1024
#define LIVE_THREADS_MAX 4096 /* libpyframes' THREAD_SPANS_MAX */
#define IDX_LOCALS 1          /* idxNum bit: the locals column is used */
#define IDX_PID 2             /* idxNum bit: argv[0] is a pid = constraint */

struct live_row {
    int pid, tid, depth, lineno, first_line, holds_gil, on_cpu;
    char *thread, *func, *file, *locals, *task;
};

struct live_vtab {
    sqlite3_vtab base;
    const struct query_scope *scope;
};

/* What both tables' cursors start with: n rows read, the row at i. */
struct rows_cursor {
    sqlite3_vtab_cursor base;
    size_t n, cap, i;
};

struct live_cursor {
    struct rows_cursor pos;
    struct live_row *rows;
};

/* Declares the table @schema of a connection: its vtab a copy of @aux (the scope). */
static int declare(sqlite3 *db, void *aux, const char *schema, sqlite3_vtab **ret)
{
    const struct live_vtab *proto = aux;
    struct live_vtab *v;
    int rc = sqlite3_declare_vtab(db, schema);

    if (rc != SQLITE_OK)
        return rc;
    if (!(v = sqlite3_malloc(sizeof(*v))))
        return SQLITE_NOMEM;
    *v = *proto;
    memset(&v->base, 0, sizeof(v->base));
    *ret = &v->base;
    return SQLITE_OK;
}

static int live_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ret, char **errmsg)
{
    (void)argc, (void)argv, (void)errmsg;
    return declare(db, aux,
                   "CREATE TABLE x(pid INTEGER, tid INTEGER, thread TEXT, depth INTEGER, func TEXT,"
                   " file TEXT, lineno INTEGER, first_line INTEGER, holds_gil INTEGER,"
                   " on_cpu INTEGER, locals TEXT, task TEXT)",
                   ret);
}

static int live_disconnect(sqlite3_vtab *vt)
{
    sqlite3_free(vt);
    return SQLITE_OK;
}

/* Both tables' pid is column 0: a pid = constraint is handed to xFilter (IDX_PID). */
static int pid_index(sqlite3_index_info *info)
{
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->usable && c->iColumn == 0 && c->op == SQLITE_INDEX_CONSTRAINT_EQ) {
            info->aConstraintUsage[i].argvIndex = 1;
            info->aConstraintUsage[i].omit = 1;
            info->estimatedCost = 100;
            return IDX_PID;
        }
    }
    info->estimatedCost = 10000;
    return 0;
}

static int live_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    (void)vt;
    info->idxNum =
        pid_index(info) | ((info->colUsed & ((sqlite3_uint64)1 << COL_LOCALS)) ? IDX_LOCALS : 0);
    return SQLITE_OK;
}

static int open_cursor(size_t size, sqlite3_vtab_cursor **ret)
{
    struct rows_cursor *c = sqlite3_malloc((int)size);

    if (!c)
        return SQLITE_NOMEM;
    memset(c, 0, size);
    *ret = &c->base;
    return SQLITE_OK;
}

static int live_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **ret)
{
    (void)vt;
    return open_cursor(sizeof(struct live_cursor), ret);
}

static int rows_next(sqlite3_vtab_cursor *cur)
{
    ((struct rows_cursor *)cur)->i++;
    return SQLITE_OK;
}

static int rows_eof(sqlite3_vtab_cursor *cur)
{
    const struct rows_cursor *c = (const struct rows_cursor *)cur;
    return c->i >= c->n;
}

static int rows_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *ret)
{
    *ret = (sqlite3_int64)((const struct rows_cursor *)cur)->i;
    return SQLITE_OK;
}

static void free_rows(struct live_cursor *c)
{
    for (size_t i = 0; i < c->pos.n; i++) {
        free(c->rows[i].thread);
        free(c->rows[i].func);
        free(c->rows[i].file);
        free(c->rows[i].locals);
        free(c->rows[i].task);
    }
    free(c->rows);
    c->rows = NULL;
    c->pos.n = c->pos.cap = c->pos.i = 0;
}

static int live_close(sqlite3_vtab_cursor *cur)
{
    free_rows((struct live_cursor *)cur);
    sqlite3_free(cur);
    return SQLITE_OK;
}

struct pid_list {
    pid_t pids[LIVE_PIDS_MAX];
    size_t n;
    const struct query_scope *scope;
};

static int add_local(void *ctx, const char *name, const char *value)
{
    return json_object_set_new(ctx, name, json_string(value)) == 0 ? 0 : -ENOMEM;
}

static char *locals_json(struct pyf_target *t, const struct pyf_frame *f)
{
    json_t *obj = json_object();
    struct pyf_err e;
    char *s;

    if (!obj)
        return NULL;
    if (pyf_target__locals(t, f, add_local, obj, &e) < 0) {
        json_decref(obj);
        return strdup("{}");
    }
    s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(obj);
    return s;
}

/* Room for one more row of @size bytes in @rows (of @c's cap): -ENOMEM when there is none. */
static int grow_rows(struct rows_cursor *c, void **rows, size_t size)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        void *grown = realloc(*rows, cap * size);
        if (!grown)
            return -ENOMEM;
        *rows = grown;
        c->cap = cap;
    }
    return 0;
}

static int add_row(struct live_cursor *c, const struct live_row *r)
{
    if (grow_rows(&c->pos, (void **)&c->rows, sizeof(*r)) < 0)
        return -ENOMEM;
    c->rows[c->pos.n++] = *r;
    return 0;
}

#define LIVE_RUNNING_TASKS_MAX 256

/* The name (else the id) of the running task @task; NULL for none (malloc'd). */
static char *task_label(const struct pyf_running_task *task)
{
    char *s = NULL;

    if (!task)
        return NULL;
    if (task->name[0])
        return strdup(task->name);
    return asprintf(&s, "0x%llx", (unsigned long long)task->task) < 0 ? NULL : s;
}

/* Every thread's stack of @pid into rows. */
static int read_pid(struct live_cursor *c, pid_t pid, bool with_locals, struct pyf_frame *frames,
                    struct pyf_err *e)
{
    struct pyf_thread *threads = calloc(LIVE_THREADS_MAX, sizeof(*threads));
    struct pyf_running_task *run = calloc(LIVE_RUNNING_TASKS_MAX, sizeof(*run));
    struct pyf_target *t = NULL;
    size_t n = 0, n_run = 0;
    int r = threads && run ? pyf_target_open(pid, &t, e) : -ENOMEM;

    if (!threads || !run)
        snprintf(e->msg, sizeof(e->msg), "pid %d: no memory for its thread list", (int)pid);
    if (r == 0)
        r = pyf_target__threads(t, threads, LIVE_THREADS_MAX, &n, e);
    /* the tasks running now: a thread whose stack holds one's coroutine frame runs it */
    if (r == 0 &&
        pyf_target__running_tasks(t, threads, n, run, LIVE_RUNNING_TASKS_MAX, &n_run, e) < 0)
        n_run = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        struct pyf_stack st = {.frames = frames, .cap = PYF_DEPTH_MAX};
        char name[64];

        if (pyf_target__stack(t, &threads[i], &st, e) < 0) {
            if (e->kind != PYF_TORN)
                r = -EIO;
            continue; /* a thread that kept changing: no rows this time */
        }
        /* threading's name for it, else the OS's */
        if (pyf_target__thread_py_name(t, threads[i].ident, name, sizeof(name), e) < 0 || !name[0])
            pyf_thread_name(pid, threads[i].tid, name, sizeof(name));
        char *task = task_label(pyf_running_task_on(&st, run, n_run, NULL));

        for (size_t d = 0; r == 0 && d < st.n_frames; d++) {
            struct live_row row = {
                .pid = pid,
                .tid = threads[i].tid,
                .depth = (int)d,
                .lineno = st.frames[d].line,
                .first_line = st.frames[d].first_line,
                .holds_gil = threads[i].holds_gil,
                .on_cpu = threads[i].on_cpu,
                .thread = strdup(name),
                .func = strdup(st.frames[d].func),
                .file = strdup(st.frames[d].file),
                .locals = with_locals ? locals_json(t, &st.frames[d]) : NULL,
                .task = task ? strdup(task) : NULL,
            };
            r = add_row(c, &row);
        }
        free(task);
    }
    pyf_target_free(t);
    free(threads);
    free(run);
    return r;
}

/* The pids this scan reads: the scope's one pid (if its owner asks), or the attached ones. */
static int scan_pids(const struct live_vtab *v, pid_t only, struct pid_list *l, char **errmsg)
{
    l->n = 0;
    l->scope = v->scope;
    if (v->scope->pid) {
        l->pids[l->n++] = v->scope->pid;
    } else if (only) {
        l->pids[l->n++] = only;
    } else {
        for (size_t i = 0; i < v->scope->n_live_pids && l->n < LIVE_PIDS_MAX; i++)
            l->pids[l->n++] = v->scope->live_pids[i];
        return 0;
    }
    if (!v->scope->root) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/%d", l->pids[0]);
        if (stat(path, &st) == 0 && st.st_uid != v->scope->uid) {
            *errmsg = sqlite3_mprintf("pid %d: permission denied (not your process)", l->pids[0]);
            return SQLITE_AUTH;
        }
    }
    return 0;
}

static int live_filter(sqlite3_vtab_cursor *cur, int idx_num, const char *idx_str, int argc,
                       sqlite3_value **argv)
{
    struct live_cursor *c = (struct live_cursor *)cur;
    struct live_vtab *v = (struct live_vtab *)cur->pVtab;
    pid_t only = (idx_num & IDX_PID) && argc > 0 ? (pid_t)sqlite3_value_int(argv[0]) : 0;
    struct pyf_frame *frames = calloc(PYF_DEPTH_MAX, sizeof(*frames));
    struct pid_list *l = malloc(sizeof(*l));
    int rc = frames && l ? SQLITE_OK : SQLITE_NOMEM;

    (void)idx_str;
    free_rows(c);
    if (rc == SQLITE_OK)
        rc = scan_pids(v, only, l, &v->base.zErrMsg);
    for (size_t i = 0; rc == SQLITE_OK && i < l->n; i++) {
        struct pyf_err e = {0};
        if (only && l->pids[i] != only)
            continue;
        /* An attached target that ended meanwhile simply has no rows; a pid the user named
         * is an error worth reporting. */
        if (read_pid(c, l->pids[i], idx_num & IDX_LOCALS, frames, &e) < 0 &&
            (v->scope->pid || only)) {
            v->base.zErrMsg = sqlite3_mprintf("python.backtrace: %s", e.msg);
            rc = SQLITE_ERROR;
        }
    }
    free(frames);
    free(l);
    return rc;
}

static int live_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    const struct live_cursor *c = (const struct live_cursor *)cur;
    const struct live_row *r = &c->rows[c->pos.i];
    const int ints[] = {[COL_PID] = r->pid,
                        [COL_TID] = r->tid,
                        [COL_DEPTH] = r->depth,
                        [COL_LINENO] = r->lineno,
                        [COL_FIRST_LINE] = r->first_line,
                        [COL_HOLDS_GIL] = r->holds_gil,
                        [COL_ON_CPU] = r->on_cpu};
    const char *text = col == COL_THREAD   ? r->thread
                       : col == COL_FUNC   ? r->func
                       : col == COL_FILE   ? r->file
                       : col == COL_LOCALS ? r->locals
                       : col == COL_TASK   ? r->task
                                           : NULL;

    if (col == COL_THREAD || col == COL_FUNC || col == COL_FILE || col == COL_LOCALS ||
        col == COL_TASK) {
        if (text)
            sqlite3_result_text(ctx, text, -1, SQLITE_TRANSIENT);
        else
            sqlite3_result_null(ctx);
    } else {
        sqlite3_result_int(ctx, ints[col]);
    }
    return SQLITE_OK;
}

static const sqlite3_module live_module = {
    .iVersion = 0,
    .xCreate = live_connect,
    .xConnect = live_connect,
    .xBestIndex = live_best_index,
    .xDisconnect = live_disconnect,
    .xDestroy = live_disconnect,
    .xOpen = live_open,
    .xClose = live_close,
    .xFilter = live_filter,
    .xNext = rows_next,
    .xEof = rows_eof,
    .xColumn = live_column,
    .xRowid = rows_rowid,
};

static int register_module(sqlite3 *db, const struct query_scope *scope, const char *name,
                           const sqlite3_module *module)
{
    struct live_vtab *proto = sqlite3_malloc(sizeof(*proto));

    if (!proto)
        return SQLITE_NOMEM;
    *proto = (struct live_vtab){.scope = scope};
    return sqlite3_create_module_v2(db, name, module, proto, sqlite3_free);
}

int livetab_register(sqlite3 *db, const struct query_scope *scope)
{
    return register_module(db, scope, "probed_backtrace", &live_module);
}

/* ---- python.tasks: each asyncio task's frames, one row per frame ------------------------ */

enum task_col {
    TCOL_PID,
    TCOL_TASK,
    TCOL_NAME,
    TCOL_STATE,
    TCOL_TID,
    TCOL_DEPTH,
    TCOL_FUNC,
    TCOL_FILE,
    TCOL_LINENO,
    TCOL_WAITS_FOR,
    TCOL_AWAITED_BY,
    TCOL_N
};

#define LIVE_TASKS_MAX 100000 /* tasks of one process a scan reads */

struct task_row {
    int pid, tid;
    int depth, lineno;  /* -1: the task has no frames (done, cancelled): NULL */
    char *text[TCOL_N]; /* task, name, state, func, file, waits_for, awaited_by; else NULL */
};

struct task_cursor {
    struct rows_cursor pos;
    struct task_row *rows;
};

static int task_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ret, char **errmsg)
{
    (void)argc, (void)argv, (void)errmsg;
    return declare(db, aux,
                   "CREATE TABLE x(pid INTEGER, task TEXT, name TEXT, state TEXT, tid INTEGER,"
                   " depth INTEGER, func TEXT, file TEXT, lineno INTEGER, waits_for TEXT,"
                   " awaited_by TEXT)",
                   ret);
}

static int task_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    (void)vt;
    info->idxNum = pid_index(info);
    return SQLITE_OK;
}

static int task_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **ret)
{
    (void)vt;
    return open_cursor(sizeof(struct task_cursor), ret);
}

static void free_task_rows(struct task_cursor *c)
{
    for (size_t i = 0; i < c->pos.n; i++)
        for (int k = 0; k < TCOL_N; k++)
            free(c->rows[i].text[k]);
    free(c->rows);
    c->rows = NULL;
    c->pos.n = c->pos.cap = c->pos.i = 0;
}

static int task_close(sqlite3_vtab_cursor *cur)
{
    free_task_rows((struct task_cursor *)cur);
    sqlite3_free(cur);
    return SQLITE_OK;
}

static char *hex_id(uint64_t raddr)
{
    char *s = NULL;

    return asprintf(&s, "0x%llx", (unsigned long long)raddr) < 0 ? NULL : s;
}

static char *awaiters_json(const struct pyf_tasks *ts, const struct pyf_task *t)
{
    json_t *a = json_array();
    char *s;

    for (size_t k = 0; a && k < t->n_parents; k++) {
        char *id = hex_id(ts->tasks[ts->parents[t->parent0 + k]].raddr);
        json_array_append_new(a, json_string(id ? id : ""));
        free(id);
    }
    s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s;
}

static int add_task_row(struct task_cursor *c, const struct task_row *r)
{
    if (grow_rows(&c->pos, (void **)&c->rows, sizeof(*r)) < 0)
        return -ENOMEM;
    c->rows[c->pos.n++] = *r;
    return 0;
}

/* Every task of @pid into rows: one per frame, one with no frame for a task that has none. */
static int read_tasks(struct task_cursor *c, pid_t pid, struct pyf_err *e)
{
    struct pyf_target *t = NULL;
    struct pyf_tasks *ts = NULL;
    int r = pyf_target_open(pid, &t, e);

    for (int i = 0; r == 0 && i < 5; i++) /* a read torn as a whole is made again */
        if ((r = pyf_target__tasks(t, LIVE_TASKS_MAX, &ts, e)) == 0 || e->kind != PYF_TORN)
            break;
    for (size_t i = 0; r == 0 && i < ts->n_tasks; i++) {
        const struct pyf_task *task = &ts->tasks[i];
        size_t n = task->n_frames ? task->n_frames : 1;

        for (size_t d = 0; r == 0 && d < n; d++) {
            const struct pyf_task_frame *f = task->n_frames ? &ts->frames[task->frame0 + d] : NULL;
            struct task_row row = {.pid = pid,
                                   .tid = task->state == PYF_TASK_RUNNING ? task->tid : 0,
                                   .depth = f ? (int)d : -1,
                                   .lineno = f ? f->line : -1};

            row.text[TCOL_TASK] = hex_id(task->raddr);
            row.text[TCOL_NAME] = strdup(task->name);
            row.text[TCOL_STATE] = strdup(pyf_task_state_name(task->state));
            row.text[TCOL_FUNC] = f ? strdup(f->func) : NULL;
            row.text[TCOL_FILE] = f ? strdup(f->file) : NULL;
            row.text[TCOL_WAITS_FOR] = task->state == PYF_TASK_WAITING && task->waits_for
                                           ? strdup(task->waits_for_type)
                                           : NULL;
            row.text[TCOL_AWAITED_BY] = awaiters_json(ts, task);
            if (add_task_row(c, &row) < 0) {
                for (int k = 0; k < TCOL_N; k++)
                    free(row.text[k]);
                snprintf(e->msg, sizeof(e->msg), "pid %d: no memory for its tasks", (int)pid);
                r = -ENOMEM;
            }
        }
    }
    pyf_tasks_free(ts);
    pyf_target_free(t);
    return r;
}

static int task_filter(sqlite3_vtab_cursor *cur, int idx_num, const char *idx_str, int argc,
                       sqlite3_value **argv)
{
    struct task_cursor *c = (struct task_cursor *)cur;
    struct live_vtab *v = (struct live_vtab *)cur->pVtab;
    pid_t only = (idx_num & IDX_PID) && argc > 0 ? (pid_t)sqlite3_value_int(argv[0]) : 0;
    struct pid_list *l = malloc(sizeof(*l));
    int rc = l ? SQLITE_OK : SQLITE_NOMEM;

    (void)idx_str;
    free_task_rows(c);
    if (rc == SQLITE_OK)
        rc = scan_pids(v, only, l, &v->base.zErrMsg);
    for (size_t i = 0; rc == SQLITE_OK && i < l->n; i++) {
        struct pyf_err e = {0};

        if (only && l->pids[i] != only)
            continue;
        /* as python.backtrace: an attached target that cannot be read (ended, 3.6) has no
         * rows; one the user named is an error */
        if (read_tasks(c, l->pids[i], &e) < 0 && (v->scope->pid || only)) {
            v->base.zErrMsg = sqlite3_mprintf("python.tasks: %s", e.msg);
            rc = SQLITE_ERROR;
        }
    }
    free(l);
    return rc;
}

static int task_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    const struct task_cursor *c = (const struct task_cursor *)cur;
    const struct task_row *r = &c->rows[c->pos.i];

    if (col == TCOL_PID)
        sqlite3_result_int(ctx, r->pid);
    else if (col == TCOL_TID && r->tid)
        sqlite3_result_int(ctx, r->tid);
    else if (col == TCOL_DEPTH && r->depth >= 0)
        sqlite3_result_int(ctx, r->depth);
    else if (col == TCOL_LINENO && r->depth >= 0)
        sqlite3_result_int(ctx, r->lineno);
    else if (col >= 0 && col < TCOL_N && r->text[col])
        sqlite3_result_text(ctx, r->text[col], -1, SQLITE_TRANSIENT);
    else
        sqlite3_result_null(ctx);
    return SQLITE_OK;
}

static const sqlite3_module task_module = {
    .iVersion = 0,
    .xCreate = task_connect,
    .xConnect = task_connect,
    .xBestIndex = task_best_index,
    .xDisconnect = live_disconnect,
    .xDestroy = live_disconnect,
    .xOpen = task_open,
    .xClose = task_close,
    .xFilter = task_filter,
    .xNext = rows_next,
    .xEof = rows_eof,
    .xColumn = task_column,
    .xRowid = rows_rowid,
};

int livetab_register_tasks(sqlite3 *db, const struct query_scope *scope)
{
    return register_module(db, scope, "probed_tasks", &task_module);
}
