/*
 * locals.c - pyf_target__locals(): names and rendered values of one frame's variables.
 *
 * Not on the sampling path: it allocates freely and reads object by object. Names come from
 * co_varnames + co_cellvars + co_freevars (<= 3.10) or co_localsplusnames (3.11+); values
 * from the frame's localsplus array. Cells are looked through, unbound slots are skipped,
 * and 3.13's hidden slots (comprehension temporaries) are not shown.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pyobj.h"
#include "remote.h"
#include "target.h"

#define LOCALS_MAX 1024
#define VALUE_MAX 512
#define CO_FAST_HIDDEN 0x10
#define CO_FAST_CELL 0x40
#define CO_FAST_FREE 0x80

struct local_names {
    uint64_t names[LOCALS_MAX];
    uint8_t kinds[LOCALS_MAX]; /* CO_FAST_* (3.11+); CO_FAST_CELL for <= 3.10 cells */
    size_t n;
};

static int read_code(const struct pyf_target *t, const struct pyf_frame *fr, uint8_t **ret_buf,
                     struct pyf_err *e)
{
    size_t size = (size_t)t->lay.co_size;
    uint8_t *buf = malloc(size);
    uint64_t code;
    int r;

    if (!buf)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "code object");
    /* The frame must still run the code we reported, or its slots mean something else. */
    r = remote_read_u64(&t->mem, fr->frame_raddr + (uint64_t)t->lay.fr_code, &code);
    if (r == 0 && stackref_object(&t->lay, code) != fr->code_raddr)
        r = -EAGAIN;
    if (r == 0)
        r = remote_read(&t->mem, fr->code_raddr, buf, size);
    if (r < 0) {
        free(buf);
        return pyf_fail(e, r == -EAGAIN ? PYF_TORN : pyf_read_err_kind(-r), -r, fr->frame_raddr,
                        "pid %d: frame 0x%" PRIx64 " moved on", t->info.pid, fr->frame_raddr);
    }
    *ret_buf = buf;
    return 0;
}

static int append_tuple(const struct pyf_target *t, uint64_t tuple, size_t want, uint8_t kind,
                        struct local_names *ln, struct pyf_err *e)
{
    size_t got = 0, room = LOCALS_MAX - ln->n;
    int r;

    if (!tuple || want == 0)
        return 0;
    r = pyobj_tuple(t, tuple, ln->names + ln->n, want < room ? want : room, &got, e);
    if (r < 0)
        return r;
    memset(ln->kinds + ln->n, kind, got);
    ln->n += got;
    return 0;
}

static int local_names(const struct pyf_target *t, const uint8_t *code, struct local_names *ln,
                       struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    int r;

    ln->n = 0;
    if (l->co_localsplusnames >= 0) {
        int32_t n = field_i32(code, l->co_nlocalsplus);
        uint8_t *kinds = NULL;
        size_t n_kinds = 0;

        if (n < 0 || n > LOCALS_MAX)
            return pyf_fail(e, PYF_TORN, EFAULT, 0, "code has %d locals", n);
        r = append_tuple(t, field_u64(code, l->co_localsplusnames), (size_t)n, 0, ln, e);
        if (r == 0)
            r = pyobj_bytes(t, field_u64(code, l->co_localspluskinds), LOCALS_MAX, &kinds, &n_kinds,
                            e);
        if (r < 0)
            return r;
        for (size_t i = 0; i < ln->n; i++)
            ln->kinds[i] = i < n_kinds ? kinds[i] : 0;
        free(kinds);
        return 0;
    }
    /* <= 3.10: f_localsplus holds the locals, then the cells, then the free variables. */
    {
        int32_t n = field_i32(code, l->co_nlocals);
        uint64_t cells[LOCALS_MAX];
        size_t n_cells = 0, n_free = 0;

        if (n < 0 || n > LOCALS_MAX)
            return pyf_fail(e, PYF_TORN, EFAULT, 0, "code has %d locals", n);
        r = append_tuple(t, field_u64(code, l->co_varnames), (size_t)n, 0, ln, e);
        if (r == 0)
            r = pyobj_tuple(t, field_u64(code, l->co_cellvars), cells, LOCALS_MAX, &n_cells, e);
        if (r == 0)
            r = append_tuple(t, field_u64(code, l->co_cellvars), n_cells, CO_FAST_CELL, ln, e);
        if (r == 0)
            r = pyobj_tuple(t, field_u64(code, l->co_freevars), cells, LOCALS_MAX, &n_free, e);
        if (r == 0)
            r = append_tuple(t, field_u64(code, l->co_freevars), n_free, CO_FAST_FREE, ln, e);
        return r;
    }
}

/* The value in a slot: a cell's content for cell and free variables (0: unbound). */
static int slot_value(const struct pyf_target *t, uint64_t v, uint8_t kind, uint64_t *ret,
                      struct pyf_err *e)
{
    uint64_t type = 0;
    int r;

    *ret = v;
    if (!v || !(kind & (CO_FAST_CELL | CO_FAST_FREE)) || !t->types.cell)
        return 0;
    r = pyobj_type(t, v, &type, e);
    if (r < 0 || type != t->types.cell)
        return r; /* 3.11+: a cell slot holds the plain value until MAKE_CELL runs */
    r = remote_read_u64(&t->mem, v + (uint64_t)t->lay.cell_ref, ret);
    return r < 0 ? pyf_fail(e, pyf_read_err_kind(-r), -r, v, "cell") : 0;
}

static int visit(const struct pyf_target *t, const struct local_names *ln, const uint64_t *vals,
                 pyf_local_fn fn, void *ctx, struct pyf_err *e)
{
    char value[VALUE_MAX];

    for (size_t i = 0; i < ln->n; i++) {
        struct pyf_err ve;
        uint64_t v;
        char *name = NULL;
        int r;

        if (ln->kinds[i] & CO_FAST_HIDDEN)
            continue;
        r = slot_value(t, vals[i], ln->kinds[i], &v, e);
        if (r < 0)
            return r;
        if (!v)
            continue; /* unbound */
        r = pyobj_str(t, ln->names[i], 256, &name, e);
        /* a value that cannot be read (corrupt, or freed under us) is shown as such, beside
         * the others: only a process gone or denied stops the walk */
        if (r == 0 && pyobj_repr(t, v, value, sizeof(value), &ve) < 0) {
            if (pyf_err_fatal(&ve)) {
                *e = ve;
                r = -(ve.sys ? ve.sys : EIO);
            } else {
                snprintf(value, sizeof(value), "<invalid object at 0x%" PRIx64 ">", v);
            }
        }
        if (r == 0)
            r = fn(ctx, name, value);
        free(name);
        if (r != 0)
            return r;
    }
    return 0;
}

int pyf_target__locals(struct pyf_target *t, const struct pyf_frame *fr, pyf_local_fn fn, void *ctx,
                       struct pyf_err *reterr)
{
    struct local_names *ln = NULL;
    uint64_t *vals = NULL;
    uint8_t *code = NULL;
    int r;

    r = read_code(t, fr, &code, reterr);
    if (r < 0)
        return r;
    ln = malloc(sizeof(*ln));
    vals = calloc(LOCALS_MAX, sizeof(*vals));
    if (!ln || !vals) {
        r = pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "locals");
        goto out;
    }
    r = local_names(t, code, ln, reterr);
    if (r == 0 && ln->n) {
        r = remote_read(&t->mem, fr->frame_raddr + (uint64_t)t->lay.fr_localsplus, vals,
                        ln->n * sizeof(*vals));
        if (r < 0)
            r = pyf_fail(reterr, pyf_read_err_kind(-r), -r, fr->frame_raddr,
                         "pid %d: read locals of frame 0x%" PRIx64, t->info.pid, fr->frame_raddr);
    }
    for (size_t i = 0; r == 0 && i < ln->n; i++)
        vals[i] = stackref_object(&t->lay, vals[i]); /* 3.14+: references, not pointers */
    if (r == 0)
        r = visit(t, ln, vals, fn, ctx, reterr);
out:
    free(code);
    free(ln);
    free(vals);
    return r;
}
