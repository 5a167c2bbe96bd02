/* linetable.c - CPython line-table decoders; see linetable.h and CPython's
 * Objects/lnotab_notes.txt (3.6-3.10) and Objects/locations.md (3.11+). */
#include "linetable.h"

#include <limits.h>
#include <stdbool.h>

/* 3.6-3.9: (address increment, signed line increment) byte pairs. */
static int lnotab_line(const uint8_t *tab, size_t len, int line, int64_t addr)
{
    int64_t at = 0;

    for (size_t i = 0; i + 1 < len; i += 2) {
        at += tab[i];
        if (at > addr)
            break;
        line += (int8_t)tab[i + 1];
    }
    return line;
}

/* The state of CPython's PyCodeAddressRange walk: [start, end) has line @line. */
struct range {
    int64_t start, end;
    int line, computed_line;
    size_t at; /* next entry */
};

/* 3.10: (byte delta, signed line delta) pairs; a line delta of -128 means "no line". */
static bool linetable310_next(const uint8_t *tab, size_t len, struct range *r)
{
    do {
        int8_t ldelta;

        if (r->at + 1 >= len)
            return false;
        r->start = r->end;
        r->end += tab[r->at];
        ldelta = (int8_t)tab[r->at + 1];
        r->at += 2;
        if (ldelta == -128) {
            r->line = -1;
        } else {
            r->computed_line += ldelta;
            r->line = r->computed_line;
        }
    } while (r->start == r->end); /* empty ranges are skipped */
    return true;
}

/* 3.11+: variable-length entries; see Objects/locations.md. */
static unsigned scan_varint(const uint8_t *tab, size_t len, size_t *at)
{
    unsigned value = 0, shift = 0;
    uint8_t b;

    do {
        if (*at >= len || shift > 28)
            return value;
        b = tab[(*at)++];
        value |= (unsigned)(b & 63) << shift;
        shift += 6;
    } while (b & 64);
    return value;
}

static int scan_signed_varint(const uint8_t *tab, size_t len, size_t *at)
{
    unsigned u = scan_varint(tab, len, at);
    return (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
}

static bool locations_next_one(const uint8_t *tab, size_t len, struct range *r)
{
    uint8_t first;
    int code, delta = 0;
    size_t at;

    if (r->at >= len)
        return false;
    first = tab[r->at];
    code = (first >> 3) & 15;
    at = r->at + 1;
    if (code == 13 || code == 14) /* no-columns and long forms: signed line delta */
        delta = scan_signed_varint(tab, len, &at);
    else if (code >= 10 && code <= 12) /* one-line forms */
        delta = code - 10;
    r->computed_line += delta;
    r->line = (first >> 3) == 0x1f ? -1 : r->computed_line; /* code 15: no location */
    r->start = r->end;
    r->end += ((first & 7) + 1) * 2;
    /* Entries start with the high bit set; skip to the next one. */
    do
        r->at++;
    while (r->at < len && (tab[r->at] & 128) == 0);
    return true;
}

static bool locations_next(const uint8_t *tab, size_t len, struct range *r)
{
    do
        if (!locations_next_one(tab, len, r))
            return false;
    while (r->start == r->end);
    return true;
}

#define PAST_TABLE INT_MIN /* line_at(): the table ends before the offset */

/* The line at @addr, -1 when the table has none for it, or PAST_TABLE; *ret_before: the line
 * of the last range before @addr that has one (-1: none). */
static int line_at(enum pyf_line_format fmt, const uint8_t *tab, size_t len, int first_line,
                   int64_t addr, int *ret_before)
{
    struct range r = {.start = -1, .end = 0, .line = -1, .computed_line = first_line, .at = 0};

    *ret_before = -1;
    if (!tab)
        len = 0;
    if (fmt == PYF_LINE_LNOTAB)
        return lnotab_line(tab, len, first_line, addr);
    if (addr < 0)
        return first_line; /* a frame that has not started yet */
    while (r.end <= addr) {
        bool more;

        if (r.line >= 0)
            *ret_before = r.line;
        more = fmt == PYF_LINE_LINETABLE ? linetable310_next(tab, len, &r)
                                         : locations_next(tab, len, &r);
        if (!more)
            return PAST_TABLE;
    }
    return r.line;
}

int linetable_line(enum pyf_line_format fmt, const uint8_t *tab, size_t len, int first_line,
                   int64_t addr)
{
    int before, line = line_at(fmt, tab, len, first_line, addr, &before);

    return line == PAST_TABLE ? -1 : line;
}

int linetable_frame_line(enum pyf_line_format fmt, const uint8_t *tab, size_t len, int first_line,
                         int64_t addr)
{
    int before, line = line_at(fmt, tab, len, first_line, addr, &before);

    if (line == PAST_TABLE)
        return -1;
    if (line >= 0)
        return line;
    return before >= 0 ? before : first_line;
}
