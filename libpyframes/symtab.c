/* symtab.c - see symtab.h. */
#define _GNU_SOURCE
#include "symtab.h"

#include "evalcold.h"
#include "fetchdbg.h"

#include "pyframes.h"

#include <errno.h>
#include <gelf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* libstdc++'s C++ ABI demangler (cxxabi.h), callable from C: C++ symbols (torch's) are
 * named as C++ shows them, at::addmm rather than _ZN2at5addmm... */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

struct pyf_symcache {
    pthread_mutex_t lock;
    struct symtab **tables; /* every shared table in use */
    size_t n, cap;
    struct pyf_symcache_stats stats;
    struct fetchdbg *fetch; /* NULL: no debuginfod */
};

static int by_start(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;

    return x->start < y->start ? -1 : x->start > y->start;
}

/* Appends @s to the table's names; returns its offset, or -1 (no memory). */
static ptrdiff_t add_name(struct symtab *t, size_t *cap, const char *s)
{
    size_t len = strlen(s) + 1;
    ptrdiff_t at = (ptrdiff_t)t->bytes;

    if (t->bytes + len > *cap) {
        size_t want = *cap ? 2 * *cap : 4096;
        char *p;
        while (want < t->bytes + len)
            want *= 2;
        if (!(p = realloc(t->names, want)))
            return -1;
        t->names = p;
        *cap = want;
    }
    memcpy(t->names + t->bytes, s, len);
    t->bytes += len;
    return at;
}

/*
 * A stripped interpreter names only the hot part of its eval loop: the cold one, found from
 * the unwind tables (evalcold.h), is added as GCC names it, so that native.c knows its frames
 * for the eval loop's. Names are still offsets here. -1: no memory.
 */
static int add_eval_cold(struct symtab *t, size_t *names_cap, Dwfl_Module *m)
{
    static const char eval[] = "_PyEval_EvalFrameDefault";
    const struct sym *hot = NULL;
    uint64_t start, end;
    Dwarf_Addr elf_bias;
    struct sym *grown;
    ptrdiff_t at;

    for (size_t k = 0; k < t->n; k++) {
        const char *name = t->names + (uintptr_t)t->syms[k].name;
        if (strncmp(name, eval, sizeof(eval) - 1) != 0)
            continue;
        if (name[sizeof(eval) - 1] == '.')
            return 0; /* named already (.symtab, or separate debug info) */
        if (name[sizeof(eval) - 1] == '\0')
            hot = &t->syms[k];
    }
    if (!hot ||
        evalcold_find(dwfl_module_getelf(m, &elf_bias), hot->start, hot->end, &start, &end) < 0)
        return 0;
    for (size_t k = 0; k < t->n; k++)
        if (t->syms[k].start < end && start < t->syms[k].end)
            return 0; /* a function of its own after all */
    if (!(grown = realloc(t->syms, (t->n + 1) * sizeof(*t->syms))))
        return -1;
    t->syms = grown;
    if ((at = add_name(t, names_cap, "_PyEval_EvalFrameDefault.cold")) < 0)
        return -1;
    t->syms[t->n++] = (struct sym){start, end, (const char *)(uintptr_t)at, NULL};
    return 0;
}

struct symtab *symtab_build(Dwfl_Module *m, Dwarf_Addr bias)
{
    struct symtab *t = calloc(1, sizeof(*t));
    int count = dwfl_module_getsymtab(m);
    size_t names_cap = 0;

    if (!t || (count > 0 && !(t->syms = calloc((size_t)count, sizeof(*t->syms))))) {
        free(t);
        return NULL;
    }
    for (int i = 1; i < count; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info);
        ptrdiff_t at;
        if (!name || !*name || sym.st_size == 0 || (type != STT_FUNC && type != STT_GNU_IFUNC))
            continue;
        size_t len = strlen(name);
        char *clean = pyf_utf8_valid(name, len) ? NULL : malloc(3 * len + 1);
        if (clean) /* a hostile file's symbol: any bytes */
            pyf_utf8_clean(clean, 3 * len + 1, name, len);
        at = add_name(t, &names_cap, clean ? clean : name);
        free(clean);
        if (at < 0) {
            symtab_free(t);
            return NULL;
        }
        /* the offset for now: names may move while they grow */
        t->syms[t->n++] =
            (struct sym){addr - bias, addr - bias + sym.st_size, (const char *)(uintptr_t)at, NULL};
    }
    if (add_eval_cold(t, &names_cap, m) < 0) {
        symtab_free(t);
        return NULL;
    }
    for (size_t k = 0; k < t->n; k++)
        t->syms[k].name = t->names + (uintptr_t)t->syms[k].name;
    {
        const char *debug_file = NULL;
        dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, NULL, &debug_file);
        t->from_debug_file = debug_file != NULL;
    }
    qsort(t->syms, t->n, sizeof(*t->syms), by_start);
    t->bytes += t->n * sizeof(*t->syms);
    return t;
}

void symtab_free(struct symtab *t)
{
    if (!t)
        return;
    for (size_t k = 0; k < t->n; k++)
        if (t->syms[k].shown && t->syms[k].shown != t->syms[k].name)
            free((char *)t->syms[k].shown);
    free(t->syms);
    free(t->names);
    free(t);
}

struct sym *symtab__find(const struct symtab *t, uint64_t addr)
{
    size_t lo = 0, hi = t ? t->n : 0;

    while (lo < hi) { /* the last function starting at or before addr */
        size_t mid = lo + (hi - lo) / 2;
        if (t->syms[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* usually the one before covers it, or none does; one nested in a larger one (a .cold
     * part, an alias) may end first: look back a few */
    for (size_t i = lo, steps = 0; i-- > 0 && steps < 16; steps++)
        if (addr < t->syms[i].end)
            return &t->syms[i];
    return NULL;
}

const char *symtab__shown(struct sym *s)
{
    const char *shown = __atomic_load_n(&s->shown, __ATOMIC_ACQUIRE), *expected = NULL;
    char *demangled = NULL;
    int status = -1;

    if (shown)
        return shown;
    if (strncmp(s->name, "_Z", 2) == 0) {
        demangled = __cxa_demangle(s->name, NULL, NULL, &status);
        if (status != 0) {
            free(demangled);
            demangled = NULL;
        }
    }
    shown = demangled ? demangled : s->name;
    /* another thread may have got there first: its name stays, ours goes */
    if (!__atomic_compare_exchange_n(&s->shown, &expected, shown, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        free(demangled);
        return expected;
    }
    return shown;
}

/* ---- the cache ---- */

int pyf_symcache_new(struct pyf_symcache **ret)
{
    struct pyf_symcache *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    *ret = c;
    return 0;
}

void pyf_symcache_free(struct pyf_symcache *c)
{
    if (!c)
        return;
    fetchdbg_stop(c->fetch);
    for (size_t i = 0; i < c->n; i++) /* tables still referenced: their users are gone too */
        symtab_free(c->tables[i]);
    free(c->tables);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void pyf_symcache__stats(struct pyf_symcache *c, struct pyf_symcache_stats *ret)
{
    struct fetchdbg_stats f;

    pthread_mutex_lock(&c->lock);
    *ret = c->stats;
    pthread_mutex_unlock(&c->lock);
    fetchdbg_stats(c->fetch, &f);
    ret->debuginfod_requested = f.requested;
    ret->debuginfod_fetched = f.fetched;
    ret->debuginfod_failed = f.failed;
    ret->debuginfod_dropped = f.dropped;
}

int pyf_symcache__fetch_debuginfo(struct pyf_symcache *c, struct pyf_err *reterr)
{
    if (c->fetch)
        return 0;
    return fetchdbg_start(&c->fetch, reterr);
}

struct fetchdbg *symcache__fetcher(struct pyf_symcache *c)
{
    return c ? c->fetch : NULL;
}

/* Takes @t out of the list (the lock held): its users keep it until they put it back. */
static void unlist(struct pyf_symcache *c, struct symtab *t)
{
    for (size_t i = 0; i < c->n; i++) {
        if (c->tables[i] != t)
            continue;
        c->tables[i] = c->tables[--c->n];
        c->stats.tables--;
        c->stats.bytes -= t->bytes;
        return;
    }
}

static struct symtab *find_shared(struct pyf_symcache *c, const uint8_t *id, size_t len)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->tables[i]->build_id_len == len && memcmp(c->tables[i]->build_id, id, len) == 0)
            return c->tables[i];
    return NULL;
}

/* Lists @t in the cache (the lock held); false: no memory, the table then stays unshared. */
static bool share(struct pyf_symcache *c, struct symtab *t)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 32;
        struct symtab **p = realloc(c->tables, cap * sizeof(*p));
        if (!p)
            return false;
        c->tables = p;
        c->cap = cap;
    }
    c->tables[c->n++] = t;
    c->stats.tables++;
    c->stats.bytes += t->bytes;
    return true;
}

struct symtab *symcache__get(struct pyf_symcache *c, Dwfl_Module *m, Dwarf_Addr bias)
{
    const unsigned char *id = NULL;
    GElf_Addr id_vaddr;
    int len = dwfl_module_build_id(m, &id, &id_vaddr);
    struct symtab *t;

    if (len <= 0 || len > SYMTAB_BUILD_ID_MAX) { /* no build-id: nothing says two are the same */
        t = symtab_build(m, bias);
        if (t)
            t->refs = 1;
        return t;
    }
    /* built under the lock: a second rank attached meanwhile waits for this table rather than
     * building its own */
    pthread_mutex_lock(&c->lock);
    t = find_shared(c, id, (size_t)len);
    if (t && !t->from_debug_file && fetchdbg_landed(c->fetch, id, (size_t)len)) {
        unlist(c, t); /* built before its debug file was fetched */
        t = NULL;
    }
    if (t) {
        c->stats.hits++;
    } else if ((t = symtab_build(m, bias)) != NULL) {
        memcpy(t->build_id, id, (size_t)len);
        t->build_id_len = (size_t)len;
        c->stats.builds++;
        if (!share(c, t))
            t->build_id_len = 0;
    }
    if (t)
        t->refs++;
    pthread_mutex_unlock(&c->lock);
    return t;
}

void symcache__put(struct pyf_symcache *c, struct symtab *t)
{
    bool last;

    if (!t)
        return;
    if (t->build_id_len == 0) { /* not shared: only its one user knows it */
        symtab_free(t);
        return;
    }
    pthread_mutex_lock(&c->lock);
    last = --t->refs == 0;
    if (last)
        unlist(c, t); /* unless a newer one replaced it already */
    pthread_mutex_unlock(&c->lock);
    if (last)
        symtab_free(t);
}
