/*
 * ops.h - probectl's operations commands: `config` (read and change the daemon's settings
 * live, PUT /v1/config) and `memory` (an attached process's memory now, its peak and growth
 * per minute, and its threads by CPU, from the memory timeline).
 */
#ifndef PROBECTL_OPS_H
#define PROBECTL_OPS_H

int config_main(int argc, char **argv);
int memory_main(int argc, char **argv);
int status_main(int argc, char **argv);

#endif
