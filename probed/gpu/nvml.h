/*
 * nvml.h - the GPUs of this machine through NVIDIA's management library (libnvidia-ml.so.1),
 * loaded with dlopen at run time: probed builds and runs without it, and a machine without a
 * driver has no GPU rows and one line saying why.
 *
 * A reading is what `nvidia-smi` and DCGM's exporter show: per GPU (and per MIG device, a row
 * of its own) utilisation, memory used and total, power, temperature, SM and memory clocks,
 * throttle reasons and ECC error counts; the processes using each GPU with their memory (and SM
 * utilisation where the driver samples it); and the Xid errors the driver raised since the
 * previous reading (an NVML event set, polled without waiting).
 *
 * Where the library is looked for: the path probed.conf's `nvml` names, else the loader's own
 * search ("libnvidia-ml.so.1"), else the driver's usual folders (/usr/local/nvidia/lib64, where
 * GPU containers mount it, and others: nvml.c). The daemon is root: a file it loads from a
 * path is opened once with O_NOFOLLOW after its real path was checked to be root's, folder by
 * folder (none writable by another user unless sticky), and loaded through that descriptor.
 *
 * Threads: the meter's thread only (nvml__read is not reentrant; NVML itself is thread-safe).
 * Memory: nvml_open allocates the handle; a reading fills the caller's fixed-size snapshot and
 * allocates nothing. Failure: -errno and @err; a field the driver does not give for a device
 * (NVML_ERROR_NOT_SUPPORTED: MIG devices have no power or clocks) is -1, not a failure.
 */
#ifndef PROBED_GPU_NVML_H
#define PROBED_GPU_NVML_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

#define GPU_DEVICES_MAX 64 /* GPUs and MIG devices read; more are left out and counted */
#define GPU_PROCS_MAX 512  /* processes on all of them */
#define GPU_XIDS_MAX 64    /* Xid errors per reading */

/* One GPU, or one MIG device of a GPU. Numbers are -1 where the driver does not say. */
struct gpu_device {
    char uuid[96]; /* "GPU-..." or "MIG-..." */
    char name[96]; /* "NVIDIA H200" */
    int32_t index; /* NVML's index of the GPU (a MIG device's: of its GPU) */
    int32_t mig;   /* -1: the whole GPU; else the MIG device's index on that GPU */
    int64_t util_pct, mem_util_pct;
    int64_t mem_used_bytes, mem_total_bytes;
    int64_t power_mw, temp_c, sm_clock_mhz, mem_clock_mhz;
    int64_t throttle_reasons;               /* NVML's bit mask (nvmlClocksThrottleReason*) */
    int64_t ecc_corrected, ecc_uncorrected; /* volatile: since the driver loaded */
};

/* A process using a device. */
struct gpu_process {
    pid_t pid;      /* as the driver knows it: the host's pid namespace */
    int32_t device; /* into gpu_snapshot.devices */
    int64_t mem_used_bytes;
    int64_t sm_util_pct; /* -1: not sampled by the driver */
};

/* An Xid error: the driver's code for a GPU fault (13 graphics exception, 48 double-bit ECC,
 * 79 fallen off the bus ...). */
struct gpu_xid {
    int32_t device; /* into gpu_snapshot.devices; -1: a device not in it */
    int64_t xid;
};

struct gpu_snapshot {
    int64_t ts_ns; /* CLOCK_REALTIME of the reading */
    size_t n_devices, n_procs, n_xids;
    size_t devices_left_out, procs_left_out, xids_left_out;
    struct gpu_device devices[GPU_DEVICES_MAX];
    struct gpu_process procs[GPU_PROCS_MAX];
    struct gpu_xid xids[GPU_XIDS_MAX];
};

struct nvml;

/* Loads and initialises NVML from @path ("": the search above). -ENOENT: no library found
 * (@err lists where it looked); -EPERM: a file that is not safely root's; -ENODEV: the library
 * loaded but found no driver or no GPU; -ENOEXEC: it lacks an entry point probed calls. */
int nvml_open(const char *path, struct nvml **ret, struct errbuf *err);
void nvml_free(struct nvml *n); /* NULL is a no-op */

/* The driver's version and the file loaded (for /v1/status). */
const char *nvml__driver(const struct nvml *n);
const char *nvml__path(const struct nvml *n);

/* A reading of every device into @s. -EIO with @err when NVML failed as a whole (a GPU lost,
 * the driver unloaded): the snapshot is then empty. */
int nvml__read(struct nvml *n, struct gpu_snapshot *s, struct errbuf *err);

#endif
