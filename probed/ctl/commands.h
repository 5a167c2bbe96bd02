/*
 * commands.h - the probectl commands that talk to the daemon: attach, detach, list, query,
 * flamegraph, run, top. Each parses its options, makes one API call (client.h) and prints the
 * reply; an error reply is printed on stderr and is a non-zero exit status.
 */
#ifndef PROBECTL_COMMANDS_H
#define PROBECTL_COMMANDS_H

int attach_main(int argc, char **argv);
int detach_main(int argc, char **argv);
int list_main(int argc, char **argv);
int query_main(int argc, char **argv);
int flamegraph_main(int argc, char **argv);

#include <jansson.h>
/* A query's result (its "columns" and "rows") as an aligned table, or as CSV. */

#endif
