/*
 * crashes.h - `probectl crashes [PID] [--since 1h] [--json]`: how attached processes ended
 * (the crashes table: exit status, signal, the OOM killer), the kernel's lines about it, and
 * each thread's last sampled stack, and what `catch` saw as they failed (the traceback with
 * locals, every thread's stacks at a fatal signal). Only the caller's processes, as every table.
 *
 * `probectl catch PID [on|off] [--no-signals]`: turns that recording on (POST /v1/catch),
 * attaching the process first when it is not.
 */
#ifndef PROBECTL_CRASHES_H
#define PROBECTL_CRASHES_H

int crashes_main(int argc, char **argv);
int catch_main(int argc, char **argv);

#endif
