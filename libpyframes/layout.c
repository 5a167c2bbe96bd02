/* layout.c - choosing the layout table, and reading one from _Py_DebugOffsets; see layout.h. */
#include "layout.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

extern const struct pyf_layout pyf_layout_306, pyf_layout_307, pyf_layout_308, pyf_layout_309,
    pyf_layout_310, pyf_layout_311, pyf_layout_312, pyf_layout_313;

static const struct pyf_layout *const layouts[] = {
    &pyf_layout_306, &pyf_layout_307, &pyf_layout_308, &pyf_layout_309,
    &pyf_layout_310, &pyf_layout_311, &pyf_layout_312, &pyf_layout_313,
};

const struct pyf_layout *layout_for_version(uint32_t version)
{
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        if (layouts[i]->version == version)
            return layouts[i];
    return NULL;
}

/*
 * struct _Py_DebugOffsets as 3.13 lays it out: every field a uint64_t, in this order. Each
 * section starts with the size of the struct it describes. We name the words we use by
 * index rather than mirroring the struct, because 3.14 inserts fields: the caller refuses a
 * version whose shape it does not know.
 */
enum {
    DO_COOKIE = 0, /* 8 bytes */
    DO_VERSION = 1,
    DO_FREE_THREADED = 2,
    DO_RT_SIZE = 3,
    DO_RT_INTERP_HEAD = 5,
    DO_IS_SIZE = 6,
    DO_IS_ID = 7,
    DO_IS_NEXT = 8,
    DO_IS_THREADS_HEAD = 9,
    DO_IS_CEVAL_GIL = 14,
    DO_IS_GIL_STATE = 15, /* the interpreter's own _gil, relative to PyInterpreterState */
    DO_IS_GIL_LOCKED = 17,
    DO_IS_GIL_HOLDER = 18,
    DO_TS_SIZE = 19,
    DO_TS_NEXT = 21,
    DO_TS_INTERP = 22,
    DO_TS_CURRENT_FRAME = 23,
    DO_TS_THREAD_ID = 24,
    DO_TS_NATIVE_THREAD_ID = 25,
    DO_FR_SIZE = 28,
    DO_FR_PREVIOUS = 29,
    DO_FR_EXECUTABLE = 30,
    DO_FR_INSTR_PTR = 31,
    DO_FR_LOCALSPLUS = 32,
    DO_FR_OWNER = 33,
    DO_CO_SIZE = 34,
    DO_CO_FILENAME = 35,
    DO_CO_NAME = 36,
    DO_CO_QUALNAME = 37,
    DO_CO_LINETABLE = 38,
    DO_CO_FIRSTLINENO = 39,
    DO_CO_ARGCOUNT = 40,
    DO_CO_LOCALSPLUSNAMES = 41,
    DO_CO_LOCALSPLUSKINDS = 42,
    DO_CO_CODE_ADAPTIVE = 43,
    DO_OB_TYPE = 45,
    DO_TP_NAME = 47,
    DO_TP_FLAGS = 49,
    DO_TUPLE_ITEM = 51,
    DO_FLOAT_FVAL = 60,
    DO_LONG_DIGIT = 63,
    DO_BYTES_SVAL = 66,
    DO_STR_STATE = 68,
    DO_STR_LENGTH = 69,
    DO_STR_ASCII_SIZE = 70,
    DO_N_WORDS_313 = 73,
};

static int take(const uint64_t *w, int idx, int32_t *out)
{
    if (w[idx] > 1u << 20)
        return -EINVAL; /* no field of these structs is a megabyte in */
    *out = (int32_t)w[idx];
    return 0;
}

int layout_from_debug_offsets(const void *raw, uint64_t raw_bytes, uint32_t version,
                              struct pyf_layout *ret_layout)
{
    static const struct {
        int idx;
        size_t field;
    } map[] = {
#define M(idx, field) {idx, offsetof(struct pyf_layout, field)}
        M(DO_RT_INTERP_HEAD, rt_interp_head),
        M(DO_IS_ID, is_id),
        M(DO_IS_NEXT, is_next),
        M(DO_IS_THREADS_HEAD, is_tstate_head),
        M(DO_IS_CEVAL_GIL, is_gil),
        M(DO_TS_NEXT, ts_next),
        M(DO_TS_INTERP, ts_interp),
        M(DO_TS_CURRENT_FRAME, ts_frame),
        M(DO_TS_THREAD_ID, ts_thread_id),
        M(DO_TS_NATIVE_THREAD_ID, ts_native_thread_id),
        M(DO_TS_SIZE, ts_size),
        M(DO_FR_PREVIOUS, fr_back),
        M(DO_FR_EXECUTABLE, fr_code),
        M(DO_FR_INSTR_PTR, fr_lasti),
        M(DO_FR_LOCALSPLUS, fr_localsplus),
        M(DO_FR_OWNER, fr_owner),
        M(DO_CO_FILENAME, co_filename),
        M(DO_CO_NAME, co_name),
        M(DO_CO_QUALNAME, co_qualname),
        M(DO_CO_LINETABLE, co_linetable),
        M(DO_CO_FIRSTLINENO, co_firstlineno),
        M(DO_CO_ARGCOUNT, co_argcount),
        M(DO_CO_LOCALSPLUSNAMES, co_localsplusnames),
        M(DO_CO_LOCALSPLUSKINDS, co_localspluskinds),
        M(DO_CO_CODE_ADAPTIVE, co_code_adaptive),
        M(DO_OB_TYPE, ob_type),
        M(DO_TP_NAME, tp_name),
        M(DO_TP_FLAGS, tp_flags),
        M(DO_TUPLE_ITEM, tuple_items),
        M(DO_FLOAT_FVAL, float_value),
        M(DO_LONG_DIGIT, long_digits),
        M(DO_BYTES_SVAL, bytes_data),
        M(DO_STR_STATE, str_state),
        M(DO_STR_LENGTH, str_length),
        M(DO_STR_ASCII_SIZE, str_ascii_data),
#undef M
    };
    const uint64_t *w = raw;
    const struct pyf_layout *base = layout_for_version(PYF_VER(3, 13));
    struct pyf_layout lay;

    /* Only 3.13's shape is known; 3.14 moved fields (it has more words per section). */
    if (version != PYF_VER(3, 13) || raw_bytes < DO_N_WORDS_313 * sizeof(uint64_t))
        return -EOPNOTSUPP;
    if (memcmp(raw, LAYOUT_DEBUG_COOKIE, 8) != 0)
        return -ENOENT;
    if (w[DO_FREE_THREADED])
        return -EOPNOTSUPP; /* free-threaded builds keep per-object state elsewhere */
    lay = *base;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        int32_t v;
        if (take(w, map[i].idx, &v) < 0)
            return -EINVAL;
        memcpy((char *)&lay + map[i].field, &v, sizeof(v));
    }
    /* The GIL fields are published relative to the interpreter's embedded _gil; we follow
     * ceval.gil instead (a sub-interpreter may share the main one's), so rebase them. */
    if (w[DO_IS_GIL_LOCKED] < w[DO_IS_GIL_STATE] || w[DO_IS_GIL_HOLDER] < w[DO_IS_GIL_STATE] ||
        w[DO_IS_GIL_LOCKED] - w[DO_IS_GIL_STATE] > 256 ||
        w[DO_IS_GIL_HOLDER] - w[DO_IS_GIL_STATE] > 256)
        return -EINVAL;
    lay.gil_locked = (int32_t)(w[DO_IS_GIL_LOCKED] - w[DO_IS_GIL_STATE]);
    lay.gil_last_holder = (int32_t)(w[DO_IS_GIL_HOLDER] - w[DO_IS_GIL_STATE]);
    /* The compact (non-ASCII) str data follows the ASCII header and two words. */
    lay.str_compact_data = lay.str_ascii_data + 16;
    lay.fr_size = lay.fr_localsplus;
    *ret_layout = lay;
    return 0;
}
