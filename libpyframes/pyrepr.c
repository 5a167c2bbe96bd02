/*
 * pyrepr.c - repr() of a target's containers, numpy values and torch tensors, for locals (see
 * pyobj.h).
 *
 * Not on the sampling path: read object by object. What it shows is bounded three ways, like
 * pystack and py-spy: containers inside containers REPR_DEPTH_MAX levels deep (deeper: "[...]"),
 * REPR_ITEMS_MAX items each (then "..."), and the caller's buffer (cut with "..."). An item that
 * cannot be read (freed under us, or a corrupt object) is shown as "<invalid object at 0x...>"
 * beside the others; only a process that is gone or denied stops the whole rendering.
 *
 * Threads: the target's owner, one at a time. Memory: a few small buffers per container.
 * Failure: -errno + pyf_err when the object itself cannot be read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "objrepr.h"
#include "pyobj.h"

#define REPR_DEPTH_MAX 3
#define REPR_ITEMS_MAX 32
#define DICT_SCAN_MAX 4096  /* entries of a dict looked at: deleted ones are skipped */
#define SET_SCAN_MAX 4096   /* slots of a set's table looked at */
#define NUMPY_OBVAL 16      /* numpy scalars keep their value after the object header */
#define NUMPY_NDIM_MAX 32   /* numpy's own limit (NPY_MAXDIMS, 64 in numpy 2: shown cut) */
#define SCALAR_REPR_MAX 160 /* one int, float, str or bytes, before the buffer's cut */

/* A bounded string builder: appends until full, then keeps "..." at the end. */
struct out {
    char *buf;
    size_t size, len;
    bool full;
};

static void put(struct out *o, const char *s)
{
    size_t n = strlen(s);

    if (o->full || o->size < 4)
        return;
    if (o->len + n > o->size - 1) {
        n = o->size - 1 - o->len;
        o->full = true;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
    if (o->full) /* the cut is shown */
        memcpy(o->buf + o->size - 4, "...", 4);
}

static int repr_into(const struct pyf_target *t, uint64_t raddr, int depth, struct out *o,
                     struct pyf_err *e);

/* One item of a container: rendered, or marked invalid in its place. */
static int repr_item(const struct pyf_target *t, uint64_t raddr, int depth, struct out *o,
                     struct pyf_err *e)
{
    size_t len = o->len;
    char invalid[64];
    struct pyf_err ie;
    int r = repr_into(t, raddr, depth, o, &ie);

    if (r == 0)
        return 0;
    if (pyf_err_fatal(&ie)) {
        *e = ie;
        return r;
    }
    o->len = len; /* drop what the failed item had written */
    if (o->size)
        o->buf[len] = '\0';
    o->full = false;
    snprintf(invalid, sizeof(invalid), "<invalid object at 0x%" PRIx64 ">", raddr);
    put(o, invalid);
    return 0;
}

/* A list or tuple: its length and the item pointers (at most REPR_ITEMS_MAX). */
static int seq_items(const struct pyf_target *t, uint64_t raddr, bool tuple, uint64_t *items,
                     size_t *ret_n, size_t *ret_total, struct pyf_err *e)
{
    int64_t size;
    uint64_t at;
    size_t n;
    int r = pyobj_read(t, raddr + (uint64_t)t->lay.var_size, &size, sizeof(size), e, "sequence");

    if (r < 0)
        return r;
    if (size < 0 || size > (1LL << 40))
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "sequence at 0x%" PRIx64 " has size %" PRId64,
                        raddr, size);
    n = (size_t)size < REPR_ITEMS_MAX ? (size_t)size : REPR_ITEMS_MAX;
    at = raddr + (uint64_t)(tuple ? t->lay.tuple_items : t->lay.list_items);
    if (!tuple && n) /* a list's items are an array of their own */
        r = pyobj_read(t, at, &at, sizeof(at), e, "list items pointer");
    if (r == 0 && n)
        r = pyobj_read(t, at, items, n * sizeof(*items), e, "sequence items");
    *ret_n = n;
    *ret_total = (size_t)size;
    return r;
}

static int repr_seq(const struct pyf_target *t, uint64_t raddr, bool tuple, int depth,
                    struct out *o, struct pyf_err *e)
{
    uint64_t items[REPR_ITEMS_MAX];
    size_t n = 0, total = 0;
    int r;

    if (depth >= REPR_DEPTH_MAX) {
        put(o, tuple ? "(...)" : "[...]");
        return 0;
    }
    r = seq_items(t, raddr, tuple, items, &n, &total, e);
    if (r < 0)
        return r;
    put(o, tuple ? "(" : "[");
    for (size_t i = 0; i < n && r == 0; i++) {
        if (i)
            put(o, ", ");
        r = repr_item(t, items[i], depth + 1, o, e);
    }
    if (total > n)
        put(o, ", ...");
    if (tuple && total == 1)
        put(o, ",");
    put(o, tuple ? ")" : "]");
    return r;
}

static int repr_dict(const struct pyf_target *t, uint64_t raddr, int depth, struct out *o,
                     struct pyf_err *e)
{
    uint64_t keys[REPR_ITEMS_MAX], values[REPR_ITEMS_MAX];
    size_t n = 0, total = 0;
    int r;

    if (depth >= REPR_DEPTH_MAX) {
        put(o, "{...}");
        return 0;
    }
    r = pyobj_dict_items(t, raddr, keys, values, REPR_ITEMS_MAX, &n, &total, e);
    if (r < 0)
        return r;
    put(o, "{");
    for (size_t i = 0; i < n && r == 0; i++) {
        if (i)
            put(o, ", ");
        r = repr_item(t, keys[i], depth + 1, o, e);
        put(o, ": ");
        if (r == 0)
            r = repr_item(t, values[i], depth + 1, o, e);
    }
    if (total > n)
        put(o, ", ...");
    put(o, "}");
    return r;
}

static int repr_set(const struct pyf_target *t, uint64_t raddr, bool frozen, int depth,
                    struct out *o, struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    int64_t used, mask;
    uint64_t table, keys[REPR_ITEMS_MAX];
    size_t slots, n = 0, entry = (size_t)l->set_entry_size;
    uint8_t *tab;
    int r = pyobj_read(t, raddr + (uint64_t)l->set_used, &used, sizeof(used), e, "set");

    if (r == 0)
        r = pyobj_read(t, raddr + (uint64_t)l->set_mask, &mask, sizeof(mask), e, "set");
    if (r == 0)
        r = pyobj_read(t, raddr + (uint64_t)l->set_table, &table, sizeof(table), e, "set");
    if (r < 0)
        return r;
    if (used < 0 || mask < 0 || mask > (1LL << 40) || used > mask + 1 || entry < 16)
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "set at 0x%" PRIx64 " is corrupt", raddr);
    if (used == 0) {
        put(o, frozen ? "frozenset()" : "set()");
        return 0;
    }
    if (depth >= REPR_DEPTH_MAX) {
        put(o, frozen ? "frozenset({...})" : "{...}");
        return 0;
    }
    slots = (size_t)mask + 1 < SET_SCAN_MAX ? (size_t)mask + 1 : SET_SCAN_MAX;
    tab = malloc(slots * entry);
    if (!tab)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "set table");
    r = pyobj_read(t, table, tab, slots * entry, e, "set table");
    /* an entry is (key, hash); a deleted one holds the dummy key with hash -1, which no
     * real key has (-1 is not a hash Python gives) */
    for (size_t i = 0; r == 0 && i < slots && n < REPR_ITEMS_MAX; i++) {
        uint64_t key = field_u64(tab + i * entry, 0);

        if (key && (int64_t)field_u64(tab + i * entry, 8) != -1)
            keys[n++] = key;
    }
    free(tab);
    if (r < 0)
        return r;
    put(o, frozen ? "frozenset({" : "{");
    for (size_t i = 0; i < n && r == 0; i++) {
        if (i)
            put(o, ", ");
        r = repr_item(t, keys[i], depth + 1, o, e);
    }
    if ((size_t)used > n)
        put(o, ", ...");
    put(o, frozen ? "})" : "}");
    return r;
}

/* ---- numpy ---- */

/* IEEE half to float (numpy's float16). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, mant = h & 1023, bits;
    float f;

    if (exp == 0 && mant == 0) {
        bits = sign;
    } else if (exp == 0) { /* subnormal: normalise */
        exp = 127 - 15 + 1;
        while (!(mant & 1024)) {
            mant <<= 1;
            exp--;
        }
        bits = sign | exp << 23 | (mant & 1023) << 13;
    } else if (exp == 31) {
        bits = sign | 0xff << 23 | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* The shortest digits that read back as the same float (numpy's repr of float32/16). */
static void repr_float32(float v, char *buf, size_t size)
{
    char digits[40];

    for (int prec = 1; prec <= 9; prec++) {
        snprintf(digits, sizeof(digits), "%.*g", prec, (double)v);
        if (strtof(digits, NULL) == v)
            break;
    }
    objrepr_float(strtod(digits, NULL), buf, size); /* then Python's notation for it */
}

/* One element of numpy type code @code (the dtype's char) at @p: its repr, as str() of the
 * numpy scalar gives it. False for a code not shown. */
static bool numpy_value(char code, const uint8_t *p, char *buf, size_t size)
{
    union {
        int8_t i8;
        uint8_t u8;
        int16_t i16;
        uint16_t u16;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        float f;
        double d;
        double c[2];
        float cf[2];
    } v;
    char re[32], im[32];

    memcpy(&v, p, sizeof(v));
    switch (code) {
    case '?':
        snprintf(buf, size, v.u8 ? "True" : "False");
        return true;
    case 'b':
        snprintf(buf, size, "%d", v.i8);
        return true;
    case 'B':
        snprintf(buf, size, "%u", v.u8);
        return true;
    case 'h':
        snprintf(buf, size, "%d", v.i16);
        return true;
    case 'H':
        snprintf(buf, size, "%u", v.u16);
        return true;
    case 'i':
        snprintf(buf, size, "%" PRId32, v.i32);
        return true;
    case 'I':
        snprintf(buf, size, "%" PRIu32, v.u32);
        return true;
    case 'l':
    case 'q':
    case 'p':
        snprintf(buf, size, "%" PRId64, v.i64);
        return true;
    case 'L':
    case 'Q':
    case 'P':
        snprintf(buf, size, "%" PRIu64, v.u64);
        return true;
    case 'e':
        repr_float32(half_to_float(v.u16), buf, size);
        return true;
    case 'f':
        repr_float32(v.f, buf, size);
        return true;
    case 'd':
        objrepr_float(v.d, buf, size);
        return true;
    case 'F':
    case 'D':
        if (code == 'F') {
            repr_float32(v.cf[0], re, sizeof(re));
            repr_float32(v.cf[1], im, sizeof(im));
        } else {
            objrepr_float(v.c[0], re, sizeof(re));
            objrepr_float(v.c[1], im, sizeof(im));
        }
        snprintf(buf, size, "(%s%s%sj)", re, im[0] == '-' ? "" : "+", im);
        return true;
    default:
        return false;
    }
}

/* numpy's scalar types by name (the same in numpy 1 and 2, "bool_" in 1, "bool" in 2), and
 * the dtype char of each. */
static char numpy_scalar_code(const char *name)
{
    static const struct {
        const char *name;
        char code;
    } types[] = {
        {"bool", '?'},     {"bool_", '?'},     {"int8", 'b'},       {"uint8", 'B'},
        {"int16", 'h'},    {"uint16", 'H'},    {"int32", 'i'},      {"uint32", 'I'},
        {"int64", 'q'},    {"uint64", 'Q'},    {"intc", 'i'},       {"uintc", 'I'},
        {"longlong", 'q'}, {"ulonglong", 'Q'}, {"float16", 'e'},    {"float32", 'f'},
        {"float64", 'd'},  {"complex64", 'F'}, {"complex128", 'D'},
    };

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(name, types[i].name) == 0)
            return types[i].code;
    return 0;
}

/*
 * A numpy array: "array(1.5)" when it has no dimensions, else its dtype and shape. Fields of
 * PyArrayObject (the same in numpy 1 and 2): data at 16, nd at 24, dimensions at 32, descr
 * at 56; of PyArray_Descr: typeobj at 16, type char at 25, byteorder at 26.
 */
static int repr_ndarray(const struct pyf_target *t, uint64_t raddr, struct out *o,
                        struct pyf_err *e)
{
    uint8_t arr[64], descr[32], elem[16];
    char name[64], text[96];
    int32_t nd;
    int r = pyobj_read(t, raddr, arr, sizeof(arr), e, "ndarray");

    if (r == 0)
        r = pyobj_read(t, field_u64(arr, 56), descr, sizeof(descr), e, "ndarray dtype");
    if (r == 0)
        r = pyobj_type_name(t, field_u64(descr, 16), name, sizeof(name), e);
    if (r < 0)
        return r;
    nd = field_i32(arr, 24);
    if (nd < 0 || nd > 64)
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "ndarray at 0x%" PRIx64 ": %d dimensions",
                        raddr, nd);
    if (nd == 0 && descr[26] != '>' &&
        pyobj_read(t, field_u64(arr, 16), elem, sizeof(elem), NULL, "") == 0 &&
        numpy_value((char)descr[25], elem, text, sizeof(text))) {
        put(o, "array(");
        put(o, text);
        put(o, ")");
        return 0;
    }
    put(o, "<ndarray ");
    put(o, strncmp(name, "numpy.", 6) == 0 ? name + 6 : name);
    put(o, " (");
    {
        int64_t dims[NUMPY_NDIM_MAX];
        int shown = nd < NUMPY_NDIM_MAX ? nd : NUMPY_NDIM_MAX;

        r = shown ? pyobj_read(t, field_u64(arr, 32), dims, (size_t)shown * sizeof(*dims), e,
                               "ndarray shape")
                  : 0;
        for (int i = 0; r == 0 && i < shown; i++) {
            snprintf(text, sizeof(text), "%s%" PRId64, i ? ", " : "", dims[i]);
            put(o, text);
        }
        if (r == 0 && nd == 1)
            put(o, ",");
    }
    snprintf(text, sizeof(text), ") at 0x%" PRIx64 ">", raddr);
    put(o, text);
    return r;
}

/*
 * A torch tensor, as catch shows it: "<Tensor shape=(3, 4) dtype=torch.float32 device=cpu>",
 * read without running anything in the target. Its Python object (THPVariable) holds, after
 * the object header, c10::MaybeOwned<at::Tensor>: a bool, then the TensorImpl pointer. Within
 * TensorImpl the members from the shape on are in one order in every torch from 1.10 to 2.x:
 * SizesAndStrides (the dimension count, then 5 sizes and 5 strides inline, or a pointer to
 * them when more), storage_offset_, numel_, data_type_ (TypeMeta: the ScalarType's index) and
 * device_opt_ (c10::optional<Device>: engaged flag first; std::optional from torch 2.3: last).
 * What comes before them varies by version, so they are found by scanning for the one place
 * where all agree: the count of elements is the product of the sizes, the dtype and device
 * are known ones, and the device is set (every dense or sparse tensor has one).
 */
#define TENSOR_IMPL_SCAN 256 /* bytes of TensorImpl looked at for the shape */
#define TENSOR_NDIM_INLINE 5 /* C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE */
#define TENSOR_NDIM_MAX 64

static const char *torch_dtype_name(unsigned index)
{
    static const char *const names[] = {
        "uint8",           "int8",
        "int16",           "int32",
        "int64",           "float16",
        "float32",         "float64",
        "complex32",       "complex64",
        "complex128",      "bool",
        "qint8",           "quint8",
        "qint32",          "bfloat16",
        "quint4x2",        "quint2x4",
        "bits1x8",         "bits2x4",
        "bits4x2",         "bits8",
        "bits16",          "float8_e5m2",
        "float8_e4m3fn",   "float8_e5m2fnuz",
        "float8_e4m3fnuz", "uint16",
        "uint32",          "uint64",
    };

    return index < sizeof(names) / sizeof(names[0]) ? names[index] : NULL;
}

static const char *torch_device_type_name(unsigned type)
{
    static const char *const names[] = {
        "cpu",  "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip",
        "fpga", "maia", "xla",    "vulkan", "metal",  "xpu",   "mps",
        "meta", "hpu",  "ve",     "lazy",   "ipu",    "mtia",  "privateuseone",
    };

    return type < sizeof(names) / sizeof(names[0]) ? names[type] : NULL;
}

/* optional<Device> from its 3 bytes in either layout; false when neither reads as a set one. */
static bool torch_device(const uint8_t *b, char *buf, size_t size)
{
    /* (engaged, type, index) for c10::optional; (type, index, engaged) for std::optional */
    const int at[2][3] = {{0, 1, 2}, {2, 0, 1}};

    for (int l = 0; l < 2; l++) {
        const char *type = torch_device_type_name(b[at[l][1]]);
        int index = (int8_t)b[at[l][2]];

        if (b[at[l][0]] != 1 || !type || index < -1 || (b[at[l][1]] == 0 && index > 0))
            continue;
        if (index < 0)
            snprintf(buf, size, "%s", type);
        else
            snprintf(buf, size, "%s:%d", type, index);
        return true;
    }
    return false;
}

/* true when @type or one of its bases is torch's C tensor type (tp_base follows tp_flags by
 * 88 bytes in every CPython 3). */
static bool is_torch_tensor_type(const struct pyf_target *t, uint64_t type)
{
    char name[64];

    for (int i = 0; type && i < 8; i++) {
        if (pyobj_type_name(t, type, name, sizeof(name), NULL) < 0)
            return false;
        if (strcmp(name, "torch._C._TensorBase") == 0 || strcmp(name, "torch._C.TensorBase") == 0)
            return true;
        if (pyobj_read(t, type + t->lay.tp_flags + 88, &type, sizeof(type), NULL, "") < 0)
            return false;
    }
    return false;
}

/* The shape of the TensorImpl read into @impl (TENSOR_IMPL_SCAN bytes at @impl_raddr), at
 * the first offset where it reads consistently: 0 and @dims, @ndim, @dtype, @device set. */
static bool torch_shape(const struct pyf_target *t, const uint8_t *impl, int64_t *dims,
                        int *ret_ndim, const char **ret_dtype, char *device, size_t device_size)
{
    /* from the dimension count: sizes and strides 80, storage_offset_ 8, numel_ 8, TypeMeta 2,
     * optional<Device> 3 */
    const int numel_at = 8 + 16 * TENSOR_NDIM_INLINE + 8, dtype_at = numel_at + 8;

    for (int k = 24; k + dtype_at + 5 <= TENSOR_IMPL_SCAN; k += 8) {
        uint64_t ndim = field_u64(impl, k), numel = field_u64(impl, k + numel_at), product = 1;
        uint16_t dtype;
        bool ok = true;

        memcpy(&dtype, impl + k + dtype_at, sizeof(dtype));
        if (ndim > TENSOR_NDIM_MAX || !torch_dtype_name(dtype) ||
            !torch_device(impl + k + dtype_at + 2, device, device_size))
            continue;
        if (ndim <= TENSOR_NDIM_INLINE)
            memcpy(dims, impl + k + 8, ndim * sizeof(*dims));
        else if (pyobj_read(t, field_u64(impl, k + 8), dims, ndim * sizeof(*dims), NULL, "") < 0)
            continue;
        for (uint64_t i = 0; ok && i < ndim; i++)
            ok = dims[i] >= 0 && !__builtin_mul_overflow(product, (uint64_t)dims[i], &product);
        if (!ok || product != numel)
            continue;
        *ret_ndim = (int)ndim;
        *ret_dtype = torch_dtype_name(dtype);
        return true;
    }
    return false;
}

/* A tensor's shape, dtype and device: true when @raddr is one and was shown; false leaves it
 * to the generic "<Tensor at 0x...>". */
static bool repr_tensor(const struct pyf_target *t, uint64_t raddr, uint64_t type, const char *name,
                        struct out *o)
{
    const int32_t header = t->lay.ob_type + 8; /* the end of PyObject: cdata follows */
    uint8_t cdata[16], impl[TENSOR_IMPL_SCAN];
    int64_t dims[TENSOR_NDIM_MAX];
    char device[32], text[48];
    const char *dtype;
    int ndim;

    if (!is_torch_tensor_type(t, type) ||
        pyobj_read(t, raddr + header, cdata, sizeof(cdata), NULL, "") < 0 || cdata[0] > 1 ||
        pyobj_read(t, field_u64(cdata, 8), impl, sizeof(impl), NULL, "") < 0 ||
        !torch_shape(t, impl, dims, &ndim, &dtype, device, sizeof(device)))
        return false;
    put(o, "<");
    put(o, strrchr(name, '.') ? strrchr(name, '.') + 1 : name);
    put(o, " shape=(");
    for (int i = 0; i < ndim; i++) {
        snprintf(text, sizeof(text), "%s%" PRId64, i ? ", " : "", dims[i]);
        put(o, text);
    }
    put(o, ndim == 1 ? ",)" : ")");
    snprintf(text, sizeof(text), " dtype=torch.%s device=", dtype);
    put(o, text);
    put(o, device);
    put(o, ">");
    return true;
}

/* numpy values by type name: true when @name is numpy's and was shown. */
static int repr_numpy(const struct pyf_target *t, uint64_t raddr, const char *name, struct out *o,
                      bool *ret_shown, struct pyf_err *e)
{
    char code, text[96];
    uint8_t val[16];
    int r;

    *ret_shown = false;
    if (strncmp(name, "numpy.", 6) != 0)
        return 0;
    if (strcmp(name, "numpy.ndarray") == 0) {
        *ret_shown = true;
        return repr_ndarray(t, raddr, o, e);
    }
    code = numpy_scalar_code(name + 6);
    if (!code)
        return 0;
    r = pyobj_read(t, raddr + NUMPY_OBVAL, val, sizeof(val), e, "numpy scalar");
    if (r < 0)
        return r;
    *ret_shown = numpy_value(code, val, text, sizeof(text));
    if (*ret_shown)
        put(o, text);
    return 0;
}

static int repr_into(const struct pyf_target *t, uint64_t raddr, int depth, struct out *o,
                     struct pyf_err *e)
{
    const struct pyf_types *ty = &t->types;
    char text[SCALAR_REPR_MAX], name[128];
    uint64_t type = 0;
    bool shown = false;
    int r;

    if (raddr == ty->none && ty->none) {
        put(o, "None");
        return 0;
    }
    r = pyobj_type(t, raddr, &type, e);
    if (r < 0)
        return r;
    if (type && (type == ty->list || type == ty->tuple))
        return repr_seq(t, raddr, type == ty->tuple, depth, o, e);
    if (type && type == ty->dict)
        return repr_dict(t, raddr, depth, o, e);
    if (type && (type == ty->set || type == ty->frozenset))
        return repr_set(t, raddr, type == ty->frozenset, depth, o, e);
    if (type != ty->long_ && type != ty->bool_ && type != ty->float_ && type != ty->str &&
        type != ty->bytes) {
        r = pyobj_type_name(t, type, name, sizeof(name), e);
        if (r == 0)
            r = repr_numpy(t, raddr, name, o, &shown, e);
        if (r < 0 || shown)
            return r;
        if (repr_tensor(t, raddr, type, name, o))
            return 0;
    }
    r = pyobj_repr_scalar(t, raddr, text, sizeof(text), e);
    if (r == 0)
        put(o, text);
    return r;
}

int pyobj_repr(const struct pyf_target *t, uint64_t raddr, char *buf, size_t size,
               struct pyf_err *reterr)
{
    struct out o = {.buf = buf, .size = size};

    if (size)
        buf[0] = '\0';
    return repr_into(t, raddr, 0, &o, reterr);
}
