/*
 * fake_nvml.c - a stand-in for NVIDIA's libnvidia-ml.so.1 for the GPU tests (test_gpu.py), on
 * machines without a GPU: the entry points probed calls, with NVML's C ABI, answering fixed
 * values, so that the daemon's real dlopen path, its readings, tables and /metrics are tested.
 *
 * Two GPUs: 0 a whole "NVIDIA H200", 1 in MIG mode with two MIG devices (which, as on real
 * hardware, have no utilisation, power or clocks of their own: NOT_SUPPORTED).
 * Environment (of the daemon that loads it):
 *   FAKE_NVML_PROCS  a file of "pid device mig bytes sm_util" lines: the processes on the GPUs
 *                    (mig -1: the whole GPU; sm_util -1: no utilisation sample)
 *   FAKE_NVML_XID    a file "serial xid": each new serial raises that Xid on GPU 0, once
 *   FAKE_NVML_INIT   nvmlInit's return code (9: the kernel driver is not loaded)
 *   FAKE_NVML_GPUS   how many GPUs the driver sees (default 2)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK 0
#define NOT_SUPPORTED 3
#define INVALID_ARGUMENT 2
#define INSUFFICIENT_SIZE 7
#define NOT_FOUND 6
#define TIMEOUT 10

struct fake_dev {
    const char *name, *uuid;
    int index, mig; /* mig -1: a whole GPU */
    unsigned long long total, used;
};

static struct fake_dev devs[] = {
    {"NVIDIA H200", "GPU-11111111-2222-3333-4444-555555555555", 0, -1, 150754820096ULL,
     86973087744ULL},
    {"NVIDIA H200", "GPU-66666666-7777-8888-9999-000000000000", 1, -1, 150754820096ULL,
     10737418240ULL},
    {"NVIDIA H200 MIG 3g.71gb", "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 1, 0, 76235669504ULL,
     8589934592ULL},
    {"NVIDIA H200 MIG 3g.71gb", "MIG-ffffffff-1111-2222-3333-444444444444", 1, 1, 76235669504ULL,
     2147483648ULL},
};

struct mem {
    unsigned long long total, free, used;
};
struct util {
    unsigned int gpu, memory;
};
struct proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gi, ci;
};
struct proc_util {
    unsigned int pid;
    unsigned long long ts;
    unsigned int sm, mem, enc, dec;
};
struct event {
    void *device;
    unsigned long long type, data;
    unsigned int gi, ci;
};

static int xid_serial_seen = -1;

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

int nvmlInit_v2(void)
{
    return env_int("FAKE_NVML_INIT", OK);
}

int nvmlShutdown(void)
{
    return OK;
}

const char *nvmlErrorString(int r)
{
    switch (r) {
    case 9:
        return "Driver Not Loaded";
    case NOT_SUPPORTED:
        return "Not Supported";
    default:
        return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *buf, unsigned int len)
{
    snprintf(buf, len, "570.86.15");
    return OK;
}

int nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = (unsigned int)env_int("FAKE_NVML_GPUS", 2);
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h)
{
    if (i > 1)
        return INVALID_ARGUMENT;
    *h = &devs[i];
    return OK;
}

static struct fake_dev *dev(void *h)
{
    return (struct fake_dev *)h;
}

int nvmlDeviceGetName(void *h, char *buf, unsigned int len)
{
    snprintf(buf, len, "%s", dev(h)->name);
    return OK;
}

int nvmlDeviceGetUUID(void *h, char *buf, unsigned int len)
{
    snprintf(buf, len, "%s", dev(h)->uuid);
    return OK;
}

/* As the real driver: v1's used includes what the driver reserves on a whole GPU (RESERVED),
 * v2's (nvidia-smi's figure, the one expected) does not; MIG devices here answer v1 only. */
#define RESERVED (512ULL << 20)

int nvmlDeviceGetMemoryInfo(void *h, struct mem *m)
{
    m->total = dev(h)->total;
    m->used = dev(h)->used + (dev(h)->mig < 0 ? RESERVED : 0);
    m->free = m->total - m->used;
    return OK;
}

struct mem_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

int nvmlDeviceGetMemoryInfo_v2(void *h, struct mem_v2 *m)
{
    if (m->version != ((unsigned int)sizeof(*m) | (2u << 24)))
        return INVALID_ARGUMENT;
    if (dev(h)->mig >= 0)
        return NOT_SUPPORTED;
    m->total = dev(h)->total;
    m->reserved = RESERVED;
    m->used = dev(h)->used;
    m->free = m->total - m->used - m->reserved;
    return OK;
}

int nvmlDeviceGetUtilizationRates(void *h, struct util *u)
{
    if (dev(h)->mig >= 0)
        return NOT_SUPPORTED;
    u->gpu = dev(h)->index == 0 ? 87 : 12;
    u->memory = dev(h)->index == 0 ? 41 : 3;
    return OK;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw)
{
    if (dev(h)->mig >= 0)
        return NOT_SUPPORTED;
    *mw = dev(h)->index == 0 ? 612345 : 98765;
    return OK;
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *c)
{
    if (dev(h)->mig >= 0 || sensor != 0)
        return NOT_SUPPORTED;
    *c = dev(h)->index == 0 ? 61 : 38;
    return OK;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned int *mhz)
{
    if (dev(h)->mig >= 0)
        return NOT_SUPPORTED;
    *mhz = type == 1 ? 1980 : type == 2 ? 3201 : 0;
    return type == 1 || type == 2 ? OK : NOT_SUPPORTED;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *r)
{
    if (dev(h)->mig >= 0)
        return NOT_SUPPORTED;
    *r = dev(h)->index == 0 ? 0x4 : 0x1; /* SW power cap; idle */
    return OK;
}

int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *n)
{
    if (dev(h)->mig >= 0 || counter != 0)
        return NOT_SUPPORTED;
    *n = dev(h)->index == 0 ? (type == 0 ? 3 : 0) : 0;
    return OK;
}

int nvmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending)
{
    if (dev(h)->mig >= 0)
        return INVALID_ARGUMENT;
    *current = *pending = dev(h)->index == 1;
    return OK;
}

int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned int *n)
{
    *n = dev(h)->index == 1 ? 7 : 0; /* 7 slots, 2 created */
    return OK;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned int i, void **mig)
{
    if (dev(h)->index != 1 || i > 1)
        return NOT_FOUND;
    *mig = &devs[2 + i];
    return OK;
}

/* The FAKE_NVML_PROCS lines of device @h: (pid, bytes, sm_util) each. */
static unsigned int procs_of(void *h, unsigned int *pids, unsigned long long *bytes, int *sm,
                             unsigned int max)
{
    const char *path = getenv("FAKE_NVML_PROCS");
    unsigned int n = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    int pid, index, mig, util;
    unsigned long long b;

    while (f && fscanf(f, "%d %d %d %llu %d", &pid, &index, &mig, &b, &util) == 5)
        if (index == dev(h)->index && mig == dev(h)->mig && n < max) {
            pids[n] = (unsigned int)pid;
            bytes[n] = b;
            sm[n] = util;
            n++;
        }
    if (f)
        fclose(f);
    return n;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *count, struct proc *out)
{
    unsigned int pids[64];
    unsigned long long bytes[64];
    int sm[64];
    unsigned int n = procs_of(h, pids, bytes, sm, 64);

    if (n > *count) {
        *count = n;
        return INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++)
        out[i] =
            (struct proc){.pid = pids[i], .used = bytes[i], .gi = 0xffffffff, .ci = 0xffffffff};
    *count = n;
    return OK;
}

int nvmlDeviceGetProcessUtilization(void *h, struct proc_util *out, unsigned int *count,
                                    unsigned long long last_seen)
{
    unsigned int pids[64], k = 0;
    unsigned long long bytes[64];
    int sm[64];
    unsigned int n = procs_of(h, pids, bytes, sm, 64);

    (void)last_seen;
    for (unsigned int i = 0; i < n && k < *count; i++)
        if (sm[i] >= 0)
            out[k++] = (struct proc_util){.pid = pids[i], .ts = 1000 + k, .sm = (unsigned)sm[i]};
    *count = k;
    return k ? OK : NOT_FOUND;
}

int nvmlEventSetCreate(void **set)
{
    static int the_set;
    *set = &the_set;
    return OK;
}

int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set)
{
    (void)h, (void)set;
    return types == 0x8 ? OK : NOT_SUPPORTED;
}

int nvmlEventSetWait_v2(void *set, struct event *e, unsigned int timeout_ms)
{
    const char *path = getenv("FAKE_NVML_XID");
    FILE *f = path ? fopen(path, "r") : NULL;
    int serial = -1, xid = 0;

    (void)set, (void)timeout_ms;
    if (f) {
        if (fscanf(f, "%d %d", &serial, &xid) != 2)
            serial = -1;
        fclose(f);
    }
    if (serial < 0 || serial == xid_serial_seen)
        return TIMEOUT;
    xid_serial_seen = serial;
    e->device = &devs[0];
    e->type = 0x8;
    e->data = (unsigned long long)xid;
    e->gi = e->ci = 0xffffffff;
    return OK;
}

int nvmlEventSetFree(void *set)
{
    (void)set;
    return OK;
}
