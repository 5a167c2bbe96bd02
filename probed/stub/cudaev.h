/*
 * cudaev.h - CUDA events for the torch trace's device time, through the driver the target has
 * already loaded (libcuda.so.1, found among its loaded objects: never loaded by us).
 *
 * A module's device time is the time between two events recorded on the current stream as its
 * forward (or backward) began and ended: when the GPU reached each mark, so the span covers the
 * kernels the module launched and any wait of the stream between them. Events come from a pool,
 * recorded with cuEventRecord (about a microsecond), and are resolved when the records are
 * drained: cuEventQuery says whether the GPU has passed the end mark, cuEventElapsedTime gives
 * the span. Never a synchronize: a span the GPU has not reached yet waits for a later drain.
 *
 * Threads: cudaev_record runs on the thread running the module (the training thread, or
 * autograd's device threads), the others on the stub's drain thread; the pool has its own
 * mutex. Events are created in batches on a recording thread, in the context current there
 * (torch's primary context for the device); the drain thread makes that context current for
 * its calls (cudaev_enter/leave), as a thread of the job's own would.
 * Memory: at most CUDAEV_MAX events, created as needed and destroyed by cudaev_close.
 * Failure: no recording when the pool is empty or the driver refuses (counted, with the
 * driver's error code), the module's row then has no device time; nothing raises.
 */
#ifndef PROBED_STUB_CUDAEV_H
#define PROBED_STUB_CUDAEV_H

#include <stddef.h>
#include <stdint.h>

#define CUDAEV_MAX 65536 /* events at once: records wait at most a drain (about a second) */

struct cudaev;

struct cudaev_stats {
    int64_t recorded;   /* events recorded */
    int64_t empty;      /* not recorded: every event was in use */
    int64_t errors;     /* the driver refused a call */
    int last_error;     /* its CUresult, or 0 */
    int64_t unresolved; /* spans whose end the GPU had not reached 5 s after the host's */
};

/* Finds the loaded libcuda.so.1 and its functions. 0, or -1 with why (a sentence) in @why. */
int cudaev_open(struct cudaev **ret, char *why, size_t why_len);
void cudaev_close(struct cudaev *ce);

/* Records an event on @stream (a cudaStream_t; 0: the default stream) now: its index, or -1
 * (counted). */
int32_t cudaev_record(struct cudaev *ce, uint64_t stream);
/* Puts an event back in the pool (-1: none). */
void cudaev_release(struct cudaev *ce, int32_t ev);

/* Around cudaev_elapsed calls on a thread of our own: makes the recording context current. */
void cudaev_enter(struct cudaev *ce);
void cudaev_leave(struct cudaev *ce);
/* The time between events @a and @b: 1 with *ret_ns, 0 when the GPU has not reached @b yet,
 * -1 when the driver cannot say (counted). */
int cudaev_elapsed(struct cudaev *ce, int32_t a, int32_t b, int64_t *ret_ns);

void cudaev_count_unresolved(struct cudaev *ce);
struct cudaev_stats cudaev_stats(struct cudaev *ce);

#endif
