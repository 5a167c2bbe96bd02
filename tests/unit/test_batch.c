/* test_batch.c - batch.c: merging, order, capacity and lookups, on real reads of ourselves. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "batch.h"
#include "unit.h"

int test_batch_merges_and_finds(void);
int test_batch_capacity_and_faults(void);
int test_batch_window_search(void);
int test_batch_lookup_of_a_wrapping_range(void);

static uint64_t at(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

int test_batch_merges_and_finds(void)
{
    static uint8_t mem[8192];
    struct batch b;

    for (size_t i = 0; i < sizeof(mem); i++)
        mem[i] = (uint8_t)(i * 7);
    CHECK(batch_init(&b, 4096, 8) == 0);
    /* Close ranges in address order merge; a range inside the last span adds nothing. */
    CHECK(batch_add(&b, at(mem + 100), 16) == 0);
    CHECK(batch_add(&b, at(mem + 300), 16) == 0);
    CHECK(batch_add(&b, at(mem + 104), 8) == 0);
    CHECK(b.n == 1 && b.used == 216);
    /* Farther than BATCH_GAP: a new span. Alone: never merged, even when adjacent. */
    CHECK(batch_add(&b, at(mem + 300 + 16 + BATCH_GAP + 1), 8) == 1);
    CHECK(batch_add_alone(&b, at(mem + 2000), 8) == 2);
    CHECK(batch_add(&b, at(mem + 2008), 8) == 2); /* but later ranges may join it */
    CHECK(batch_add(&b, at(mem + 50), 8) == 3);   /* lower than the last span: new */
    CHECK(batch_read(&b, &(struct remote_src){.pid = getpid()}) == 0);
    CHECK(batch_find(&b, at(mem + 200), 4) != NULL); /* in the merged gap */
    CHECK(*batch_find(&b, at(mem + 200), 1) == mem[200]);
    CHECK(*batch_find(&b, at(mem + 2009), 1) == mem[2009]);
    CHECK(*batch_span_data(&b, 3) == mem[50]);
    CHECK(batch_find(&b, at(mem + 310), 16) == NULL); /* runs past the span */
    CHECK(batch_find(&b, at(mem + 5000), 1) == NULL);
    batch_reset(&b);
    CHECK(b.n == 0 && b.used == 0 && batch_find(&b, at(mem + 100), 1) == NULL);
    batch_free(&b);
    return 0;
}

int test_batch_capacity_and_faults(void)
{
    static uint8_t mem[256];
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *gone = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct batch b;

    CHECK(gone != MAP_FAILED);
    CHECK(munmap(gone, (size_t)page) == 0);
    CHECK(batch_init(&b, 64, 2) == 0);
    CHECK(batch_add(&b, at(mem), 48) == 0);
    CHECK(batch_add(&b, at(mem + 40), 32) == -1); /* would grow past the buffer */
    CHECK(batch_add_alone(&b, at(mem + 100), 16) == 1);
    CHECK(batch_add_alone(&b, at(mem + 200), 8) == -1); /* out of spans */
    CHECK(batch_read(&b, &(struct remote_src){.pid = getpid()}) == 0);
    batch_reset(&b);
    CHECK(batch_add(&b, at(mem), 8) == 0);
    CHECK(batch_add_alone(&b, at(gone), 8) == 1);
    CHECK(batch_read(&b, &(struct remote_src){.pid = getpid()}) ==
          -EFAULT); /* a range that is not mapped */
    batch_free(&b);
    return 0;
}

/* batch_find_in() agrees with the linear batch_find() on every byte, inside and around a
 * window of ascending spans that follows spans outside it. */
int test_batch_window_search(void)
{
    static uint8_t mem[64 * 1024];
    struct batch_window w;
    struct batch b;

    CHECK(batch_init(&b, 16384, 64) == 0);
    CHECK(batch_add_alone(&b, at(mem + 60000), 16) == 0); /* before the window: not searched */
    w.lo = (int)b.n;
    for (size_t k = 0; k < 20; k++) /* 20 spans of 40 bytes, 2 KiB apart */
        CHECK(batch_add(&b, at(mem + 1000 + k * 2048), 40) == (int)(k + 1));
    w.hi = (int)b.n;
    CHECK(batch_read(&b, &(struct remote_src){.pid = getpid()}) == 0);
    for (size_t off = 0; off < 45000; off += 3) {
        const uint8_t *lin = batch_find(&b, at(mem + off), 8);
        CHECK(batch_find_in(&b, w, at(mem + off), 8) == lin);
    }
    CHECK(batch_find(&b, at(mem + 60000), 8) != NULL);
    CHECK(batch_find_in(&b, w, at(mem + 60000), 8) == NULL);
    CHECK(batch_find_in(&b, (struct batch_window){0, 0}, at(mem + 1000), 8) == NULL);
    batch_free(&b);
    return 0;
}

/* A range from the target that wraps past 2^64 (a freed frame's f_back read from a dying
 * process: CI's hammer crashed on 3.11 with the pointer batch_find_in() then returned) is
 * found by neither lookup: raddr + len wrapped to a small number, below the span's end. */
int test_batch_lookup_of_a_wrapping_range(void)
{
    static uint8_t mem[8192];
    struct batch_window w;
    struct batch b;
    uint64_t wraps = UINT64_MAX - 7; /* + 16 wraps to 8 */

    CHECK(batch_init(&b, 16384, 8) == 0);
    w.lo = (int)b.n;
    CHECK(batch_add(&b, at(mem), 64) == 0);
    CHECK(batch_add(&b, at(mem + 4096), 64) == 1);
    w.hi = (int)b.n;
    CHECK(batch_read(&b, &(struct remote_src){.pid = getpid()}) == 0);
    CHECK(batch_find_in(&b, w, wraps, 16) == NULL);
    CHECK(batch_find(&b, wraps, 16) == NULL);
    CHECK(batch_find_in(&b, w, at(mem + 4096 + 48), 16) != NULL); /* the span's last bytes */
    CHECK(batch_find_in(&b, w, at(mem + 4096 + 49), 16) == NULL);
    batch_free(&b);
    return 0;
}
