/*
 * cluster.h - a job's ranks on many nodes as one: `probectl cluster list|attach|detach|query`
 * fan one request out to every node's daemon (fanout.h) and print the answers together, each
 * row with its host; `probectl hang` reads every rank's stacks at one instant agreed across the
 * nodes and prints the ranks grouped by stack, the odd ones out first.
 *
 * Nodes: --hosts, --hostfile or SLURM_JOB_NODELIST (nodes.h); `hang` without them asks this
 * node's daemon only. A node that failed is named on stderr, and the exit status is 1.
 */
#ifndef PROBECTL_CLUSTER_H
#define PROBECTL_CLUSTER_H

int cluster_main(int argc, char **argv);
int hang_main(int argc, char **argv);

#endif
