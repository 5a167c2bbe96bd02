/*
 * unit.h - the unit-test harness: CHECK() fails the current case with file:line.
 * Each case is `int test_x(void)` returning 0 on success; unit_main.c lists them.
 */
#ifndef PROBED_UNIT_H
#define PROBED_UNIT_H

#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *got_ = (got), *want_ = (want);                                                 \
        if (strcmp(got_, want_) != 0) {                                                            \
            fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__, got_, want_);  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#endif
