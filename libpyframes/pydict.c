/*
 * pydict.c - a target's dicts and instance attributes, read from outside (see pyobj.h).
 *
 * A dict is a keys object (indices, then entries of (hash, key, value), or of (key, value)
 * for str keys from 3.11) and, for a split table, a values array beside it. An instance's
 * attributes are its __dict__, or from 3.11 values kept beside the object and the keys its
 * type shares (layout.h, enum pyf_attrs_model). Everything is bounded: DICT_SCAN_MAX entries
 * are looked at, every count and pointer is checked.
 *
 * Threads: the target's owner, one at a time. Memory: a buffer per dict read, freed.
 * Failure: -errno + pyf_err; a dict changed under us is PYF_TORN.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pyobj.h"
#include "remote.h"

#define DICT_SCAN_MAX 4096 /* entries of a dict looked at: deleted ones are skipped */
#define KEY_CHARS_MAX 64   /* a str key compared: longer ones are not what we look for */
#define TPFLAGS_INLINE_VALUES (1ul << 2)
#define TPFLAGS_MANAGED_DICT (1ul << 4)

/* Where a dict's entries are and how they are laid out. */
struct dict_view {
    uint64_t entries, values; /* values: a split table's array, else 0 */
    size_t n_entries, entry_size, key_at, value_at;
};

/* The view of keys object @keys whose head (dk_indices bytes) is @head, with @values the split
 * values' array (0: combined). */
static int parse_keys(const struct pyf_target *t, uint64_t keys, const uint8_t *head,
                      uint64_t values, struct dict_view *v, struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    int64_t n_entries;
    uint64_t index_bytes;

    memcpy(&n_entries, head + l->dk_nentries, sizeof(n_entries));
    *v = (struct dict_view){.values = values, .entry_size = 24, .key_at = 8, .value_at = 16};
    if (l->dict_keys_model == PYF_DICT_KEYS_SIZE) {
        uint64_t size = field_u64(head, l->dk_size);

        if (size == 0 || (size & (size - 1)) || size > (1ull << 40))
            return pyf_fail(e, PYF_TORN, EFAULT, keys, "dict keys at 0x%" PRIx64 ": size %" PRIu64,
                            keys, size);
        index_bytes = size * (size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffff ? 4 : 8);
    } else {
        uint8_t log2_index_bytes = head[l->dk_log2_index_bytes], kind = head[l->dk_kind];

        if (log2_index_bytes > 40 || kind > 2)
            return pyf_fail(e, PYF_TORN, EFAULT, keys, "dict keys at 0x%" PRIx64 " are corrupt",
                            keys);
        index_bytes = 1ull << log2_index_bytes;
        if (kind != 0) /* unicode keys, combined or split: (key, value) entries */
            *v = (struct dict_view){.values = values, .entry_size = 16, .key_at = 0, .value_at = 8};
    }
    if (n_entries < 0 || n_entries > (1LL << 40))
        return pyf_fail(e, PYF_TORN, EFAULT, keys,
                        "dict keys at 0x%" PRIx64 ": %" PRId64 " entries", keys, n_entries);
    v->entries = keys + (uint64_t)l->dk_indices + index_bytes;
    v->n_entries = (size_t)n_entries;
    return 0;
}

/* The view of keys object @keys, with @values the split values' array (0: combined). */
static int keys_view(const struct pyf_target *t, uint64_t keys, uint64_t values,
                     struct dict_view *v, struct pyf_err *e)
{
    uint8_t head[64];
    int r = (size_t)t->lay.dk_indices <= sizeof(head)
                ? pyobj_read(t, keys, head, (size_t)t->lay.dk_indices, e, "dict keys object")
                : pyf_fail(e, PYF_INVALID, EINVAL, keys, "dict keys layout too large");

    return r < 0 ? r : parse_keys(t, keys, head, values, v, e);
}

/* The (key, value) pairs of a view, in entry order, at most @cap. */
static int view_items(const struct pyf_target *t, const struct dict_view *v, uint64_t *keys,
                      uint64_t *values, size_t cap, size_t *ret_n, struct pyf_err *e)
{
    size_t most = cap > DICT_SCAN_MAX ? cap : DICT_SCAN_MAX; /* entries looked at */
    size_t scan = v->n_entries < most ? v->n_entries : most, n = 0;
    uint8_t *entries = malloc(scan * v->entry_size + 1);
    uint64_t *split = v->values ? malloc(scan * sizeof(*split) + 1) : NULL;
    int r = 0;

    if (!entries || (v->values && !split))
        r = pyf_fail(e, PYF_INVALID, ENOMEM, 0, "dict entries");
    if (r == 0 && scan)
        r = pyobj_read(t, v->entries, entries, scan * v->entry_size, e, "dict entries");
    if (r == 0 && scan && split)
        r = pyobj_read(t, v->values, split, scan * sizeof(*split), e, "dict values");
    for (size_t i = 0; r == 0 && i < scan && n < cap; i++) {
        const uint8_t *entry = entries + i * v->entry_size;
        uint64_t key = field_u64(entry, (int32_t)v->key_at);
        uint64_t value = split ? split[i] : field_u64(entry, (int32_t)v->value_at);

        if (!key || !value) /* deleted, or a split table's slot this dict does not use */
            continue;
        keys[n] = key;
        values[n++] = value;
    }
    free(entries);
    free(split);
    *ret_n = n;
    return r;
}

int pyobj_dict_items(const struct pyf_target *t, uint64_t raddr, uint64_t *keys, uint64_t *values,
                     size_t cap, size_t *ret_n, size_t *ret_total, struct pyf_err *reterr)
{
    const struct pyf_layout *l = &t->lay;
    struct dict_view v = {0};
    uint64_t keys_at = 0, values_at = 0;
    int64_t used = 0;
    int r = pyobj_read(t, raddr + (uint64_t)l->dict_used, &used, sizeof(used), reterr, "dict");

    if (r == 0)
        r = pyobj_read(t, raddr + (uint64_t)l->dict_keys, &keys_at, sizeof(keys_at), reterr,
                       "dict keys");
    if (r == 0)
        r = pyobj_read(t, raddr + (uint64_t)l->dict_values, &values_at, sizeof(values_at), reterr,
                       "dict values");
    if (r == 0)
        r = keys_view(t, keys_at, values_at ? values_at + (uint64_t)l->dict_values_array : 0, &v,
                      reterr);
    if (r < 0)
        return r;
    if (used < 0 || (size_t)used > v.n_entries)
        return pyf_fail(reterr, PYF_TORN, EFAULT, raddr,
                        "dict at 0x%" PRIx64 ": %" PRId64 " used of %zu", raddr, used, v.n_entries);
    r = view_items(t, &v, keys, values, cap, ret_n, reterr);
    if (r == 0)
        *ret_total = (size_t)used;
    return r;
}

/* A dict's head and its keys object, with room for the few entries of a small dict. */
#define SMALL_HEAD_BYTES 64
#define SMALL_KEYS_BYTES 1024

int pyobj_small_dict_items(const struct pyf_target *t, uint64_t raddr, uint64_t *keys,
                           uint64_t *values, size_t cap, size_t *ret_n, struct pyf_err *reterr)
{
    const struct pyf_layout *l = &t->lay;
    uint8_t head[SMALL_HEAD_BYTES], kb[SMALL_KEYS_BYTES];
    struct dict_view v;
    uint64_t keys_at, values_at;
    int64_t used;
    size_t n = 0, total = 0;
    int r;

    *ret_n = 0;
    if ((size_t)l->dict_values + 8 > sizeof(head) || (size_t)l->dict_keys + 8 > sizeof(head) ||
        (size_t)l->dict_used + 8 > sizeof(head) || (size_t)l->dk_indices > sizeof(kb) ||
        remote_read(&t->mem, raddr, head, sizeof(head)) < 0)
        goto any_size; /* (a dict at the end of a mapping) */
    if (field_u64(head, l->ob_type) != t->types.dict)
        return pyf_fail(reterr, PYF_TORN, EFAULT, raddr, "0x%" PRIx64 " is no longer a dict",
                        raddr);
    keys_at = field_u64(head, l->dict_keys);
    values_at = field_u64(head, l->dict_values);
    memcpy(&used, head + l->dict_used, sizeof(used));
    if (values_at || !keys_at || remote_read(&t->mem, keys_at, kb, sizeof(kb)) < 0 ||
        parse_keys(t, keys_at, kb, 0, &v, reterr) < 0 || used < 0 || (size_t)used > v.n_entries ||
        v.entries - keys_at + v.n_entries * v.entry_size > sizeof(kb))
        goto any_size; /* split, larger, or read as it changed: the general way decides */
    for (size_t i = 0; i < v.n_entries && n < cap; i++) {
        const uint8_t *entry = kb + (v.entries - keys_at) + i * v.entry_size;
        uint64_t key = field_u64(entry, (int32_t)v.key_at);
        uint64_t value = field_u64(entry, (int32_t)v.value_at);

        if (key && value)
            keys[n] = key, values[n++] = value;
    }
    *ret_n = n;
    return 0;
any_size:
    r = pyobj_dict_items(t, raddr, keys, values, cap, ret_n, &total, reterr);
    return r;
}

int pyobj_dict_get_str(const struct pyf_target *t, uint64_t dict, const char *key,
                       uint64_t *ret_value, struct pyf_err *reterr)
{
    uint64_t *keys = malloc(DICT_SCAN_MAX * sizeof(*keys));
    uint64_t *values = malloc(DICT_SCAN_MAX * sizeof(*values));
    size_t n = 0, total = 0;
    int r = keys && values
                ? pyobj_dict_items(t, dict, keys, values, DICT_SCAN_MAX, &n, &total, reterr)
                : pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "dict lookup");

    *ret_value = 0;
    for (size_t i = 0; r == 0 && i < n && !*ret_value; i++) {
        char *text = NULL;
        uint64_t type = 0;

        /* only str keys are compared; a key that is not one (or not readable) is skipped */
        if (pyobj_type(t, keys[i], &type, NULL) < 0 || type != t->types.str ||
            pyobj_str(t, keys[i], KEY_CHARS_MAX, &text, NULL) < 0)
            continue;
        if (strcmp(text, key) == 0)
            *ret_value = values[i];
        free(text);
    }
    free(keys);
    free(values);
    return r;
}

/* The keys object @type shares among its instances (3.11+). */
static int cached_keys(const struct pyf_target *t, uint64_t type, uint64_t *ret, struct pyf_err *e)
{
    return pyobj_read(t, type + (uint64_t)t->lay.ht_cached_keys, ret, sizeof(*ret), e,
                      "type's shared keys");
}

int pyobj_attr(const struct pyf_target *t, uint64_t obj, const char *name, uint64_t *ret_value,
               struct pyf_err *reterr)
{
    const struct pyf_layout *l = &t->lay;
    uint64_t type = 0, flags = 0, dict = 0, values = 0, keys = 0, word = 0;
    int r = pyobj_type(t, obj, &type, reterr);

    *ret_value = 0;
    if (r == 0)
        r = pyobj_read(t, type + (uint64_t)l->tp_flags, &flags, sizeof(flags), reterr,
                       "type flags");
    if (r < 0)
        return r;
    if (l->attrs_model == PYF_ATTRS_DICTOFFSET || !(flags & TPFLAGS_MANAGED_DICT)) {
        int64_t off = 0;

        r = pyobj_read(t, type + (uint64_t)l->tp_dictoffset, &off, sizeof(off), reterr,
                       "type's dict offset");
        if (r < 0 || off <= 0 || off > (1 << 20)) /* none, or at the end of a varobject */
            return r;
        r = pyobj_read(t, obj + (uint64_t)off, &dict, sizeof(dict), reterr, "instance dict");
    } else if (l->attrs_model == PYF_ATTRS_MANAGED_311) {
        r = pyobj_read(t, obj - 4 * 8, &values, sizeof(values), reterr, "instance values");
        if (r == 0)
            r = pyobj_read(t, obj - 3 * 8, &dict, sizeof(dict), reterr, "instance dict");
    } else if (l->attrs_model == PYF_ATTRS_DICT_OR_VALUES) {
        r = pyobj_read(t, obj - 3 * 8, &word, sizeof(word), reterr, "instance dict or values");
        if (word & 1) /* the values, less one: a tagged pointer */
            values = word + 1;
        else
            dict = word;
    } else { /* PYF_ATTRS_INLINE_VALUES: the dict once made, else the values inline */
        r = pyobj_read(t, obj - 3 * 8, &dict, sizeof(dict), reterr, "instance dict");
        if (r == 0 && !dict && (flags & TPFLAGS_INLINE_VALUES)) {
            int64_t basicsize = 0;
            uint8_t head[4]; /* capacity, size, embedded, valid */

            r = pyobj_read(t, type + (uint64_t)l->tp_basicsize, &basicsize, sizeof(basicsize),
                           reterr, "type's size");
            if (r == 0 && (basicsize < 16 || basicsize > (1 << 20)))
                r = pyf_fail(reterr, PYF_TORN, EFAULT, type, "type at 0x%" PRIx64 ": size %" PRId64,
                             type, basicsize);
            if (r == 0)
                r = pyobj_read(t, obj + (uint64_t)basicsize, head, sizeof(head), reterr,
                               "inline values");
            if (r == 0 && head[3])
                values = obj + (uint64_t)basicsize;
        }
    }
    if (r < 0)
        return r;
    if (dict)
        return pyobj_dict_get_str(t, dict, name, ret_value, reterr);
    if (!values)
        return 0;
    r = cached_keys(t, type, &keys, reterr);
    if (r == 0 && keys) {
        struct dict_view v;
        uint64_t k[DICT_SCAN_MAX < 256 ? DICT_SCAN_MAX : 256], vals[256];
        size_t n = 0;

        r = keys_view(t, keys, values + (uint64_t)l->dict_values_array, &v, reterr);
        if (r == 0)
            r = view_items(t, &v, k, vals, 256, &n, reterr);
        for (size_t i = 0; r == 0 && i < n && !*ret_value; i++) {
            char *text = NULL;

            if (pyobj_str(t, k[i], KEY_CHARS_MAX, &text, NULL) == 0 && strcmp(text, name) == 0)
                *ret_value = vals[i];
            free(text);
        }
    }
    return r;
}
