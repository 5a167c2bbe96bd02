/*
 * objrepr.h - Python's repr() of None/bool/int/float/str/bytes, from raw object contents.
 *
 * locals.c reads an object's bytes from the target; these functions turn them into the text
 * Python itself would print, bounded: every output is cut to the caller's buffer, long strings
 * end in "...", and every input, however corrupt, gives some text (never an overread).
 * Threads: any. Memory: none (caller's buffers).
 */
#ifndef PYF_OBJREPR_H
#define PYF_OBJREPR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Python's repr(float): the shortest digits that round-trip, "1.0", "1e+16", "inf", "nan". */
void objrepr_float(double v, char *buf, size_t size);

/* An int given as @n little-endian digits of @bits bits each (CPython's ob_digit). */
void objrepr_long(const uint32_t *digits, size_t n, unsigned bits, bool negative, char *buf,
                  size_t size);

/* A str: @n code points of @kind bytes each (1: latin-1, 2: UCS-2, 4: UCS-4), of which the
 * target holds @total; quoted and escaped like repr(), "..." after the quote when cut. */
void objrepr_str(const void *data, size_t n, unsigned kind, size_t total, char *buf, size_t size);

/* A bytes object: @n of its @total bytes. */
void objrepr_bytes(const uint8_t *data, size_t n, size_t total, char *buf, size_t size);

#endif
