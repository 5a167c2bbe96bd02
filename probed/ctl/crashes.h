/*
 * crashes.h - `probectl crashes [PID] [--since 1h] [--json]`: how attached processes ended
 * (the crashes table: exit status, signal, the OOM killer), the kernel's lines about it, and
 * each thread's last sampled stack. Only the caller's processes, as every table.
 */
#ifndef PROBECTL_CRASHES_H
#define PROBECTL_CRASHES_H

int crashes_main(int argc, char **argv);

#endif
