/* units.c - see units.h. */
#include "common/units.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One term of a duration: a number (digits, an optional fraction) and its unit, from @s; the
 * nanoseconds, and *@end past it; -1 when @s starts with none. A bare number (no unit) is
 * seconds, and only at the end. */
static double duration_term(const char *s, const char **end, bool *bare)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {/* longest first: "ms" before "m", "min" before "m" */
                 {"min", 60e9}, {"ms", 1e6}, {"us", 1e3},   {"ns", 1},
                 {"s", 1e9},    {"m", 60e9}, {"h", 3600e9}, {"d", 86400e9}};
    const char *p = s;
    double v;
    char *num_end;

    /* digits, then an optional '.' and digits: not strtod's hex, exponents, inf or sign */
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    if (p == s || (p == s + 1 && *s == '.'))
        return -1;
    v = strtod(s, &num_end);
    if (num_end != p)
        return -1;
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        size_t n = strlen(units[i].unit);

        if (strncmp(p, units[i].unit, n) == 0 && !(p[n] >= 'a' && p[n] <= 'z')) {
            *end = p + n;
            *bare = false;
            return v * units[i].ns;
        }
    }
    if (*p)
        return -1; /* a unit we do not know: 5x */
    *end = p;
    *bare = true;
    return v * 1e9; /* a bare number: seconds */
}

int64_t units_duration_ns(const char *s)
{
    const char *p = s, *end;
    double total = 0, term;
    int terms = 0;
    bool bare;

    if (!s || !*s)
        return -1;
    /* "1h30m", "2m 30s": terms one after the other; a bare number only alone ("90") */
    while (*p) {
        term = duration_term(p, &end, &bare);
        if (term < 0 || (bare && terms > 0))
            return -1;
        total += term;
        terms++;
        for (p = end; *p == ' '; p++)
            ;
    }
    return total < 9e18 ? (int64_t)total : -1;
}

int64_t units_size_bytes(const char *s)
{
    const char *units = "KMGT", *u;
    char *end;
    double v;

    if (!s || !*s)
        return -1;
    v = strtod(s, &end);
    if (end == s || !(v >= 0) || v >= 9e18)
        return -1;
    if (!*end)
        return (int64_t)v;
    u = strchr(units, *end);
    if (!u || (end[1] && strcmp(end + 1, "B") != 0 && strcmp(end + 1, "iB") != 0))
        return -1;
    for (const char *p = units; p <= u; p++)
        v *= 1024;
    return v < 9e18 ? (int64_t)v : -1;
}
