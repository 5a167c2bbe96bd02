/*
 * units.h - durations and sizes as people write them: "250ms", "30s", "5m", "2h", "7d",
 * "1h30m", "2m 30s", "0.5" (a bare number is seconds; units ns us ms s m min h d), "512M",
 * "1G" (a bare number is bytes). One parser for every option of probectl's and the daemon's,
 * the config file, the API's parameters and the query helper ago().
 * Failure: -1 for anything malformed or negative.
 */
#ifndef PROBED_UNITS_H
#define PROBED_UNITS_H

#include <stdint.h>

int64_t units_duration_ns(const char *s);
int64_t units_size_bytes(const char *s);

#endif
