/* Unit tests: pyf_mixed_order(), where Python frames go among native ones (native.c). */
#include <stdbool.h>
#include <stdint.h>

#include "pyframes_native.h"
#include "unit.h"

int test_mixed_order(void);

/* A Python stack of @n frames whose entry flags are @entry ("1": entry), innermost first. */
static struct pyf_stack python_stack(struct pyf_frame *frames, const char *entry)
{
    size_t n = strlen(entry);

    for (size_t k = 0; k < n; k++)
        frames[k] = (struct pyf_frame){.entry = entry[k] == '1'};
    return (struct pyf_stack){.frames = frames, .n_frames = n, .cap = n};
}

/* The order as text: native index as a digit, Python index k as a letter ('a' + k). */
static void as_text(const int32_t *order, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = order[i] >= 0 ? (char)('0' + order[i]) : (char)('a' - order[i] - 1);
    out[n] = '\0';
}

/* @eval ("E" eval loop, "." other) against Python entry flags @entry. */
static void order_of(const char *eval, const char *entry, char *out, bool *agree)
{
    bool loops[16];
    struct pyf_frame frames[16];
    struct pyf_stack st = python_stack(frames, entry);
    int32_t order[32];
    size_t n_native = strlen(eval);

    for (size_t i = 0; i < n_native; i++)
        loops[i] = eval[i] == 'E';
    as_text(order, pyf_mixed_order(loops, n_native, &st, order, agree), out);
}

int test_mixed_order(void)
{
    char out[64];
    bool agree;

    /* <= 3.10: every Python frame has its own eval loop call */
    order_of(".E.E.", "11", out, &agree);
    CHECK_STR(out, "0a2b4");
    CHECK(agree);
    /* 3.11+: one eval loop runs frames called inline, up to and including the entry */
    order_of("..E..E.", "0011", out, &agree);
    CHECK_STR(out, "01abc34d6");
    CHECK(agree);
    /* native only (a thread with no Python frames) */
    order_of("...", "", out, &agree);
    CHECK_STR(out, "012");
    CHECK(agree);
    /* the Python stack moved on: an eval loop left with no frame stays, and says so */
    order_of(".E.E.", "1", out, &agree);
    CHECK_STR(out, "0a234");
    CHECK(!agree);
    /* the native unwind stopped early: Python frames left over go last */
    order_of(".E", "101", out, &agree);
    CHECK_STR(out, "0abc");
    CHECK(!agree);
    /* Python frames but no entry among them (a torn or truncated read) never agree */
    order_of(".E", "00", out, &agree);
    CHECK_STR(out, "0ab");
    CHECK(!agree);
    return 0;
}
