/*
 * debug.h - `probectl pause PID [--thread TID] [--listen HOST:PORT] [--dap]` and
 * `probectl debug PID`: a debugger in a live process, through the daemon (POST /v1/debug,
 * docs/debug.md). `debug` is the terminal's side of the pdb session: pdb's output is shown,
 * its prompt becomes the line editor's (libedit: editing and history), each line goes to the
 * thread; while the thread runs, its output is read until it stops again, and Ctrl-C stops
 * it. Ctrl-D leaves the session and the process goes on.
 */
#ifndef PROBECTL_DEBUG_H
#define PROBECTL_DEBUG_H

int pause_main(int argc, char **argv);
int debug_main(int argc, char **argv);

#endif
