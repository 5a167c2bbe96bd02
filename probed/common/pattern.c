/* pattern.c - see pattern.h. */
#define _GNU_SOURCE
#include "common/pattern.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define REPS_MAX 32768L /* RE_DUP_MAX is 32767: more is regcomp's error anyway */

/* Past a bracket expression ("[a-z]", "[]x]", "[[:digit:]]") starting at @p. */
static const char *skip_bracket(const char *p)
{
    p++;
    if (*p == '^')
        p++;
    if (*p == ']')
        p++;
    while (*p && *p != ']') {
        if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
            char kind = p[1];
            for (p += 2; *p && !(p[0] == kind && p[1] == ']'); p++)
                ;
            p += *p ? 2 : 0;
        } else {
            p++;
        }
    }
    return *p ? p + 1 : p;
}

/* "{m}", "{m,}", "{m,n}", "{,n}" at @p: the copies regcomp makes of the atom before (n, or m
 * and one starred copy), and past it into *@end; 0 when it is no repetition. */
static long repetition(const char *p, const char **end)
{
    long lo = -1, hi = -1;
    bool comma = false;

    for (p++; *p >= '0' && *p <= '9'; p++)
        lo = (lo < 0 ? 0 : lo) * 10 + (*p - '0') > REPS_MAX ? REPS_MAX
                                                            : (lo < 0 ? 0 : lo) * 10 + (*p - '0');
    if (*p == ',') {
        comma = true;
        for (p++; *p >= '0' && *p <= '9'; p++)
            hi = (hi < 0 ? 0 : hi) * 10 + (*p - '0') > REPS_MAX
                     ? REPS_MAX
                     : (hi < 0 ? 0 : hi) * 10 + (*p - '0');
    }
    if (*p != '}' || (lo < 0 && hi < 0))
        return 0;
    *end = p + 1;
    if (!comma)
        return lo;
    return hi >= 0 ? hi : lo + 1;
}

/* The nodes of the sequence at *@pp up to its end or the ')' closing its group, repetitions
 * unrolled; -1 past PATTERN_NODES_MAX or at a back-reference (*@why says). */
static long unrolled(const char **pp, int depth, char *why, size_t why_size)
{
    const char *p = *pp, *end;
    long total = 0, last = 0; /* the nodes of the atom a repetition applies to */

    while (*p && !(*p == ')' && depth > 0)) {
        long reps, add;

        if (*p == '(') {
            p++;
            if ((last = unrolled(&p, depth + 1, why, why_size)) < 0)
                return -1;
            add = ++last;
            if (*p == ')')
                p++;
        } else if (*p == '[') {
            p = skip_bracket(p);
            add = last = 1;
        } else if (*p == '{' && (reps = repetition(p, &end)) > 0) {
            p = end;
            add = last * (reps - 1); /* the atom was counted once already */
            last *= reps;
        } else if (*p == '\\' && p[1] >= '1' && p[1] <= '9') {
            snprintf(why, why_size, "back-references (\\%c) are not taken", p[1]);
            return -1;
        } else if (*p == '\\' && p[1]) {
            p += 2;
            add = last = 1;
        } else if (*p == '+') { /* a+ is a a*: the atom copied (a++++ doubles it each time) */
            p++;
            add = last + 1;
            last = 2 * last + 1;
        } else if (*p == '*' || *p == '?' || *p == '|') {
            p++;
            add = 1; /* an operator: one node; the atom it repeats is not copied */
        } else {
            p++;
            add = last = 1;
        }
        total += add;
        if (total > PATTERN_NODES_MAX || last > PATTERN_NODES_MAX) {
            snprintf(why, why_size,
                     "more than %d parts once its counted repetitions are unrolled (nested"
                     " {m,n} multiply: write fewer)",
                     PATTERN_NODES_MAX);
            return -1;
        }
    }
    *pp = p;
    return total;
}

int pattern_check(const char *re, char *why, size_t why_size)
{
    const char *p = re;

    if (strlen(re) >= PATTERN_BYTES_MAX) {
        snprintf(why, why_size, "a pattern is under %d bytes", PATTERN_BYTES_MAX);
        return -EINVAL;
    }
    while (*p) { /* a stray ')' (regcomp's error to name) does not end the measure */
        if (unrolled(&p, 0, why, why_size) < 0)
            return -EINVAL;
        if (*p == ')')
            p++;
    }
    return 0;
}

int pattern_compile(regex_t *ret, const char *re, char *why, size_t why_size)
{
    int rc;

    if (pattern_check(re, why, why_size) < 0)
        return -EINVAL;
    rc = regcomp(ret, re, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char text[128];
        regerror(rc, ret, text, sizeof(text));
        snprintf(why, why_size, "not a pattern: %s", text);
        return -EINVAL;
    }
    return 0;
}
