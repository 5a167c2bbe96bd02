/*
 * linecheck.c - checks linetable_line() against vectors that a CPython computed itself
 * (tests/functional/linevectors.py). Input, one code object per block:
 *   T <format> <first_line> <hex table>
 *   <byte offset> <line or -1>      (one per instruction)
 * Prints "N passed, M failed" (offsets) and the first mismatches; exit 1 on any mismatch.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linetable.h"

#define LINE_MAX_BYTES (4 << 20)

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    unsigned v;

    while (n < cap && sscanf(s + 2 * n, "%2x", &v) == 1)
        out[n++] = (uint8_t)v;
    return n;
}

int main(void)
{
    char *line = malloc(LINE_MAX_BYTES);
    uint8_t *tab = malloc(LINE_MAX_BYTES / 2);
    size_t n_tab = 0;
    int fmt = 0, first = 0;
    unsigned long passed = 0, failed = 0;

    if (!line || !tab)
        return 2;
    while (fgets(line, LINE_MAX_BYTES, stdin)) {
        long addr;
        int want, got;

        if (line[0] == 'T') {
            char *hex = malloc(strlen(line));
            if (!hex || sscanf(line, "T %d %d %s", &fmt, &first, hex) < 2)
                return 2;
            n_tab = line[strlen(line) - 2] == ' ' ? 0 : unhex(hex, tab, LINE_MAX_BYTES / 2);
            free(hex);
            continue;
        }
        if (sscanf(line, "%ld %d", &addr, &want) != 2)
            continue;
        got = linetable_line((enum pyf_line_format)fmt, tab, n_tab, first, addr);
        if (got == want) {
            passed++;
        } else if (failed++ < 10) {
            fprintf(stderr, "format %d first %d offset %ld: got %d, want %d\n", fmt, first, addr,
                    got, want);
        }
    }
    printf("%lu passed, %lu failed\n", passed, failed);
    free(line);
    free(tab);
    return failed != 0 || passed == 0;
}
