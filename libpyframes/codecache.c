/* codecache.c - code object cache; see codecache.h. */
#include "codecache.h"

#include <stdlib.h>
#include <string.h>

#define WAYS 4

struct codecache {
    struct code_info *slots; /* n_sets * WAYS */
    size_t n_sets;           /* a power of two */
    uint32_t stamp;
    struct code_info **overflow;
    size_t n_overflow, cap_overflow;
    struct codecache_stats stats;
};

static void entry_clear(struct code_info *e)
{
    free(e->func);
    free(e->file);
    free(e->lines);
    free(e->code);
    free(e->sites);
    memset(e, 0, sizeof(*e));
}

struct codecache *codecache_new(size_t n_sets)
{
    struct codecache *cc = calloc(1, sizeof(*cc));
    size_t n = 1;

    if (!cc)
        return NULL;
    while (n < n_sets)
        n <<= 1;
    cc->n_sets = n;
    cc->slots = calloc(n * WAYS, sizeof(*cc->slots));
    if (!cc->slots) {
        free(cc);
        return NULL;
    }
    return cc;
}

static void overflow_clear(struct codecache *cc)
{
    for (size_t i = 0; i < cc->n_overflow; i++) {
        entry_clear(cc->overflow[i]);
        free(cc->overflow[i]);
    }
    cc->n_overflow = 0;
}

void codecache_free(struct codecache *cc)
{
    if (!cc)
        return;
    for (size_t i = 0; i < cc->n_sets * WAYS; i++)
        entry_clear(&cc->slots[i]);
    overflow_clear(cc);
    free(cc->overflow);
    free(cc->slots);
    free(cc);
}

void codecache__begin(struct codecache *cc)
{
    overflow_clear(cc);
    cc->stamp++;
    if (cc->stamp == 0) /* 0 means "never used"; skip it on wrap-around */
        cc->stamp = 1;
}

static struct code_info *set_of(struct codecache *cc, uint64_t raddr)
{
    /* Code objects are 16-byte aligned heap objects: drop the low bits, then mix. */
    uint64_t h = (raddr >> 4) * 0x9e3779b97f4a7c15ULL;
    return &cc->slots[(h >> 32 & (cc->n_sets - 1)) * WAYS];
}

struct code_info *codecache__find(struct codecache *cc, uint64_t raddr, const uint64_t *key)
{
    struct code_info *set = set_of(cc, raddr);

    for (int i = 0; i < WAYS; i++) {
        struct code_info *e = &set[i];
        if (e->raddr == raddr && memcmp(e->key, key, sizeof(e->key)) == 0) {
            e->stamp = cc->stamp;
            cc->stats.hits++;
            return e;
        }
    }
    for (size_t i = 0; i < cc->n_overflow; i++) {
        struct code_info *e = cc->overflow[i];
        if (e->raddr == raddr && memcmp(e->key, key, sizeof(e->key)) == 0) {
            cc->stats.hits++;
            return e;
        }
    }
    cc->stats.misses++;
    return NULL;
}

struct code_info *codecache__pin(struct codecache *cc, uint64_t raddr, const char *func,
                                 const char *file)
{
    struct code_info *set = set_of(cc, raddr);

    for (int i = 0; i < WAYS; i++) {
        struct code_info *e = &set[i];
        if (e->raddr == raddr && e->func == func && e->file == file) {
            e->stamp = cc->stamp;
            return e;
        }
    }
    return NULL;
}

static struct code_info *overflow_add(struct codecache *cc)
{
    struct code_info *e;

    if (cc->n_overflow == cc->cap_overflow) {
        size_t ncap = cc->cap_overflow ? cc->cap_overflow * 2 : 16;
        struct code_info **n = realloc(cc->overflow, ncap * sizeof(*n));
        if (!n)
            return NULL;
        cc->overflow = n;
        cc->cap_overflow = ncap;
    }
    e = calloc(1, sizeof(*e));
    if (e)
        cc->overflow[cc->n_overflow++] = e;
    return e;
}

struct code_info *codecache__insert(struct codecache *cc, uint64_t raddr, const uint64_t *key)
{
    struct code_info *set = set_of(cc, raddr), *victim = NULL;

    /* The least recently used way that this walk does not hold. */
    for (int i = 0; i < WAYS; i++) {
        struct code_info *e = &set[i];
        if (e->stamp == cc->stamp && e->raddr)
            continue;
        if (!victim || e->stamp < victim->stamp || !e->raddr)
            victim = e;
        if (!e->raddr)
            break;
    }
    if (victim) {
        if (victim->raddr)
            cc->stats.evictions++;
        entry_clear(victim);
    } else {
        victim = overflow_add(cc);
        if (!victim)
            return NULL;
    }
    victim->raddr = raddr;
    memcpy(victim->key, key, sizeof(victim->key));
    victim->stamp = cc->stamp;
    victim->memo_addr = INT64_MIN;
    return victim;
}

void codecache__stats(const struct codecache *cc, struct codecache_stats *ret_stats)
{
    *ret_stats = cc->stats;
}
