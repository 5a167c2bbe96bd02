/*
 * record.h - `probectl record` and `probectl run`: sample processes for a while and write
 * their profile in one step, as py-spy record does.
 *
 * record attaches each pid (one attached already is kept as it is) or runs a command attached
 * from its start, waits for --duration, Ctrl-C or their end, detaches what it attached, waits
 * for the daemon's writer to have stored the window, and writes the window's samples: one
 * process as the daemon draws it (/v1/flamegraph, every format), several merged here from
 * /v1/query rows (flameout.h's sums, common/flame.h's timeline). `run` is record of a command
 * that writes a profile only when given -o, and exits with the command's status.
 * Threads: one. Memory: the window's rows, freed before it returns.
 * Failure: exit 1 after saying why on stderr (2: usage).
 */
#ifndef PROBECTL_RECORD_H
#define PROBECTL_RECORD_H

int record_main(int argc, char **argv);
int run_main(int argc, char **argv);

#endif
