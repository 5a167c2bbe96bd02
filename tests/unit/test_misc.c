/* Unit tests: codecache.c, the version scanner in elfimg.c, and the layout tables. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <stdint.h>

#include "codecache.h"
#include "elfimg.h"
#include "frameptr.h"
#include "layout.h"
#include "procmaps.h"
#include "common/jsontext.h"
#include "unit.h"

int test_codecache_pins_entries_of_the_walk(void);
int test_version_scan(void);
int test_layout_tables(void);
int test_debug_offsets(void);
int test_debug_offsets_every_version(void);
int test_indirect_call_lengths(void);

int test_codecache_pins_entries_of_the_walk(void)
{
    struct codecache *cc = codecache_new(1); /* one set of 4 ways: forces collisions */
    uint64_t key[CODE_KEY_WORDS] = {1, 2, 3, 4, 5};
    struct code_info *e[6];
    struct codecache_stats st;

    CHECK(cc);
    codecache__begin(cc);
    for (int i = 0; i < 6; i++) {
        e[i] = codecache__insert(cc, 0x1000 + 16 * i, key);
        CHECK(e[i]);
        e[i]->func = strdup("f");
    }
    /* Six live entries in a 4-way cache during one walk: none was evicted under us. */
    for (int i = 0; i < 6; i++)
        CHECK(codecache__find(cc, 0x1000 + 16 * i, key) == e[i]);
    key[0] = 99; /* same address, another object: a miss */
    CHECK(codecache__find(cc, 0x1000, key) == NULL);
    codecache__begin(cc); /* the next walk frees the overflow */
    key[0] = 1;
    CHECK(codecache__find(cc, 0x1000, key) != NULL);
    codecache__stats(cc, &st);
    CHECK(st.hits == 7 && st.misses == 1);
    codecache_free(cc);
    codecache_free(NULL);
    return 0;
}

int test_version_scan(void)
{
    static const char data[] = "\0junk\0/tmp/python-build/Python-3.9.18\0"
                               "3.9\0"
                               "2.7.18\0";
    char buf[32];

    CHECK(elfimg_scan_version((const unsigned char *)data, sizeof(data), 3, 9, buf, sizeof(buf)) ==
          0);
    CHECK_STR(buf, "3.9.18");
    CHECK(elfimg_scan_version((const unsigned char *)data, sizeof(data), 2, -1, buf, sizeof(buf)) ==
          0);
    CHECK_STR(buf, "2.7.18");
    CHECK(elfimg_scan_version((const unsigned char *)data, sizeof(data), 3, 10, buf, sizeof(buf)) <
          0);
    CHECK(elfimg_scan_version((const unsigned char *)"3.12.0rc1", 10, 3, 12, buf, sizeof(buf)) ==
          0);
    CHECK_STR(buf, "3.12.0rc1");
    return 0;
}

int test_layout_tables(void)
{
    for (uint32_t minor = 6; minor <= 15; minor++) {
        const struct pyf_layout *l = layout_for_version(PYF_VER(3, minor));
        CHECK(l && l->version == PYF_VER(3, minor));
        CHECK(l->ts_next > 0 && l->fr_back >= 0 && l->co_filename > 0 && l->co_name > 0);
        CHECK(l->frame_model == (minor < 11 ? PYF_FRAME_OBJECT : PYF_FRAME_INTERP));
        CHECK(l->long_digit_bits == 30);
    }
    CHECK(layout_for_version(PYF_VER(3, 5)) == NULL);
    CHECK(layout_for_version(PYF_VER(2, 7)) == NULL);
    return 0;
}

/* A _Py_DebugOffsets built from a table through its own map (and what the map does not name
 * set as the interpreter publishes it). */
static void debug_offsets_of(const struct pyf_layout *l, uint32_t hex, uint64_t *w)
{
    const struct pyf_debug_map *m = l->debug_map;

    memcpy(w, LAYOUT_DEBUG_COOKIE, 8);
    w[m->version] = hex;
    for (uint16_t i = 0; i < m->n_fields; i++) {
        const struct pyf_debug_field *f = &m->fields[i];
        int32_t v;
        memcpy(&v, (const char *)l + f->field, sizeof(v));
        w[f->word] = (uint64_t)v;
        if (w[f->size_word] <= w[f->word])
            w[f->size_word] = w[f->word] + 8; /* a struct size past each offset */
    }
    w[m->gil_state] = 1000, w[m->gil_locked] = 1000 + (uint64_t)l->gil_locked;
    w[m->gil_holder] = 1000 + (uint64_t)l->gil_last_holder;
    w[m->is_gc] = (uint64_t)l->is_gc_collecting - 8, w[m->gc_collecting] = 8;
    w[m->is_size] = 1u << 16;
    w[m->ts_size] = (uint64_t)l->ts_size;
    if (m->debugger_support) { /* the script path relative to the thread's support struct */
        w[m->eval_breaker] = (uint64_t)l->ts_eval_breaker;
        w[m->debugger_support] = (uint64_t)l->ts_debugger_pending - 4;
        w[m->debugger_pending] = 4;
        w[m->debugger_script] = (uint64_t)(l->ts_debugger_script - l->ts_debugger_pending + 4);
        w[m->debugger_script_size] = (uint64_t)l->debugger_script_size;
        w[m->remote_debug] = (uint64_t)l->is_remote_debug;
    }
}

/* The 3.13 struct as counted by hand from CPython's pycore_runtime.h: the generated map
 * names the same words. */
int test_debug_offsets(void)
{
    const struct pyf_layout *l = layout_for_version(PYF_VER(3, 13));
    uint64_t w[128] = {0};
    struct pyf_layout got;
    char why[160];

    memcpy(w, LAYOUT_DEBUG_COOKIE, 8);
    w[1] = 0x030d00f0;
    w[3] = 1u << 16, w[6] = 1u << 16, w[19] = (uint64_t)l->ts_size, w[28] = 80, w[34] = 256;
    w[44] = 16, w[46] = 416, w[50] = 32, w[53] = 40, w[56] = 48, w[59] = 24, w[61] = 32;
    w[64] = 40, w[67] = 80, w[71] = 400;
    w[5] = (uint64_t)l->rt_interp_head;
    w[7] = (uint64_t)l->is_id, w[8] = (uint64_t)l->is_next, w[9] = (uint64_t)l->is_tstate_head;
    w[10] = (uint64_t)l->is_gc_collecting - 8, w[72] = 8, w[11] = (uint64_t)l->is_modules;
    w[14] = (uint64_t)l->is_gil, w[15] = 1000;
    w[17] = 1000 + (uint64_t)l->gil_locked, w[18] = 1000 + (uint64_t)l->gil_last_holder;
    w[21] = (uint64_t)l->ts_next, w[22] = (uint64_t)l->ts_interp;
    w[23] = (uint64_t)l->ts_frame, w[24] = (uint64_t)l->ts_thread_id;
    w[25] = (uint64_t)l->ts_native_thread_id;
    w[29] = (uint64_t)l->fr_back, w[30] = (uint64_t)l->fr_code, w[31] = (uint64_t)l->fr_lasti;
    w[32] = (uint64_t)l->fr_localsplus, w[33] = (uint64_t)l->fr_owner;
    w[35] = (uint64_t)l->co_filename, w[36] = (uint64_t)l->co_name;
    w[37] = (uint64_t)l->co_qualname, w[38] = (uint64_t)l->co_linetable;
    w[39] = (uint64_t)l->co_firstlineno, w[40] = (uint64_t)l->co_argcount;
    w[41] = (uint64_t)l->co_localsplusnames, w[42] = (uint64_t)l->co_localspluskinds;
    w[43] = (uint64_t)l->co_code_adaptive, w[45] = (uint64_t)l->ob_type;
    w[47] = (uint64_t)l->tp_name, w[49] = (uint64_t)l->tp_flags;
    w[51] = (uint64_t)l->tuple_items, w[52] = (uint64_t)l->var_size;
    w[54] = (uint64_t)l->list_items, w[57] = (uint64_t)l->dict_keys;
    w[58] = (uint64_t)l->dict_values, w[60] = (uint64_t)l->float_value;
    w[63] = (uint64_t)l->long_digits, w[66] = (uint64_t)l->bytes_data;
    w[68] = (uint64_t)l->str_state, w[69] = (uint64_t)l->str_length;
    w[70] = (uint64_t)l->str_ascii_data;
    CHECK(l->debug_map && l->debug_map->n_words == 73);
    CHECK(layout_from_debug_offsets(w, sizeof(w), PYF_VER(3, 13), l, &got, why, sizeof(why)) == 0);
    CHECK(memcmp(&got, l, sizeof(got)) == 0);
    /* the version word must say what Py_Version said */
    CHECK(layout_from_debug_offsets(w, sizeof(w), PYF_VER(3, 14), l, &got, why, sizeof(why)) ==
          -EINVAL);
    w[2] = 1; /* free-threaded: refused, not read with the table */
    CHECK(layout_from_debug_offsets(w, sizeof(w), PYF_VER(3, 13), l, &got, why, sizeof(why)) ==
          -ENOEXEC);
    w[2] = 0, w[0] = 0; /* no cookie */
    CHECK(layout_from_debug_offsets(w, sizeof(w), PYF_VER(3, 13), l, &got, why, sizeof(why)) ==
          -ENOENT);
    /* before 3.13 nothing is published */
    CHECK(layout_from_debug_offsets(w, sizeof(w), PYF_VER(3, 12),
                                    layout_for_version(PYF_VER(3, 12)), &got, why,
                                    sizeof(why)) == -EOPNOTSUPP);
    return 0;
}

/* Every version that publishes offsets reads back as its own table through its own map; a
 * newer version is read through the newest map once its offsets check out. */
int test_debug_offsets_every_version(void)
{
    const struct pyf_layout *newest = layout_newest();
    struct pyf_layout got;
    char why[160];

    CHECK(newest->version >= PYF_VER(3, 15));
    for (uint32_t minor = 13; minor <= PYF_VERSION_MINOR(newest->version); minor++) {
        const struct pyf_layout *l = layout_for_version(PYF_VER(3, minor));
        uint64_t w[LAYOUT_DEBUG_BYTES / 8] = {0};

        CHECK(l && l->debug_map && l->debug_map->n_words * 8u <= LAYOUT_DEBUG_BYTES);
        debug_offsets_of(l, 0x030000f0u | minor << 16, w);
        CHECK(layout_from_debug_offsets(w, sizeof(w), l->version, l, &got, why, sizeof(why)) == 0);
        CHECK(memcmp(&got, l, sizeof(got)) == 0);
    }
    {
        uint64_t w[LAYOUT_DEBUG_BYTES / 8] = {0};
        uint32_t next = newest->version + 1;
        const struct pyf_debug_field *f = &newest->debug_map->fields[3];

        debug_offsets_of(newest, 0x030000f0u | PYF_VERSION_MINOR(next) << 16, w);
        CHECK(layout_from_debug_offsets(w, sizeof(w), next, newest, &got, why, sizeof(why)) == 0);
        CHECK(got.fr_owner == newest->fr_owner && got.ts_frame == newest->ts_frame);
        CHECK(got.ts_debugger_script == newest->ts_debugger_script && got.eval_stop_bit > 0);
        w[newest->debug_map->debugger_script_size] = 1u << 20; /* a path buffer past the thread */
        CHECK(layout_from_debug_offsets(w, sizeof(w), next, newest, &got, why, sizeof(why)) ==
              -EINVAL);
        w[newest->debug_map->debugger_script_size] = (uint64_t)newest->debugger_script_size;
        w[f->word] = w[f->size_word]; /* an offset past its struct: moved fields */
        CHECK(layout_from_debug_offsets(w, sizeof(w), next, newest, &got, why, sizeof(why)) ==
              -EINVAL);
        CHECK(strstr(why, "an offset") != NULL);
        w[f->word] = 0, w[f->size_word] = 0; /* a struct of no size */
        CHECK(layout_from_debug_offsets(w, sizeof(w), next, newest, &got, why, sizeof(why)) ==
              -EINVAL);
    }
    return 0;
}

/* The indirect calls frameptr.c recognises before a return address, by their encodings. */
int test_indirect_call_lengths(void)
{
    static const struct {
        uint8_t code[8];
        size_t len;
    } cases[] = {
        {{0xff, 0xd0}, 2},                   /* call *%rax */
        {{0x41, 0xff, 0xd4}, 3},             /* call *%r12 */
        {{0xff, 0x10}, 2},                   /* call *(%rax) */
        {{0xff, 0x50, 0x08}, 3},             /* call *0x8(%rax) */
        {{0xff, 0x54, 0x24, 0x08}, 4},       /* call *0x8(%rsp) */
        {{0xff, 0x15, 1, 2, 3, 4}, 6},       /* call *x(%rip) */
        {{0xff, 0x90, 1, 2, 3, 4}, 6},       /* call *0x4030201(%rax) */
        {{0xff, 0x94, 0x24, 1, 2, 3, 4}, 7}, /* call *0x4030201(%rsp) */
        {{0x41, 0xff, 0x54, 0x24, 0x10}, 5}, /* call *0x10(%r12) */
        {{0xff, 0xe0}, 0},                   /* jmp *%rax */
        {{0xff, 0x20}, 0},                   /* jmp *(%rax) */
        {{0xe8, 1, 2, 3, 4}, 0},             /* a direct call: not this */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECK(frameptr_indirect_call_len(cases[i].code, sizeof(cases[i].code)) == cases[i].len);
    CHECK(frameptr_indirect_call_len((const uint8_t *)"\xff", 1) == 0); /* cut short */
    return 0;
}

int test_schedstat_line(void)
{
    uint64_t v[3] = {0};

    CHECK(procmaps_schedstat("123456789 42 7\n", v));
    CHECK(v[0] == 123456789 && v[1] == 42 && v[2] == 7);
    CHECK(procmaps_schedstat("18446744073709551615 0 1", v) && v[0] == UINT64_MAX);
    CHECK(!procmaps_schedstat("1 2", v));
    CHECK(!procmaps_schedstat("", v));
    CHECK(!procmaps_schedstat("1 -2 3", v));
    CHECK(!procmaps_schedstat("1 x 3", v));
    CHECK(!procmaps_schedstat("18446744073709551616 0 1", v)); /* past 64 bits */
    return 0;
}

/* The daemon's replies and probectl's JSON: each real in the fewest digits that read back the
 * same (jansson alone writes 0.04 as 0.040000000000000001), still a real, strings untouched,
 * and every double read back exactly. */
int test_jsontext_shortest_reals(void)
{
    json_t *doc =
        json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:s, s:[f, f]}", "cpu_seconds", 0.04, "third",
                  1.0 / 3, "two", 2.0, "big", 1e300, "neg", -58.96, "n", (json_int_t)-17, "s",
                  "0.040000000000000001 \"2.0\"", "list", 5e-324, 0.1 + 0.2);
    char *text = jsontext_dumps(doc, JSON_COMPACT), buf[40];

    CHECK(text);
    CHECK_STR(text, "{\"cpu_seconds\":0.04,\"third\":0.3333333333333333,\"two\":2.0,"
                    "\"big\":1e+300,\"neg\":-58.96,\"n\":-17,"
                    "\"s\":\"0.040000000000000001 \\\"2.0\\\"\",\"list\":[5e-324,"
                    "0.30000000000000004]}");
    free(text);
    json_decref(doc);
    for (int i = 0; i < 100000; i++) { /* any double: the text reads back as it */
        uint64_t bits = ((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 11) ^ (uint64_t)rand();
        double v;
        memcpy(&v, &bits, sizeof(v));
        if (v != v || v - v != 0) /* NaN and infinities: not JSON */
            continue;
        jsontext_real(v, buf, sizeof(buf));
        CHECK(strtod(buf, NULL) == v);
    }
    return 0;
}
