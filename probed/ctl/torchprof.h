/*
 * torchprof.h - `probectl torch <pid> profile`: torch.profiler turned on in a running job for
 * some steps (or a duration) through the daemon (POST /v1/torch, action "profile"), then its
 * events read back from the tables (torch_profiles, torch_ops, gpu_kernels): a summary of
 * where the time went, and with -o a Chrome/Perfetto trace file built from the stored rows.
 *
 * Failure: messages on stderr; the exit status is probectl's (0, 1 failed, 2 usage). Ctrl-C or
 * the timeout cancels the profile in the job.
 */
#ifndef PROBECTL_TORCHPROF_H
#define PROBECTL_TORCHPROF_H

#include <jansson.h>

struct torch_profile_options {
    int steps;             /* steps to profile, or 0: */
    long long duration_ms; /* this long, in whole steps */
    long long timeout_ms;  /* how long to wait for it to start and end */
    const char *output;    /* Chrome trace file, or NULL */
    int top;               /* rows of each summary table */
};

int torch_profile(const char *socket, int pid, const struct torch_profile_options *o);

/* POST @body to /v1/torch, attaching @pid first when the daemon says it is not (and detaching
 * again when the request then fails): the reply, or NULL after printing why. */
json_t *torch_post_attaching(const char *socket, int pid, json_t *body);

/* `probectl torch <pid> memory`: the job's live GPU memory by allocating stack (POST /v1/torch,
 * action "memory"; table gpu_memory): the largest stacks, and with @output a flame graph
 * (@format: svg, folded or speedscope). */
int torch_memory(const char *socket, int pid, long long record_ms, const char *output,
                 const char *format, int top);

#endif
