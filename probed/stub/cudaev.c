/*
 * cudaev.c - CUDA events from the target's own driver: see cudaev.h.
 */
#define _GNU_SOURCE
#include "cudaev.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CU_EVENT_DEFAULT 0
#define BATCH 256 /* events created at once */

typedef int CUresult;
typedef void *CUevent, *CUstream, *CUcontext;

struct cudaev {
    void *lib;
    CUresult (*ctx_get)(CUcontext *);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*create)(CUevent *, unsigned);
    CUresult (*destroy)(CUevent);
    CUresult (*record)(CUevent, CUstream);
    CUresult (*query)(CUevent);
    CUresult (*elapsed)(float *, CUevent, CUevent);
    pthread_mutex_t lock; /* everything below */
    CUcontext ctx;        /* where the events were created; NULL: none yet */
    CUevent *events;      /* n_events created, CUDAEV_MAX at most */
    int32_t *free_list;   /* n_free indices of events not in use */
    uint8_t *in_use;      /* per event: handed out (a release of another is ignored) */
    int32_t n_events, n_free;
    bool entered; /* cudaev_enter pushed ctx */
    struct cudaev_stats stats;
};

static int find_libcuda(struct dl_phdr_info *info, size_t size, void *arg)
{
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

    (void)size;
    if (base && strncmp(base, "/libcuda.so", 11) == 0) {
        *(void **)arg = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
        return 1;
    }
    return 0;
}

int cudaev_open(struct cudaev **ret, char *why, size_t why_len)
{
    struct cudaev *ce = calloc(1, sizeof(*ce));
    void *lib = NULL;
    struct {
        void **fn;
        const char *name, *alt;
    } syms[8];
    int n = 0;

    *ret = NULL;
    if (!ce) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    dl_iterate_phdr(find_libcuda, &lib);
    if (!lib) {
        snprintf(why, why_len, "the CUDA driver (libcuda.so) is not loaded in this process");
        free(ce);
        return -1;
    }
#define SYM(f, a, b) syms[n++] = (typeof(syms[0])){(void **)&ce->f, a, b}
    SYM(ctx_get, "cuCtxGetCurrent", NULL);
    SYM(ctx_push, "cuCtxPushCurrent_v2", NULL);
    SYM(ctx_pop, "cuCtxPopCurrent_v2", NULL);
    SYM(create, "cuEventCreate", NULL);
    SYM(destroy, "cuEventDestroy_v2", "cuEventDestroy");
    SYM(record, "cuEventRecord", NULL);
    SYM(query, "cuEventQuery", NULL);
    SYM(elapsed, "cuEventElapsedTime_v2", "cuEventElapsedTime");
#undef SYM
    for (int i = 0; i < n; i++) {
        *syms[i].fn = dlsym(lib, syms[i].name);
        if (!*syms[i].fn && syms[i].alt)
            *syms[i].fn = dlsym(lib, syms[i].alt);
        if (!*syms[i].fn) {
            snprintf(why, why_len, "the CUDA driver has no %s", syms[i].name);
            dlclose(lib);
            free(ce);
            return -1;
        }
    }
    ce->lib = lib;
    pthread_mutex_init(&ce->lock, NULL);
    *ret = ce;
    return 0;
}

void cudaev_close(struct cudaev *ce)
{
    CUcontext was;

    if (!ce)
        return;
    /* destroyed in their context: an event still pending on the GPU is freed once reached */
    if (ce->n_events && ce->ctx_push(ce->ctx) == CUDA_SUCCESS) {
        for (int32_t i = 0; i < ce->n_events; i++)
            ce->destroy(ce->events[i]);
        ce->ctx_pop(&was);
    }
    free(ce->events);
    free(ce->free_list);
    free(ce->in_use);
    pthread_mutex_destroy(&ce->lock);
    dlclose(ce->lib);
    free(ce);
}

static void failed(struct cudaev *ce, CUresult r)
{
    ce->stats.errors++;
    ce->stats.last_error = r;
}

/* Lock held, on a recording thread: a batch of events in the current context. */
static void create_batch(struct cudaev *ce)
{
    CUcontext ctx = NULL;
    CUresult r;

    if (ce->n_events >= CUDAEV_MAX)
        return;
    if ((r = ce->ctx_get(&ctx)) != CUDA_SUCCESS || !ctx) {
        failed(ce, r);
        return;
    }
    if (ce->ctx && ctx != ce->ctx)
        return; /* a thread on another device: its modules go without device time */
    if (!ce->events) {
        ce->events = malloc(CUDAEV_MAX * sizeof(*ce->events));
        ce->free_list = malloc(CUDAEV_MAX * sizeof(*ce->free_list));
        ce->in_use = calloc(CUDAEV_MAX, 1);
        if (!ce->events || !ce->free_list || !ce->in_use) {
            free(ce->events);
            free(ce->free_list);
            free(ce->in_use);
            ce->events = NULL;
            ce->free_list = NULL;
            ce->in_use = NULL;
            return;
        }
    }
    ce->ctx = ctx;
    for (int i = 0; i < BATCH && ce->n_events < CUDAEV_MAX; i++) {
        if ((r = ce->create(&ce->events[ce->n_events], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
            failed(ce, r);
            return;
        }
        ce->free_list[ce->n_free++] = ce->n_events++;
    }
}

int32_t cudaev_record(struct cudaev *ce, uint64_t stream)
{
    int32_t ev = -1;
    CUresult r;

    pthread_mutex_lock(&ce->lock);
    if (ce->n_free == 0)
        create_batch(ce);
    if (ce->n_free > 0) {
        ev = ce->free_list[--ce->n_free];
        ce->in_use[ev] = 1;
    } else
        ce->stats.empty++;
    pthread_mutex_unlock(&ce->lock);
    if (ev < 0)
        return -1;
    r = ce->record(ce->events[ev], (CUstream)(uintptr_t)stream);
    pthread_mutex_lock(&ce->lock);
    if (r == CUDA_SUCCESS) {
        ce->stats.recorded++;
    } else {
        failed(ce, r);
        ce->in_use[ev] = 0;
        ce->free_list[ce->n_free++] = ev;
        ev = -1;
    }
    pthread_mutex_unlock(&ce->lock);
    return ev;
}

void cudaev_release(struct cudaev *ce, int32_t ev)
{
    if (!ce || ev < 0)
        return;
    pthread_mutex_lock(&ce->lock);
    if (ev < ce->n_events && ce->in_use[ev]) { /* torch_record's marks come from Python */
        ce->in_use[ev] = 0;
        ce->free_list[ce->n_free++] = ev;
    }
    pthread_mutex_unlock(&ce->lock);
}

void cudaev_enter(struct cudaev *ce)
{
    CUcontext ctx;

    pthread_mutex_lock(&ce->lock);
    ctx = ce->ctx;
    pthread_mutex_unlock(&ce->lock);
    ce->entered = ctx && ce->ctx_push(ctx) == CUDA_SUCCESS;
}

void cudaev_leave(struct cudaev *ce)
{
    CUcontext was;

    if (ce->entered)
        ce->ctx_pop(&was);
    ce->entered = false;
}

int cudaev_elapsed(struct cudaev *ce, int32_t a, int32_t b, int64_t *ret_ns)
{
    float ms = 0;
    CUresult r;
    bool valid;

    pthread_mutex_lock(&ce->lock);
    valid =
        a >= 0 && b >= 0 && a < ce->n_events && b < ce->n_events && ce->in_use[a] && ce->in_use[b];
    pthread_mutex_unlock(&ce->lock);
    if (!valid)
        return -1;
    r = ce->query(ce->events[b]);

    if (r == CUDA_SUCCESS)
        r = ce->elapsed(&ms, ce->events[a], ce->events[b]);
    if (r == CUDA_SUCCESS) {
        *ret_ns = (int64_t)((double)ms * 1e6);
        return 1;
    }
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    pthread_mutex_lock(&ce->lock);
    failed(ce, r);
    pthread_mutex_unlock(&ce->lock);
    return -1;
}

void cudaev_count_unresolved(struct cudaev *ce)
{
    pthread_mutex_lock(&ce->lock);
    ce->stats.unresolved++;
    pthread_mutex_unlock(&ce->lock);
}

struct cudaev_stats cudaev_stats(struct cudaev *ce)
{
    struct cudaev_stats s = {0};

    if (ce) {
        pthread_mutex_lock(&ce->lock);
        s = ce->stats;
        pthread_mutex_unlock(&ce->lock);
    }
    return s;
}
