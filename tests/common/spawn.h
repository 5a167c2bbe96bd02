/*
 * spawn.h - a real Python target for the C tests: started with its stdout on a pipe, waited
 * for until it prints its READY line (as the scripts in tests/targets do), left running for the
 * test to kill.
 */
#ifndef PROBED_TEST_SPAWN_H
#define PROBED_TEST_SPAWN_H

#include <sys/types.h>

/* @python runs @script; its pid once it printed READY, or -1 (it did not start, or ended). */
pid_t spawn_target(const char *python, const char *script);

#endif
