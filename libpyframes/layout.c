/* layout.c - choosing the layout table, and reading one from _Py_DebugOffsets; see layout.h. */
#include "layout.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

extern const struct pyf_layout pyf_layout_306, pyf_layout_307, pyf_layout_308, pyf_layout_309,
    pyf_layout_310, pyf_layout_311, pyf_layout_312, pyf_layout_313, pyf_layout_314, pyf_layout_315;

/* Oldest first: the last is the newest this build knows. */
static const struct pyf_layout *const layouts[] = {
    &pyf_layout_306, &pyf_layout_307, &pyf_layout_308, &pyf_layout_309, &pyf_layout_310,
    &pyf_layout_311, &pyf_layout_312, &pyf_layout_313, &pyf_layout_314, &pyf_layout_315,
};

const struct pyf_layout *layout_for_version(uint32_t version)
{
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        if (layouts[i]->version == version)
            return layouts[i];
    return NULL;
}

const struct pyf_layout *layout_newest(void)
{
    return layouts[sizeof(layouts) / sizeof(layouts[0]) - 1];
}

/* No struct these offsets describe is a megabyte long. */
#define STRUCT_MAX (1u << 20)

static int bad(char *why, size_t why_size, const char *what, uint64_t value, uint64_t limit)
{
    snprintf(why, why_size, "%s is %" PRIu64 ", not below %" PRIu64, what, value, limit);
    return -EINVAL;
}

int layout_from_debug_offsets(const void *raw, uint64_t raw_bytes, uint32_t version,
                              const struct pyf_layout *base, struct pyf_layout *ret_layout,
                              char *why, size_t why_size)
{
    const struct pyf_debug_map *m = base ? base->debug_map : NULL;
    const uint64_t *w = raw;
    struct pyf_layout lay;
    uint64_t want_hex = ((uint64_t)(version >> 8) << 24) | ((uint64_t)(version & 0xff) << 16);

    snprintf(why, why_size, "no _Py_DebugOffsets");
    if (!m || raw_bytes < (uint64_t)m->n_words * 8)
        return -EOPNOTSUPP;
    if (memcmp(raw, LAYOUT_DEBUG_COOKIE, 8) != 0)
        return -ENOENT;
    /* PY_VERSION_HEX: the same major and minor as Py_Version said */
    if ((w[m->version] & 0xffff0000u) != want_hex)
        return bad(why, why_size, "the version word", w[m->version] >> 16, want_hex >> 16);
    if (w[m->free_threaded]) {
        snprintf(why, why_size,
                 "a free-threaded build (not read: objects keep their state "
                 "per thread there)");
        return -ENOEXEC;
    }
    lay = *base;
    for (uint16_t i = 0; i < m->n_fields; i++) {
        const struct pyf_debug_field *f = &m->fields[i];
        uint64_t size = w[f->size_word];
        int32_t v;

        if (size == 0 || size > STRUCT_MAX)
            return bad(why, why_size, "a struct size", size, STRUCT_MAX);
        if (w[f->word] >= size)
            return bad(why, why_size, "an offset", w[f->word], size);
        v = (int32_t)w[f->word];
        memcpy((char *)&lay + f->field, &v, sizeof(v));
    }
    /* The GIL fields are published relative to the interpreter's embedded _gil; we follow
     * ceval.gil instead (a sub-interpreter may share the main one's), so rebase them. */
    if (w[m->gil_locked] < w[m->gil_state] || w[m->gil_holder] < w[m->gil_state] ||
        w[m->gil_locked] - w[m->gil_state] > 256 || w[m->gil_holder] - w[m->gil_state] > 256)
        return bad(why, why_size, "the GIL's fields", w[m->gil_locked], w[m->gil_state] + 256);
    lay.gil_locked = (int32_t)(w[m->gil_locked] - w[m->gil_state]);
    lay.gil_last_holder = (int32_t)(w[m->gil_holder] - w[m->gil_state]);
    if (w[m->is_gc] + w[m->gc_collecting] >= w[m->is_size] || w[m->is_size] > STRUCT_MAX)
        return bad(why, why_size, "the collector's flag", w[m->is_gc] + w[m->gc_collecting],
                   w[m->is_size]);
    lay.is_gc_collecting = (int32_t)(w[m->is_gc] + w[m->gc_collecting]);
    if (m->debugger_support) { /* 3.14+: PEP 768 */
        uint64_t ts = w[m->ts_size], at = w[m->debugger_support], size = w[m->debugger_script_size];
        if (w[m->eval_breaker] + 8 > ts || w[m->remote_debug] + 4 > w[m->is_size] || size < 64 ||
            size > 4096 || at + w[m->debugger_pending] + 4 > ts ||
            at + w[m->debugger_script] + size > ts)
            return bad(why, why_size, "the remote debugger's fields", at + w[m->debugger_script],
                       ts);
        lay.ts_eval_breaker = (int32_t)w[m->eval_breaker];
        lay.ts_debugger_pending = (int32_t)(at + w[m->debugger_pending]);
        lay.ts_debugger_script = (int32_t)(at + w[m->debugger_script]);
        lay.debugger_script_size = (int32_t)size;
        lay.is_remote_debug = (int32_t)w[m->remote_debug];
    }
    /* The compact (non-ASCII) str data follows the ASCII header and two words. */
    lay.str_compact_data = lay.str_ascii_data + 16;
    *ret_layout = lay;
    return 0;
}

extern const struct pyf_aio_layout pyf_aio_layouts[];
extern const size_t pyf_n_aio_layouts;

const struct pyf_aio_layout *aio_layout_for_version(uint32_t version)
{
    for (size_t i = 0; i < pyf_n_aio_layouts; i++)
        if (pyf_aio_layouts[i].version == version)
            return &pyf_aio_layouts[i];
    return NULL;
}
