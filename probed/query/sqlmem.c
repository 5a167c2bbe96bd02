/* sqlmem.c - SQLite's memory, counted per query; see sqlmem.h. */
#include "query/sqlmem.h"

#include <errno.h>
#include <malloc.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

/* Before each allocation: its size, and the budget it is charged to (NULL: none). 16 bytes,
 * so what SQLite gets stays aligned as malloc's own. */
struct header {
    int64_t size;
    struct sqlmem_budget *budget;
};

static struct sqlmem_budget pool[SQLMEM_BUDGETS];
static _Thread_local struct sqlmem_budget *current;
static int64_t all_limit;
static int64_t all_used; /* atomic */

static bool charge(struct sqlmem_budget *b, int64_t n)
{
    int64_t used, all;

    if (!b)
        return true;
    all = __atomic_add_fetch(&all_used, n, __ATOMIC_RELAXED);
    used = __atomic_add_fetch(&b->used_bytes, n, __ATOMIC_RELAXED);
    if (n > 0 && (used > b->limit_bytes || all > all_limit)) {
        __atomic_sub_fetch(&all_used, n, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&b->used_bytes, n, __ATOMIC_RELAXED);
        b->refused = true;
        b->over_all = used <= b->limit_bytes;
        return false;
    }
    if (used > b->peak_bytes)
        b->peak_bytes = used;
    return true;
}

static void *mem_malloc(int n)
{
    struct header *h;

    if (n < 0 || !charge(current, n))
        return NULL;
    h = malloc(sizeof(*h) + (size_t)n);
    if (!h) {
        charge(current, -(int64_t)n);
        return NULL;
    }
    *h = (struct header){.size = n, .budget = current};
    return h + 1;
}

static void mem_free(void *p)
{
    struct header *h = p ? (struct header *)p - 1 : NULL;

    if (!h)
        return;
    charge(h->budget, -h->size);
    free(h);
}

static void *mem_realloc(void *p, int n)
{
    struct header *h = (struct header *)p - 1, *nh;
    int64_t grow = (int64_t)n - h->size;

    if (n < 0 || !charge(h->budget, grow))
        return NULL;
    nh = realloc(h, sizeof(*h) + (size_t)n);
    if (!nh) {
        charge(h->budget, -grow);
        return NULL;
    }
    nh->size = n;
    return nh + 1;
}

static int mem_size(void *p)
{
    return p ? (int)((struct header *)p - 1)->size : 0;
}

static int mem_roundup(int n)
{
    return (n + 7) & ~7;
}

static int mem_init(void *unused)
{
    (void)unused;
    return SQLITE_OK;
}

static void mem_shutdown(void *unused)
{
    (void)unused;
}

int sqlmem_install(int64_t all_queries_bytes)
{
    static const sqlite3_mem_methods methods = {mem_malloc,  mem_free, mem_realloc,  mem_size,
                                                mem_roundup, mem_init, mem_shutdown, NULL};

    all_limit = all_queries_bytes;
    return sqlite3_config(SQLITE_CONFIG_MALLOC, &methods) == SQLITE_OK ? 0 : -EBUSY;
}

struct sqlmem_budget *sqlmem_enter(int64_t limit_bytes)
{
    for (int i = 0; i < SQLMEM_BUDGETS; i++) {
        struct sqlmem_budget *b = &pool[i];
        bool no = false;
        if (__atomic_load_n(&b->used_bytes, __ATOMIC_RELAXED) != 0 ||
            !__atomic_compare_exchange_n(&b->in_use, &no, true, false, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        b->limit_bytes = limit_bytes;
        b->peak_bytes = 0;
        b->refused = b->over_all = false;
        current = b;
        return b;
    }
    return NULL;
}

void sqlmem_leave(struct sqlmem_budget *b)
{
    if (!b)
        return;
    current = NULL;
    __atomic_store_n(&b->in_use, false, __ATOMIC_RELEASE);
}

int64_t sqlmem_queries_bytes(void)
{
    return __atomic_load_n(&all_used, __ATOMIC_RELAXED);
}
