/*
 * torch.h - `probectl torch <pid> on|off|summary`: the torch trace of a PyTorch job
 * (POST /v1/torch), and its summary from the tables: the slowest modules, the step time trend
 * and the tracked variables.
 */
#ifndef PROBECTL_TORCH_H
#define PROBECTL_TORCH_H

int torch_main(int argc, char **argv);

#endif
