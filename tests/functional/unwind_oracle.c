/*
 * unwind_oracle.c - libunwind-ptrace as a second opinion on libdw's unwinding (test_core.py).
 *
 *   unwind_oracle PID
 *
 * Holds every thread of PID (pyf_stop_process: PTRACE_SEIZE + PTRACE_INTERRUPT), unwinds each
 * with libpyframes (libdw) and with libunwind-ptrace, lets them go, and prints per thread
 * "tid libdw-pcs | libunwind-pcs" in hex. Exit 0 when every thread's two unwinds agree frame
 * for frame (the outermost frame aside: the two stop at different places past _start and
 * clone3), 1 otherwise, 2 when the process cannot be held.
 */
#define _GNU_SOURCE
#include <libunwind-ptrace.h>
#include <stdio.h>
#include <stdlib.h>

#include "pyframes_native.h"

#define DEPTH 256

static size_t unwind_libunwind(pid_t tid, uint64_t *pcs, size_t cap)
{
    unw_addr_space_t as = unw_create_addr_space(&_UPT_accessors, 0);
    void *upt = _UPT_create(tid);
    unw_cursor_t c;
    size_t n = 0;

    if (as && upt && unw_init_remote(&c, as, upt) == 0) {
        do {
            unw_word_t ip;
            if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
                break;
            pcs[n++] = ip;
        } while (n < cap && unw_step(&c) > 0);
    }
    if (upt)
        _UPT_destroy(upt);
    if (as)
        unw_destroy_addr_space(as);
    return n;
}

int main(int argc, char **argv)
{
    pid_t pid = argc == 2 ? (pid_t)atoi(argv[1]) : 0;
    struct pyf_stopped *held = NULL;
    struct pyf_native *nat = NULL;
    struct pyf_err e = {0};
    int bad = 0;

    if (pid <= 0) {
        fprintf(stderr, "usage: unwind_oracle PID\n");
        return 2;
    }
    if (pyf_native_open(pid, NULL, &nat, &e) < 0 || pyf_stop_process(pid, &held, &e) < 0) {
        fprintf(stderr, "unwind_oracle: %s\n", e.msg);
        pyf_native_free(nat);
        return 2;
    }
    for (size_t i = 0; i < pyf_stopped__n(held); i++) {
        pid_t tid = pyf_stopped__tid(held, i);
        uint64_t dw[DEPTH], lu[DEPTH];
        size_t n_dw = 0, n_lu = unwind_libunwind(tid, lu, DEPTH), same = 0;
        bool truncated;

        if (pyf_native__unwind(nat, tid, dw, DEPTH, &n_dw, &truncated, &e) < 0)
            n_dw = 0;
        while (same < n_dw && same < n_lu && dw[same] == lu[same])
            same++;
        printf("%d", (int)tid);
        for (size_t k = 0; k < n_dw; k++)
            printf(" %llx", (unsigned long long)dw[k]);
        printf(" |");
        for (size_t k = 0; k < n_lu; k++)
            printf(" %llx", (unsigned long long)lu[k]);
        printf("\n");
        /* agree on every frame but at most the outermost of the longer one */
        if (n_dw < 3 || same + 1 < (n_dw > n_lu ? n_dw : n_lu))
            bad = 1;
    }
    pyf_stopped_free(held);
    pyf_native_free(nat);
    return bad;
}
