/* pyobj.c - reading objects from the target; see pyobj.h. */
#define _GNU_SOURCE
#include "pyobj.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "objrepr.h"
#include "remote.h"

#define REPR_STR_MAX 120   /* code points of a str value shown as a local */
#define REPR_BYTES_MAX 120 /* bytes of a bytes value shown as a local */
#define LONG_DIGITS_MAX 4096

int pyobj_read(const struct pyf_target *t, uint64_t raddr, void *buf, size_t size,
               struct pyf_err *e, const char *what)
{
    int r;

    if (!remote_plausible(raddr))
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "%s: bad pointer 0x%" PRIx64, what, raddr);
    r = remote_read(&t->mem, raddr, buf, size);
    if (r < 0)
        return pyf_fail(e, pyf_read_err_kind(-r), -r, raddr, "pid %d: read %s at 0x%" PRIx64,
                        t->info.pid, what, raddr);
    return 0;
}

int pyobj_type(const struct pyf_target *t, uint64_t raddr, uint64_t *ret_type,
               struct pyf_err *reterr)
{
    uint64_t type = 0;
    int r = pyobj_read(t, raddr + t->lay.ob_type, &type, sizeof(type), reterr, "object type");

    if (r == 0)
        *ret_type = type;
    return r;
}

static int expect_type(const struct pyf_target *t, const uint8_t *head, uint64_t want,
                       uint64_t raddr, struct pyf_err *e, const char *what)
{
    uint64_t type = field_u64(head, t->lay.ob_type);

    if (want && type != want)
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "object at 0x%" PRIx64 " is no longer a %s",
                        raddr, what);
    return 0;
}

/* Where a str's characters are, and their width. */
struct str_view {
    uint64_t data_raddr;
    size_t length;
    unsigned kind;
};

static int str_view(const struct pyf_target *t, uint64_t raddr, struct str_view *v,
                    struct pyf_err *e)
{
    uint8_t head[128];
    uint32_t state;
    int64_t length;
    bool compact, ascii;
    int r;

    if ((size_t)t->lay.str_compact_data + 8 > sizeof(head))
        return pyf_fail(e, PYF_INVALID, EINVAL, raddr, "str layout too large");
    r = pyobj_read(t, raddr, head, t->lay.str_compact_data + 8, e, "str");
    if (r < 0)
        return r;
    r = expect_type(t, head, t->types.str, raddr, e, "str");
    if (r < 0)
        return r;
    memcpy(&length, head + t->lay.str_length, sizeof(length));
    memcpy(&state, head + t->lay.str_state, sizeof(state));
    v->kind = (state >> 2) & 7;
    compact = (state >> 5) & 1;
    ascii = (state >> 6) & 1;
    if (length < 0 || length > (1LL << 40) || (v->kind != 1 && v->kind != 2 && v->kind != 4))
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "str at 0x%" PRIx64 " has a bad header", raddr);
    v->length = (size_t)length;
    if (compact)
        v->data_raddr = raddr + (ascii ? t->lay.str_ascii_data : t->lay.str_compact_data);
    else /* a legacy str: PyUnicodeObject.data.any follows the compact header */
        v->data_raddr = field_u64(head, t->lay.str_compact_data);
    return 0;
}

/* UTF-8 of @n code points of width @kind; malloc'd. */
static char *utf8_of(const uint8_t *data, size_t n, unsigned kind)
{
    char *s = malloc(n * 4 + 1), *p = s;

    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t c;
        if (kind == 1) {
            c = data[i];
        } else if (kind == 2) {
            uint16_t u;
            memcpy(&u, data + i * 2, 2);
            c = u;
        } else {
            memcpy(&c, data + i * 4, 4);
        }
        if (c >= 0xd800 && c < 0xe000)
            c = 0xfffd; /* lone surrogates have no UTF-8 */
        if (c < 0x80) {
            *p++ = (char)c;
        } else if (c < 0x800) {
            *p++ = (char)(0xc0 | c >> 6);
            *p++ = (char)(0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
            *p++ = (char)(0xe0 | c >> 12);
            *p++ = (char)(0x80 | ((c >> 6) & 0x3f));
            *p++ = (char)(0x80 | (c & 0x3f));
        } else {
            if (c > 0x10ffff)
                c = 0xfffd;
            *p++ = (char)(0xf0 | c >> 18);
            *p++ = (char)(0x80 | ((c >> 12) & 0x3f));
            *p++ = (char)(0x80 | ((c >> 6) & 0x3f));
            *p++ = (char)(0x80 | (c & 0x3f));
        }
    }
    *p = '\0';
    return s;
}

static int str_chars(const struct pyf_target *t, const struct str_view *v, size_t n,
                     uint8_t **ret_data, struct pyf_err *e)
{
    uint8_t *data = malloc(n * v->kind + 1);
    int r;

    if (!data)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "str buffer");
    r = n ? pyobj_read(t, v->data_raddr, data, n * v->kind, e, "str data") : 0;
    if (r < 0) {
        free(data);
        return r;
    }
    *ret_data = data;
    return 0;
}

int pyobj_str(const struct pyf_target *t, uint64_t raddr, size_t max_chars, char **ret_utf8,
              struct pyf_err *reterr)
{
    struct str_view v;
    uint8_t *data = NULL;
    size_t n;
    char *s;
    int r = str_view(t, raddr, &v, reterr);

    if (r < 0)
        return r;
    n = v.length < max_chars ? v.length : max_chars;
    r = str_chars(t, &v, n, &data, reterr);
    if (r < 0)
        return r;
    s = utf8_of(data, n, v.kind);
    free(data);
    if (!s)
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "str");
    *ret_utf8 = s;
    return 0;
}

int pyobj_bytes(const struct pyf_target *t, uint64_t raddr, size_t max, uint8_t **ret_data,
                size_t *ret_len, struct pyf_err *reterr)
{
    uint8_t head[64];
    int64_t size;
    uint8_t *data;
    size_t n;
    int r = pyobj_read(t, raddr, head, t->lay.bytes_data, reterr, "bytes");

    if (r < 0)
        return r;
    r = expect_type(t, head, t->types.bytes, raddr, reterr, "bytes");
    if (r < 0)
        return r;
    memcpy(&size, head + t->lay.var_size, sizeof(size));
    if (size < 0 || size > (1LL << 40))
        return pyf_fail(reterr, PYF_TORN, EFAULT, raddr, "bytes at 0x%" PRIx64 " has size %" PRId64,
                        raddr, size);
    n = (size_t)size < max ? (size_t)size : max;
    data = malloc(n + 1);
    if (!data)
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "bytes buffer");
    r = n ? pyobj_read(t, raddr + t->lay.bytes_data, data, n, reterr, "bytes data") : 0;
    if (r < 0) {
        free(data);
        return r;
    }
    *ret_data = data;
    *ret_len = (size_t)size;
    return 0;
}

int pyobj_tuple(const struct pyf_target *t, uint64_t raddr, uint64_t *items, size_t cap,
                size_t *ret_n, struct pyf_err *reterr)
{
    uint8_t head[64];
    int64_t size;
    size_t n;
    int r = pyobj_read(t, raddr, head, t->lay.tuple_items, reterr, "tuple");

    if (r < 0)
        return r;
    r = expect_type(t, head, t->types.tuple, raddr, reterr, "tuple");
    if (r < 0)
        return r;
    memcpy(&size, head + t->lay.var_size, sizeof(size));
    if (size < 0 || size > (1 << 24))
        return pyf_fail(reterr, PYF_TORN, EFAULT, raddr, "tuple at 0x%" PRIx64 " has size %" PRId64,
                        raddr, size);
    n = (size_t)size < cap ? (size_t)size : cap;
    r = n ? pyobj_read(t, raddr + t->lay.tuple_items, items, n * sizeof(*items), reterr,
                       "tuple items")
          : 0;
    if (r == 0)
        *ret_n = n;
    return r;
}

int pyobj_u64(const struct pyf_target *t, uint64_t raddr, uint64_t *ret_value,
              struct pyf_err *reterr)
{
    uint32_t digits[3] = {0};
    unsigned bits = (unsigned)t->lay.long_digit_bits;
    uint64_t type = 0, v = 0;
    int64_t tag;
    size_t n;
    bool negative;
    int r = pyobj_type(t, raddr, &type, reterr);

    if (r == 0 && t->types.long_ && type != t->types.long_)
        return pyf_fail(reterr, PYF_TORN, EFAULT, raddr, "0x%" PRIx64 " is no longer an int",
                        raddr);
    if (r == 0)
        r = pyobj_read(t, raddr + t->lay.var_size, &tag, sizeof(tag), reterr, "int");
    if (r < 0)
        return r;
    if (t->lay.long_format == PYF_LONG_LVTAG) {
        n = (size_t)((uint64_t)tag >> 3);
        negative = (tag & 3) == 2;
    } else {
        n = (size_t)(tag < 0 ? -tag : tag);
        negative = tag < 0;
    }
    if (negative || bits == 0 || bits > 30 || n * bits > 64 + bits || n > 3)
        return pyf_fail(reterr, PYF_INVALID, ERANGE, raddr,
                        "int at 0x%" PRIx64 " is not a 64-bit unsigned value", raddr);
    r = n ? pyobj_read(t, raddr + t->lay.long_digits, digits, n * sizeof(*digits), reterr,
                       "int digits")
          : 0;
    for (size_t i = n; r == 0 && i-- > 0;)
        v = v << bits | (digits[i] & ((1u << bits) - 1));
    if (r == 0)
        *ret_value = v;
    return r;
}

static int repr_long(const struct pyf_target *t, uint64_t raddr, bool is_bool, char *buf,
                     size_t size, struct pyf_err *e)
{
    int64_t tag;
    size_t n;
    bool negative;
    uint32_t *digits;
    int r = pyobj_read(t, raddr + t->lay.var_size, &tag, sizeof(tag), e, "int");

    if (r < 0)
        return r;
    if (t->lay.long_format == PYF_LONG_LVTAG) { /* digits << 3 | sign (0 +, 1 zero, 2 -) */
        n = (size_t)((uint64_t)tag >> 3);
        negative = (tag & 3) == 2;
    } else {
        n = (size_t)(tag < 0 ? -tag : tag);
        negative = tag < 0;
    }
    if (is_bool) {
        snprintf(buf, size, n ? "True" : "False");
        return 0;
    }
    if (n > LONG_DIGITS_MAX) {
        snprintf(buf, size, "<int of %zu bits>", n * (size_t)t->lay.long_digit_bits);
        return 0;
    }
    digits = malloc((n ? n : 1) * sizeof(*digits));
    if (!digits)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "int digits");
    r = n ? pyobj_read(t, raddr + t->lay.long_digits, digits, n * sizeof(*digits), e, "int digits")
          : 0;
    if (r == 0)
        objrepr_long(digits, n, (unsigned)t->lay.long_digit_bits, negative, buf, size);
    free(digits);
    return r;
}

static int repr_str(const struct pyf_target *t, uint64_t raddr, char *buf, size_t size,
                    struct pyf_err *e)
{
    struct str_view v;
    uint8_t *data = NULL;
    size_t n;
    int r = str_view(t, raddr, &v, e);

    if (r < 0)
        return r;
    n = v.length < REPR_STR_MAX ? v.length : REPR_STR_MAX;
    r = str_chars(t, &v, n, &data, e);
    if (r < 0)
        return r;
    objrepr_str(data, n, v.kind, v.length, buf, size);
    free(data);
    return 0;
}

int pyobj_type_name(const struct pyf_target *t, uint64_t type, char *name, size_t size,
                    struct pyf_err *e)
{
    uint64_t name_raddr;
    int r = pyobj_read(t, type + t->lay.tp_name, &name_raddr, sizeof(name_raddr), e, "type name");

    if (r < 0)
        return r;
    /* tp_name is a C string of unknown length: read a bounded prefix, page by page if the
     * first read crosses into an unmapped page. */
    memset(name, 0, size);
    if (pyobj_read(t, name_raddr, name, size - 1, NULL, "") < 0) {
        size_t to_page = 4096 - (name_raddr & 4095);
        if (to_page >= size || pyobj_read(t, name_raddr, name, to_page, e, "type name string") < 0)
            return pyf_fail(e, PYF_TORN, EFAULT, name_raddr, "name of type 0x%" PRIx64, type);
    }
    name[size - 1] = '\0';
    for (char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?';
    return 0;
}

static int repr_other(const struct pyf_target *t, uint64_t raddr, uint64_t type, char *buf,
                      size_t size, struct pyf_err *e)
{
    char name[128];
    int r = pyobj_type_name(t, type, name, sizeof(name), e);

    if (r == 0)
        snprintf(buf, size, "<%s at 0x%" PRIx64 ">", name, raddr);
    return r;
}

int pyobj_repr_scalar(const struct pyf_target *t, uint64_t raddr, char *buf, size_t size,
                      struct pyf_err *reterr)
{
    const struct pyf_types *ty = &t->types;
    uint64_t type = 0;
    int r;

    if (raddr == ty->none && ty->none) {
        snprintf(buf, size, "None");
        return 0;
    }
    r = pyobj_type(t, raddr, &type, reterr);
    if (r < 0)
        return r;
    if (type == ty->long_ || type == ty->bool_)
        return repr_long(t, raddr, type == ty->bool_, buf, size, reterr);
    if (type == ty->float_) {
        double v;
        r = pyobj_read(t, raddr + t->lay.float_value, &v, sizeof(v), reterr, "float");
        if (r == 0)
            objrepr_float(v, buf, size);
        return r;
    }
    if (type == ty->str)
        return repr_str(t, raddr, buf, size, reterr);
    if (type == ty->bytes) {
        uint8_t *data;
        size_t len;
        r = pyobj_bytes(t, raddr, REPR_BYTES_MAX, &data, &len, reterr);
        if (r == 0) {
            objrepr_bytes(data, len < REPR_BYTES_MAX ? len : REPR_BYTES_MAX, len, buf, size);
            free(data);
        }
        return r;
    }
    return repr_other(t, raddr, type, buf, size, reterr);
}
