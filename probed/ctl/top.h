/*
 * top.h - `probectl top PID`: the hottest functions of an attached process, live.
 *
 * Each refresh is one query over the stored samples of the last --window (so the totals and
 * the rows count the same samples): per function, the share of samples executing it (%Own)
 * and with it on the stack (%Total). On a terminal it is interactive (ncurses: q quits, o/t
 * sort by own or total, p pauses, i counts idle threads, g only the samples holding the GIL,
 * +/- widen or narrow the window); --once, or a pipe, prints one table (--format csv|json too).
 * Threads: one. Memory: one reply at a time. Failure: exit 1 after saying why (2: usage).
 */
#ifndef PROBECTL_TOP_H
#define PROBECTL_TOP_H

int top_main(int argc, char **argv);

#endif
