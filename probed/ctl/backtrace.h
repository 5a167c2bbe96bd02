/*
 * backtrace.h - `probectl backtrace <pid>`: every thread's Python stack, like py-spy dump.
 *
 * Reads the target directly with libpyframes (root or the target's owner). Text output is
 * for people; --json output is the stable format documented in docs/backtrace.md.
 * Failure: a message on stderr and a non-zero return (the exit status of probectl).
 */
#ifndef PROBECTL_BACKTRACE_H
#define PROBECTL_BACKTRACE_H

#include <jansson.h>

int backtrace_main(int argc, char **argv);

/* Prints the backtrace document @doc (dump.h) as text, as `backtrace` does. */
void backtrace_print_text(json_t *doc);

#endif
