/* Unit tests: linetable.c on hand-made tables (tests/functional/test_linetable.py checks
 * every code object of the stdlib against each CPython's own answer). */
#include "linetable.h"
#include "unit.h"

int test_lnotab(void);
int test_linetable310(void);
int test_locations(void);
int test_linetable_hostile(void);

int test_lnotab(void)
{
    /* def at 10: +6 bytes -> line 11, +4 -> line 13, +0/-1 (signed) -> line 12 at 10 */
    const uint8_t tab[] = {6, 1, 4, 2, 0, 0xff};

    CHECK(linetable_line(PYF_LINE_LNOTAB, tab, sizeof(tab), 10, -1) == 10);
    CHECK(linetable_line(PYF_LINE_LNOTAB, tab, sizeof(tab), 10, 0) == 10);
    CHECK(linetable_line(PYF_LINE_LNOTAB, tab, sizeof(tab), 10, 6) == 11);
    CHECK(linetable_line(PYF_LINE_LNOTAB, tab, sizeof(tab), 10, 9) == 11);
    CHECK(linetable_line(PYF_LINE_LNOTAB, tab, sizeof(tab), 10, 10) == 12);
    CHECK(linetable_line(PYF_LINE_LNOTAB, tab, sizeof(tab), 10, 500) == 12);
    return 0;
}

int test_linetable310(void)
{
    /* [0,4) line 11, [4,8) no line, [8,8) empty (skipped), [8,12) line 12 */
    const uint8_t tab[] = {4, 1, 4, 0x80, 0, 1, 4, 0};

    CHECK(linetable_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 0) == 11);
    CHECK(linetable_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 3) == 11);
    CHECK(linetable_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 4) == -1);
    CHECK(linetable_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 8) == 12);
    CHECK(linetable_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 12) == -1);
    CHECK(linetable_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, -1) == 10);
    /* a frame stopped where there is no line is on the line before; past the table, -1 */
    CHECK(linetable_frame_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 4) == 11);
    CHECK(linetable_frame_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 8) == 12);
    CHECK(linetable_frame_line(PYF_LINE_LINETABLE, tab, sizeof(tab), 10, 12) == -1);
    return 0;
}

int test_locations(void)
{
    const uint8_t tab[] = {
        0x80 | (13 << 3) | 0, 2,             /* no-columns, 1 unit, line +1 (svarint 2 -> +1) */
        0x80 | (11 << 3) | 1, 4,    9,       /* one-line form +1, 2 units, columns 4..9 */
        0x80 | (15 << 3) | 0,                /* no location, 1 unit */
        0x80 | (14 << 3) | 0, 3,    0, 1, 2, /* long form: line -1 (svarint 3), 1 unit */
        0x80 | (5 << 3) | 2,  0x11,          /* short form: same line, 3 units */
    };

    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 0) == 101);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 2) == 102);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 5) == 102);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 6) == -1);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 8) == 101);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 10) == 101);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 15) == 101);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 16) == -1);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, -2) == 100);
    CHECK(linetable_frame_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 6) == 102);
    CHECK(linetable_frame_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 100, 16) == -1);
    {
        /* no location first: the def line */
        const uint8_t first[] = {0x80 | (15 << 3) | 0, 0x80 | (13 << 3) | 0, 2};

        CHECK(linetable_frame_line(PYF_LINE_LOCATIONS, first, sizeof(first), 100, 0) == 100);
        CHECK(linetable_frame_line(PYF_LINE_LOCATIONS, first, sizeof(first), 100, 2) == 101);
    }
    return 0;
}

int test_linetable_hostile(void)
{
    /* Truncated varints, odd lengths, empty and NULL tables: an answer, no overread. */
    const uint8_t tab[] = {0x80 | (14 << 3), 0x7f};
    const uint8_t odd[] = {4};

    CHECK(linetable_line(PYF_LINE_LOCATIONS, tab, sizeof(tab), 1, 100) == -1);
    CHECK(linetable_line(PYF_LINE_LINETABLE, odd, sizeof(odd), 1, 0) == -1);
    CHECK(linetable_line(PYF_LINE_LNOTAB, odd, sizeof(odd), 7, 3) == 7);
    CHECK(linetable_line(PYF_LINE_LOCATIONS, NULL, 0, 7, 3) == -1);
    return 0;
}
