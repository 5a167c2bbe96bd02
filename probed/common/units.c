/* units.c - see units.h. */
#include "common/units.h"

#include <stdlib.h>
#include <string.h>

int64_t units_duration_ns(const char *s)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {{"", 1e9},     {"s", 1e9},    {"ms", 1e6},   {"m", 60e9},
                 {"min", 60e9}, {"h", 3600e9}, {"d", 86400e9}};
    char *end;
    double v;

    if (!s || !*s)
        return -1;
    v = strtod(s, &end);
    if (end == s || !(v >= 0)) /* also NaN */
        return -1;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].unit) == 0)
            return v * units[i].ns < 9e18 ? (int64_t)(v * units[i].ns) : -1; /* also inf */
    return -1;
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
