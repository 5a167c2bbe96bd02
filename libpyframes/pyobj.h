/*
 * pyobj.h - reading Python objects (str, bytes, tuple, simple values) out of the target.
 *
 * Every object is checked against the type object we expect (by address, which is exact)
 * before its fields are trusted, and every length is bounded, so a pointer that went stale
 * under us becomes PYF_TORN rather than garbage.
 * Threads: the target's owner. Memory: as stated per function. Failure: -errno + pyf_err.
 */
#ifndef PYF_PYOBJ_H
#define PYF_PYOBJ_H

#include <stddef.h>
#include <stdint.h>

#include "target.h"

#define PYOBJ_NAME_MAX 4096 /* code points of a name or file name we keep */

/* A str as UTF-8, at most @max_chars code points; *ret_utf8 is malloc'd, caller frees. */
int pyobj_str(const struct pyf_target *t, uint64_t raddr, size_t max_chars, char **ret_utf8,
              struct pyf_err *reterr);

/* The contents of a bytes object, at most @max bytes; *ret_data is malloc'd, caller frees. */
int pyobj_bytes(const struct pyf_target *t, uint64_t raddr, size_t max, uint8_t **ret_data,
                size_t *ret_len, struct pyf_err *reterr);

/* The item pointers of a tuple, at most @cap of them. */
int pyobj_tuple(const struct pyf_target *t, uint64_t raddr, uint64_t *items, size_t cap,
                size_t *ret_n, struct pyf_err *reterr);

/* repr() for None/bool/int/float/str/bytes, "<TypeName at 0x...>" for anything else. */
int pyobj_repr_scalar(const struct pyf_target *t, uint64_t raddr, char *buf, size_t size,
                      struct pyf_err *reterr);

/* repr() as pyobj_repr_scalar(), and of containers (list, tuple, dict, set, frozenset: nested
 * a few levels, a few dozen items each, then "..."), numpy scalars and arrays (pyrepr.c). */
int pyobj_repr(const struct pyf_target *t, uint64_t raddr, char *buf, size_t size,
               struct pyf_err *reterr);

/* The items of a dict, in the dict's order, at most @cap; *ret_total: how many it has. A
 * combined or split table, on every version (pydict.c). */
int pyobj_dict_items(const struct pyf_target *t, uint64_t raddr, uint64_t *keys, uint64_t *values,
                     size_t cap, size_t *ret_n, size_t *ret_total, struct pyf_err *reterr);

/* The same, of a dict of a few entries, in two reads (its head, then its keys object with
 * the entries); its type checked (PYF_TORN: no longer a dict). A larger one, or a split
 * table, is read as pyobj_dict_items() reads it. */
int pyobj_small_dict_items(const struct pyf_target *t, uint64_t raddr, uint64_t *keys,
                           uint64_t *values, size_t cap, size_t *ret_n, struct pyf_err *reterr);
/* The value of str key @key in @dict; *ret_value 0 when it has none (pydict.c). */
int pyobj_dict_get_str(const struct pyf_target *t, uint64_t dict, const char *key,
                       uint64_t *ret_value, struct pyf_err *reterr);

/* The instance attribute @name of @obj (in its __dict__ or its values), as getattr() finds
 * an attribute the instance holds itself; *ret_value 0 when it has none (pydict.c). */
int pyobj_attr(const struct pyf_target *t, uint64_t obj, const char *name, uint64_t *ret_value,
               struct pyf_err *reterr);

/* An int that fits 64 bits, as unsigned (threading idents are pthread_t values). */
int pyobj_u64(const struct pyf_target *t, uint64_t raddr, uint64_t *ret_value,
              struct pyf_err *reterr);

/* @size bytes at @raddr, the pointer checked first; errors name @what. */
int pyobj_read(const struct pyf_target *t, uint64_t raddr, void *buf, size_t size,
               struct pyf_err *reterr, const char *what);

/* A type's tp_name, bounded and made printable. */
int pyobj_type_name(const struct pyf_target *t, uint64_t type, char *name, size_t size,
                    struct pyf_err *reterr);

/* The address of the object's type. */
int pyobj_type(const struct pyf_target *t, uint64_t raddr, uint64_t *ret_type,
               struct pyf_err *reterr);

#endif
