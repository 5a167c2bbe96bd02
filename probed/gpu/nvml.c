/* nvml.c - see nvml.h. The types and constants below are NVML's C ABI (nvml.h, stable since
 * driver 450): probed has no build dependency on CUDA. */
#define _GNU_SOURCE
#include "gpu/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10

#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_MEMORY_ERROR_TYPE_CORRECTED 0
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
#define NVML_DEVICE_MIG_ENABLE 1
#define NVML_EVENT_XID_CRITICAL_ERROR 0x8ULL

#define NVML_PROC_UTIL_MAX 256 /* per-process utilisation samples read per device */
#define NVML_EVENTS_PER_READ GPU_XIDS_MAX

typedef void *nvml_device; /* nvmlDevice_t */
typedef void *nvml_event_set;

struct nvml_memory {
    unsigned long long total, free, used;
};

/* nvmlMemory_v2_t: its used leaves out what the driver reserves (nvidia-smi's and DCGM's
 * figure); v1's includes it (615 MB more on an H200 with driver 580). */
struct nvml_memory_v2 {
    unsigned int version; /* NVML_STRUCT_VERSION(Memory, 2) */
    unsigned long long total, reserved, free, used;
};
#define NVML_MEMORY_V2 ((unsigned int)sizeof(struct nvml_memory_v2) | (2u << 24))

struct nvml_utilization {
    unsigned int gpu, memory;
};

struct nvml_process_info { /* nvmlProcessInfo_v2_t, the layout _v2 and _v3 fill */
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
};

struct nvml_process_info_v1 {
    unsigned int pid;
    unsigned long long used_gpu_memory;
};

struct nvml_proc_util { /* nvmlProcessUtilizationSample_t */
    unsigned int pid;
    unsigned long long timestamp_us;
    unsigned int sm_util, mem_util, enc_util, dec_util;
};

struct nvml_event_data { /* nvmlEventData_t; drivers before 450 fill the first three only */
    nvml_device device;
    unsigned long long event_type, event_data;
    unsigned int gpu_instance_id, compute_instance_id;
};

/* The entry points probed calls; the first group is required, the others may be NULL (an old
 * driver): their fields stay -1. */
struct nvml_fns {
    int (*init)(void);
    int (*shutdown)(void);
    const char *(*error_string)(int);
    int (*count)(unsigned int *);
    int (*handle_by_index)(unsigned int, nvml_device *);
    int (*name)(nvml_device, char *, unsigned int);
    int (*uuid)(nvml_device, char *, unsigned int);
    int (*memory)(nvml_device, struct nvml_memory *);
    int (*memory_v2)(nvml_device, struct nvml_memory_v2 *); /* drivers from 510 on */

    int (*driver_version)(char *, unsigned int);
    int (*utilization)(nvml_device, struct nvml_utilization *);
    int (*power)(nvml_device, unsigned int *);
    int (*temperature)(nvml_device, int, unsigned int *);
    int (*clock)(nvml_device, int, unsigned int *);
    int (*throttle)(nvml_device, unsigned long long *);
    int (*ecc)(nvml_device, int, int, unsigned long long *);
    int (*mig_mode)(nvml_device, unsigned int *, unsigned int *);
    int (*mig_count)(nvml_device, unsigned int *);
    int (*mig_handle)(nvml_device, unsigned int, nvml_device *);
    int (*procs)(nvml_device, unsigned int *, struct nvml_process_info *);
    int (*procs_v1)(nvml_device, unsigned int *, struct nvml_process_info_v1 *);
    int (*proc_util)(nvml_device, struct nvml_proc_util *, unsigned int *, unsigned long long);
    int (*event_set_create)(nvml_event_set *);
    int (*register_events)(nvml_device, unsigned long long, nvml_event_set);
    int (*event_wait)(nvml_event_set, struct nvml_event_data *, unsigned int);
    int (*event_set_free)(nvml_event_set);
};

struct nvml {
    void *lib;
    struct nvml_fns f;
    char path[PATH_MAX];
    char driver[80];
    nvml_event_set events;                /* NULL: Xid errors are not watched (no support) */
    nvml_device handles[GPU_DEVICES_MAX]; /* of the last reading's devices */
    unsigned long long util_seen_us[GPU_DEVICES_MAX]; /* per GPU index: the newest sample read */
    struct nvml_process_info procs[GPU_PROCS_MAX];
    struct nvml_proc_util utils[NVML_PROC_UTIL_MAX];
};

/* Folders where drivers put the library when the loader does not know it: GPU containers
 * (nvidia-container-toolkit, Kubernetes' device plugin), the GPU operator's driver container,
 * Debian's and RHEL's packages. */
static const char *const nvml_dirs[] = {
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib64/nvidia",
    "/usr/lib/nvidia",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
};

/* Whether @real (a resolved absolute path) is root's: the file, and every folder above it,
 * owned by root and writable by no one else (a sticky folder, /tmp, keeps its entries its
 * owners'). */
static int check_root_owned(const char *real, struct errbuf *err)
{
    char dir[PATH_MAX];
    struct stat st;

    snprintf(dir, sizeof(dir), "%s", real);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
        const char *d = dir[0] ? dir : "/";
        if (stat(d, &st) < 0)
            return errbuf_set(err, -errno, "%s: %s", d, strerror(errno));
        if (st.st_uid != 0 || ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)))
            return errbuf_set(err, -EPERM,
                              "%s: its folder %s is not root's alone (owner uid %u, mode %o):"
                              " probed loads no library another user could replace",
                              real, d, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        if (!dir[0])
            break;
    }
    return 0;
}

/* dlopen() of the file at @path, opened once (O_NOFOLLOW, on its real path) after the checks
 * above and loaded through that descriptor: what was checked is what is loaded. */
static void *load_file(const char *path, struct errbuf *err)
{
    char real[PATH_MAX], via[64];
    struct stat st;
    void *lib;
    int fd;

    if (!realpath(path, real)) {
        errbuf_set(err, -errno, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (check_root_owned(real, err) < 0)
        return NULL;
    fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        errbuf_set(err, -errno, "%s: %s", real, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
        errbuf_set(err, -EPERM, "%s: not a regular file root alone may write", real);
        close(fd);
        return NULL;
    }
    snprintf(via, sizeof(via), "/proc/self/fd/%d", fd);
    lib = dlopen(via, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        errbuf_set(err, -ENOEXEC, "%s: %s", real, dlerror());
    close(fd);
    return lib;
}

/* The library: @path, or the loader's search, or the driver folders. */
static void *find_library(const char *path, char *found, size_t size, struct errbuf *err)
{
    char tried[512] = "", candidate[PATH_MAX];
    void *lib;
    size_t len = 0;

    if (path[0]) {
        snprintf(found, size, "%s", path);
        return load_file(path, err);
    }
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        snprintf(found, size, "libnvidia-ml.so.1 (the loader's path)");
        return lib;
    }
    for (size_t i = 0; i < sizeof(nvml_dirs) / sizeof(nvml_dirs[0]); i++) {
        struct errbuf why;
        snprintf(candidate, sizeof(candidate), "%s/libnvidia-ml.so.1", nvml_dirs[i]);
        if (access(candidate, F_OK) < 0) {
            int w =
                snprintf(tried + len, sizeof(tried) - len, "%s%s", len ? ", " : "", nvml_dirs[i]);
            len = w > 0 && (size_t)w < sizeof(tried) - len ? len + (size_t)w : len;
            continue;
        }
        lib = load_file(candidate, &why);
        if (lib) {
            snprintf(found, size, "%s", candidate);
            return lib;
        }
        errbuf_set(err, -EPERM, "%s", why.msg); /* found, but not loaded: that is the news */
        return NULL;
    }
    errbuf_set(err, -ENOENT,
               "no NVIDIA driver: libnvidia-ml.so.1 is not on the loader's path nor in %s"
               " (set nvml in probed.conf to where it is)",
               tried);
    return NULL;
}

/* Symbol @a of the library, else @b (NULL: none). */
static void *sym(void *lib, const char *a, const char *b)
{
    void *p = dlsym(lib, a);
    return p || !b ? p : dlsym(lib, b);
}

/* f->@field from the library's symbol @a, else @b */
#define BIND(field, a, b) (f->field = (__typeof__(f->field))sym(l, a, b))

static int bind_fns(struct nvml *n, struct errbuf *err)
{
    struct nvml_fns *f = &n->f;
    void *l = n->lib;

    BIND(init, "nvmlInit_v2", "nvmlInit");
    BIND(shutdown, "nvmlShutdown", NULL);
    BIND(error_string, "nvmlErrorString", NULL);
    BIND(count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    BIND(handle_by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    BIND(name, "nvmlDeviceGetName", NULL);
    BIND(uuid, "nvmlDeviceGetUUID", NULL);
    BIND(memory, "nvmlDeviceGetMemoryInfo", NULL);
    if (!f->init || !f->shutdown || !f->error_string || !f->count || !f->handle_by_index ||
        !f->name || !f->uuid || !f->memory)
        return errbuf_set(err, -ENOEXEC,
                          "%s lacks NVML's entry points (nvmlInit, nvmlDeviceGetCount,"
                          " nvmlDeviceGetMemoryInfo ...): not NVIDIA's management library",
                          n->path);
    BIND(memory_v2, "nvmlDeviceGetMemoryInfo_v2", NULL);
    BIND(driver_version, "nvmlSystemGetDriverVersion", NULL);
    BIND(utilization, "nvmlDeviceGetUtilizationRates", NULL);
    BIND(power, "nvmlDeviceGetPowerUsage", NULL);
    BIND(temperature, "nvmlDeviceGetTemperature", NULL);
    BIND(clock, "nvmlDeviceGetClockInfo", NULL);
    BIND(throttle, "nvmlDeviceGetCurrentClocksEventReasons",
         "nvmlDeviceGetCurrentClocksThrottleReasons");
    BIND(ecc, "nvmlDeviceGetTotalEccErrors", NULL);
    BIND(mig_mode, "nvmlDeviceGetMigMode", NULL);
    BIND(mig_count, "nvmlDeviceGetMaxMigDeviceCount", NULL);
    BIND(mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex", NULL);
    BIND(procs, "nvmlDeviceGetComputeRunningProcesses_v3",
         "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!f->procs)
        BIND(procs_v1, "nvmlDeviceGetComputeRunningProcesses", NULL);
    BIND(proc_util, "nvmlDeviceGetProcessUtilization", NULL);
    BIND(event_set_create, "nvmlEventSetCreate", NULL);
    BIND(register_events, "nvmlDeviceRegisterEvents", NULL);
    BIND(event_wait, "nvmlEventSetWait_v2", "nvmlEventSetWait");
    BIND(event_set_free, "nvmlEventSetFree", NULL);
    return 0;
}

/* Xid errors of every GPU into one event set, polled by each reading. */
static void watch_xids(struct nvml *n)
{
    struct nvml_fns *f = &n->f;
    unsigned int count = 0;
    int watched = 0;

    if (!f->event_set_create || !f->register_events || !f->event_wait || !f->event_set_free ||
        f->event_set_create(&n->events) != NVML_SUCCESS) {
        n->events = NULL;
        return;
    }
    if (f->count(&count) == NVML_SUCCESS)
        for (unsigned int i = 0; i < count && i < GPU_DEVICES_MAX; i++) {
            nvml_device d;
            if (f->handle_by_index(i, &d) == NVML_SUCCESS &&
                f->register_events(d, NVML_EVENT_XID_CRITICAL_ERROR, n->events) == NVML_SUCCESS)
                watched++;
        }
    if (!watched) {
        f->event_set_free(n->events);
        n->events = NULL;
    }
}

int nvml_open(const char *path, struct nvml **ret, struct errbuf *err)
{
    struct nvml *n = calloc(1, sizeof(*n));
    unsigned int count = 0;
    int r;

    if (!n)
        return errbuf_set(err, -ENOMEM, "out of memory");
    n->lib = find_library(path, n->path, sizeof(n->path), err);
    if (!n->lib) {
        free(n);
        return -ENOENT;
    }
    r = bind_fns(n, err);
    if (r < 0) {
        dlclose(n->lib);
        free(n);
        return r;
    }
    r = n->f.init();
    if (r != NVML_SUCCESS) {
        errbuf_set(err, -ENODEV, "%s: nvmlInit: %s%s", n->path, n->f.error_string(r),
                   r == NVML_ERROR_DRIVER_NOT_LOADED ? " (the library is here, the kernel"
                                                       " driver is not loaded)"
                                                     : "");
        dlclose(n->lib);
        free(n);
        return -ENODEV;
    }
    if (n->f.count(&count) != NVML_SUCCESS || count == 0) {
        errbuf_set(err, -ENODEV, "%s: the driver sees no GPU", n->path);
        n->f.shutdown();
        dlclose(n->lib);
        free(n);
        return -ENODEV;
    }
    if (!n->f.driver_version || n->f.driver_version(n->driver, sizeof(n->driver)) != NVML_SUCCESS)
        snprintf(n->driver, sizeof(n->driver), "?");
    n->driver[sizeof(n->driver) - 1] = '\0';
    watch_xids(n);
    *ret = n;
    return 0;
}

void nvml_free(struct nvml *n)
{
    if (!n)
        return;
    if (n->events)
        n->f.event_set_free(n->events);
    n->f.shutdown();
    dlclose(n->lib);
    free(n);
}

const char *nvml__driver(const struct nvml *n)
{
    return n->driver;
}

const char *nvml__path(const struct nvml *n)
{
    return n->path;
}

/* ---- one reading ---- */

/* What @r's call put in @v, or -1 when it failed (v read after the call: a separate
 * statement, since the order of a call's arguments is not defined). */
static int64_t uint_or_unknown(int r, const unsigned int *v)
{
    return r == NVML_SUCCESS ? (int64_t)*v : -1;
}

/* A device's own figures (not its processes) into @d. */
static void read_device(struct nvml *n, nvml_device h, struct gpu_device *d)
{
    struct nvml_fns *f = &n->f;
    struct nvml_memory mem;
    struct nvml_memory_v2 mem2 = {.version = NVML_MEMORY_V2};
    struct nvml_utilization u;
    unsigned long long ull;
    unsigned int v;

    if (f->name(h, d->name, sizeof(d->name)) != NVML_SUCCESS)
        snprintf(d->name, sizeof(d->name), "?");
    d->name[sizeof(d->name) - 1] = '\0';
    if (f->uuid(h, d->uuid, sizeof(d->uuid)) != NVML_SUCCESS)
        snprintf(d->uuid, sizeof(d->uuid), "?");
    d->uuid[sizeof(d->uuid) - 1] = '\0';
    d->util_pct = d->mem_util_pct = d->mem_used_bytes = d->mem_total_bytes = -1;
    d->power_mw = d->temp_c = d->sm_clock_mhz = d->mem_clock_mhz = -1;
    d->throttle_reasons = d->ecc_corrected = d->ecc_uncorrected = -1;
    if (f->memory_v2 && f->memory_v2(h, &mem2) == NVML_SUCCESS) {
        d->mem_used_bytes = (int64_t)mem2.used;
        d->mem_total_bytes = (int64_t)mem2.total;
    } else if (f->memory(h, &mem) == NVML_SUCCESS) {
        d->mem_used_bytes = (int64_t)mem.used;
        d->mem_total_bytes = (int64_t)mem.total;
    }
    if (f->utilization && f->utilization(h, &u) == NVML_SUCCESS) {
        d->util_pct = u.gpu;
        d->mem_util_pct = u.memory;
    }
    if (f->power) {
        int r = f->power(h, &v);
        d->power_mw = uint_or_unknown(r, &v);
    }
    if (f->temperature) {
        int r = f->temperature(h, NVML_TEMPERATURE_GPU, &v);
        d->temp_c = uint_or_unknown(r, &v);
    }
    if (f->clock) {
        int r = f->clock(h, NVML_CLOCK_SM, &v);
        d->sm_clock_mhz = uint_or_unknown(r, &v);
        r = f->clock(h, NVML_CLOCK_MEM, &v);
        d->mem_clock_mhz = uint_or_unknown(r, &v);
    }
    if (f->throttle && f->throttle(h, &ull) == NVML_SUCCESS)
        d->throttle_reasons = (int64_t)ull;
    if (f->ecc &&
        f->ecc(h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &ull) == NVML_SUCCESS)
        d->ecc_corrected = (int64_t)ull;
    if (f->ecc &&
        f->ecc(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ull) == NVML_SUCCESS)
        d->ecc_uncorrected = (int64_t)ull;
}

static struct gpu_process *add_proc(struct gpu_snapshot *s, pid_t pid, int32_t device,
                                    int64_t bytes)
{
    struct gpu_process *p;

    if (s->n_procs == GPU_PROCS_MAX) {
        s->procs_left_out++;
        return NULL;
    }
    p = &s->procs[s->n_procs++];
    *p = (struct gpu_process){
        .pid = pid, .device = device, .mem_used_bytes = bytes, .sm_util_pct = -1};
    return p;
}

/* The processes on device @di of @s (handle @h): their memory, then their SM utilisation
 * where the driver sampled it since the last reading. */
static void read_procs(struct nvml *n, nvml_device h, int32_t di, int32_t gpu_index,
                       struct gpu_snapshot *s)
{
    struct nvml_fns *f = &n->f;
    unsigned int count = GPU_PROCS_MAX, nutil = NVML_PROC_UTIL_MAX;
    size_t first = s->n_procs;
    int r;

    if (f->procs) {
        r = f->procs(h, &count, n->procs);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE)
            s->procs_left_out += count;
        if (r == NVML_SUCCESS)
            for (unsigned int i = 0; i < count && i < GPU_PROCS_MAX; i++)
                add_proc(s, (pid_t)n->procs[i].pid, di, (int64_t)n->procs[i].used_gpu_memory);
    } else if (f->procs_v1) {
        struct nvml_process_info_v1 *v1 = (struct nvml_process_info_v1 *)n->procs;
        r = f->procs_v1(h, &count, v1);
        if (r == NVML_SUCCESS)
            for (unsigned int i = 0; i < count && i < GPU_PROCS_MAX; i++)
                add_proc(s, (pid_t)v1[i].pid, di, (int64_t)v1[i].used_gpu_memory);
    }
    if (!f->proc_util || s->n_procs == first || gpu_index < 0 || gpu_index >= GPU_DEVICES_MAX)
        return;
    r = f->proc_util(h, n->utils, &nutil, n->util_seen_us[gpu_index]);
    if (r != NVML_SUCCESS) /* NOT_FOUND: no sample since the last reading */
        return;
    for (unsigned int k = 0; k < nutil && k < NVML_PROC_UTIL_MAX; k++) {
        const struct nvml_proc_util *u = &n->utils[k];
        if (u->timestamp_us > n->util_seen_us[gpu_index])
            n->util_seen_us[gpu_index] = u->timestamp_us;
        for (size_t i = first; i < s->n_procs; i++)
            if (s->procs[i].pid == (pid_t)u->pid && u->sm_util <= 100)
                s->procs[i].sm_util_pct = u->sm_util; /* the samples come oldest first */
    }
}

static int32_t add_device(struct nvml *n, struct gpu_snapshot *s, nvml_device h, int32_t index,
                          int32_t mig)
{
    struct gpu_device *d;

    if (s->n_devices == GPU_DEVICES_MAX) {
        s->devices_left_out++;
        return -1;
    }
    d = &s->devices[s->n_devices];
    n->handles[s->n_devices] = h;
    read_device(n, h, d);
    d->index = index;
    d->mig = mig;
    return (int32_t)s->n_devices++;
}

/* The Xid errors raised since the last reading, without waiting for one. */
static void read_xids(struct nvml *n, struct gpu_snapshot *s)
{
    for (int i = 0; n->events && i < NVML_EVENTS_PER_READ; i++) {
        struct nvml_event_data e;
        int32_t device = -1;

        memset(&e, 0, sizeof(e));
        if (n->f.event_wait(n->events, &e, 0) != NVML_SUCCESS)
            break; /* NVML_ERROR_TIMEOUT: none left */
        if (!(e.event_type & NVML_EVENT_XID_CRITICAL_ERROR))
            continue;
        for (size_t k = 0; k < s->n_devices; k++)
            if (n->handles[k] == e.device && s->devices[k].mig < 0)
                device = (int32_t)k;
        if (s->n_xids == GPU_XIDS_MAX) {
            s->xids_left_out++;
            continue;
        }
        s->xids[s->n_xids++] = (struct gpu_xid){.device = device, .xid = (int64_t)e.event_data};
    }
}

int nvml__read(struct nvml *n, struct gpu_snapshot *s, struct errbuf *err)
{
    struct nvml_fns *f = &n->f;
    unsigned int count = 0;
    int r;

    s->ts_ns = real_ns();
    s->n_devices = s->n_procs = s->n_xids = 0;
    s->devices_left_out = s->procs_left_out = s->xids_left_out = 0;
    r = f->count(&count);
    if (r != NVML_SUCCESS)
        return errbuf_set(err, -EIO, "nvmlDeviceGetCount: %s", f->error_string(r));
    for (unsigned int i = 0; i < count; i++) {
        unsigned int current = 0, pending = 0, migs = 0;
        nvml_device h;
        int32_t di;

        r = f->handle_by_index(i, &h);
        if (r != NVML_SUCCESS) /* one GPU lost (Xid 79) is a row missing, not a failure */
            continue;
        di = add_device(n, s, h, (int32_t)i, -1);
        if (di < 0)
            break;
        if (f->mig_mode && f->mig_count && f->mig_handle &&
            f->mig_mode(h, &current, &pending) == NVML_SUCCESS &&
            current == NVML_DEVICE_MIG_ENABLE && f->mig_count(h, &migs) == NVML_SUCCESS) {
            /* its processes are its MIG devices' */
            for (unsigned int m = 0; m < migs; m++) {
                nvml_device mh;
                int32_t mi;
                if (f->mig_handle(h, m, &mh) != NVML_SUCCESS)
                    continue; /* not created */
                mi = add_device(n, s, mh, (int32_t)i, (int32_t)m);
                if (mi >= 0)
                    read_procs(n, mh, mi, -1, s);
            }
        } else {
            read_procs(n, h, di, (int32_t)i, s);
        }
    }
    read_xids(n, s);
    return 0;
}
