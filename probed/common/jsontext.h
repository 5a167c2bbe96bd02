/*
 * jsontext.h - JSON as probed writes it: jansson's text with each real written as the fewest
 * digits that read back as the same double (Python's repr: 0.04, not jansson's
 * 0.040000000000000001), for the daemon's replies and probectl's output alike.
 * Threads: any. Memory: the text is the caller's (free). Failure: NULL (out of memory).
 */
#ifndef PROBED_JSONTEXT_H
#define PROBED_JSONTEXT_H

#include <jansson.h>
#include <stddef.h>

/* @v in the fewest digits that read back the same (%g's form: 20.9, 1e+300, nan). */
void jsontext_real(double v, char *buf, size_t len);

/* json_dumps(@doc, @flags), its reals rewritten as jsontext_real (still reals: 2.0, not 2). */
char *jsontext_dumps(const json_t *doc, size_t flags);

#endif
