/*
 * eval.h - probectl eval and probectl repl (see eval.c): Python code run inside a live
 * process through the daemon.
 */
#ifndef PROBECTL_EVAL_H
#define PROBECTL_EVAL_H

int eval_main(int argc, char **argv);
int repl_main(int argc, char **argv);

#endif
