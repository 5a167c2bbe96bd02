/*
 * pynames.c - pyf_target__thread_py_name(): the threading module's names of a target's
 * threads, read from outside: sys.modules['threading']._active, a dict from each thread's
 * ident to its Thread object, whose _name is the name. See pyframes.h.
 *
 * Threads: the target's user, one at a time. Memory: the copy of the registry (t->pynames),
 * grown as needed. Failure: -errno + pyf_err when the registry cannot be read; a thread
 * missing from it is no error (its name is "").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "pyobj.h"
#include "target.h"

/* threads of the registry copied: more than a target's sampled threads (4096), so that a
 * thread missing from the copy is new, not left out (each miss would copy it all again) */
#define REGISTRY_MAX 16384
#define REREAD_MIN_NS 200000000ull /* 200 ms between copies caused by misses */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct pyname *find(const struct pyf_target *t, uint64_t ident)
{
    for (size_t i = 0; i < t->n_pynames; i++)
        if (t->pynames[i].ident == ident)
            return &t->pynames[i];
    return NULL;
}

/* threading._active of the main interpreter: 0 when there is none (not imported yet). */
static int registry(struct pyf_target *t, uint64_t *ret, struct pyf_err *e)
{
    uint64_t interp = 0, modules = 0, module = 0, globals = 0;
    int r = threads__first_interp(t, &interp, e);

    *ret = 0;
    if (r == 0 && interp)
        r = target_read_u64(t, interp + (uint64_t)t->lay.is_modules, &modules, e, "sys.modules");
    if (r == 0 && modules)
        r = pyobj_dict_get_str(t, modules, "threading", &module, e);
    if (r == 0 && module)
        r = target_read_u64(t, module + (uint64_t)t->lay.module_dict, &globals, e,
                            "threading's globals");
    if (r == 0 && globals)
        r = pyobj_dict_get_str(t, globals, "_active", ret, e);
    return r;
}

/* Copies the registry into t->pynames. */
static int read_registry(struct pyf_target *t, struct pyf_err *e)
{
    uint64_t active = 0, *idents = NULL, *threads = NULL;
    size_t n = 0, total = 0, kept = 0;
    struct pyname *names = NULL;
    int r = registry(t, &active, e);

    t->pynames_read_ns = now_ns();
    if (r < 0 || !active)
        return r;
    idents = malloc(REGISTRY_MAX * sizeof(*idents));
    threads = malloc(REGISTRY_MAX * sizeof(*threads));
    if (!idents || !threads)
        r = pyf_fail(e, PYF_INVALID, ENOMEM, 0, "thread registry");
    if (r == 0)
        r = pyobj_dict_items(t, active, idents, threads, REGISTRY_MAX, &n, &total, e);
    if (r == 0 && n && !(names = calloc(n, sizeof(*names))))
        r = pyf_fail(e, PYF_INVALID, ENOMEM, 0, "thread names");
    for (size_t i = 0; r == 0 && i < n; i++) {
        uint64_t ident = 0, name = 0;
        char *text = NULL;

        /* an entry that cannot be read (the thread ending meanwhile) is left out */
        if (pyobj_u64(t, idents[i], &ident, NULL) < 0 ||
            pyobj_attr(t, threads[i], "_name", &name, NULL) < 0 || !name ||
            pyobj_str(t, name, sizeof(names[0].name) - 1, &text, NULL) < 0)
            continue;
        names[kept].ident = ident;
        snprintf(names[kept++].name, sizeof(names[0].name), "%s", text);
        free(text);
    }
    if (r == 0) {
        free(t->pynames);
        t->pynames = names;
        t->n_pynames = kept;
        names = NULL;
    }
    free(names);
    free(idents);
    free(threads);
    return r;
}

int pyf_target__thread_py_name(struct pyf_target *t, uint64_t ident, char *buf, size_t size,
                               struct pyf_err *reterr)
{
    const struct pyname *p = find(t, ident);
    int r = 0;

    if (!p && (!t->pynames_read_ns || now_ns() - t->pynames_read_ns >= REREAD_MIN_NS)) {
        r = read_registry(t, reterr);
        p = find(t, ident);
    }
    if (size)
        snprintf(buf, size, "%s", p ? p->name : "");
    return r;
}
