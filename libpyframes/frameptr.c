/* frameptr.c - finding a frame's rbp in a stack copy, with proof; see frameptr.h. */
#define _GNU_SOURCE
#include "frameptr.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define DWARF_RBP 6

/* The CFA rule of the frame at @lookup: rbp + *ret_offset; the function's first byte. */
static int rbp_rule(Dwfl *dwfl, uint64_t lookup, int64_t *ret_offset, uint64_t *ret_start)
{
    Dwfl_Module *m = dwfl_addrmodule(dwfl, lookup);
    Dwarf_Addr bias = 0, start, end;
    Dwarf_CFI *cfi = m ? dwfl_module_eh_cfi(m, &bias) : NULL;
    Dwarf_Frame *frame = NULL;
    Dwarf_Op *ops;
    size_t n_ops;
    int r = -1;

    if (!cfi || dwarf_cfi_addrframe(cfi, lookup - bias, &frame) != 0)
        return -1;
    if (dwarf_frame_info(frame, &start, &end, NULL) >= 0 &&
        dwarf_frame_cfa(frame, &ops, &n_ops) == 0 && n_ops == 1) {
        if (ops[0].atom == DW_OP_breg0 + DWARF_RBP) {
            *ret_offset = (int64_t)ops[0].number;
            r = 0;
        } else if (ops[0].atom == DW_OP_bregx && ops[0].number == DWARF_RBP) {
            *ret_offset = (int64_t)ops[0].number2;
            r = 0;
        }
        *ret_start = start + bias;
    }
    free(frame);
    return r;
}

/* The length of the indirect call (ff /2, with an optional REX prefix) starting at @c, or 0. */
size_t frameptr_indirect_call_len(const uint8_t *c, size_t avail)
{
    size_t rex = (c[0] & 0xf0) == 0x40, len;
    uint8_t modrm, mod, rm;

    if (avail < rex + 2 || c[rex] != 0xff)
        return 0;
    modrm = c[rex + 1];
    mod = modrm >> 6, rm = modrm & 7;
    if (((modrm >> 3) & 7) != 2)
        return 0;
    len = rex + 2;
    if (mod != 3 && rm == 4)
        len++; /* SIB */
    if (mod == 1)
        len += 1;
    else if (mod == 2 || (mod == 0 && rm == 5)) /* disp32, or RIP-relative */
        len += 4;
    else if (mod == 0 && rm == 4 && avail > rex + 2 && (c[rex + 2] & 7) == 5)
        len += 4; /* SIB with no base: disp32 */
    return len;
}

/*
 * Whether @ra in @pid follows a call: a direct one of @target (its rel32 says where it goes),
 * or an indirect one (whose target no byte says: the caller then takes it only if the unwind
 * from there reaches the thread's first function).
 */
static int call_before(pid_t pid, uint64_t ra, uint64_t target)
{
    uint8_t code[8];
    struct iovec local = {.iov_base = code, .iov_len = sizeof(code)};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)(ra - sizeof(code)),
                           .iov_len = sizeof(code)};
    int32_t rel;

    if (ra < sizeof(code) || process_vm_readv(pid, &local, 1, &remote, 1, 0) != sizeof(code))
        return 0;
    if (code[3] == 0xe8) {
        memcpy(&rel, code + 4, sizeof(rel));
        if (ra + (uint64_t)(int64_t)rel == target)
            return FRAMEPTR_DIRECT;
    }
    for (size_t at = 0; at + 2 <= sizeof(code); at++)
        if (frameptr_indirect_call_len(code + at, sizeof(code) - at) == sizeof(code) - at)
            return FRAMEPTR_INDIRECT;
    return 0;
}

int frameptr_find(Dwfl *dwfl, pid_t pid, const struct pyf_stack_copy *copy, uint64_t pc,
                  bool innermost, uint64_t sp, uint64_t *ret_rbp)
{
    uint64_t base = copy->regs[PYF_DWARF_SP], start;
    int64_t offset;

    if (rbp_rule(dwfl, innermost ? pc : pc - 1, &offset, &start) < 0 || offset < 16 ||
        offset > 4096 || sp < base || sp - base > copy->size)
        return -1;
    /* rbp lies at or above the frame's sp; its return address at rbp + offset - 8 */
    for (uint64_t a = sp; a - base + (uint64_t)offset <= copy->size; a += 8) {
        uint64_t ra;
        memcpy(&ra, copy->stack + (a - base) + offset - 8, sizeof(ra));
        int how;
        if (dwfl_addrmodule(dwfl, ra - 1) && (how = call_before(pid, ra, start)) != 0) {
            *ret_rbp = a;
            return how;
        }
    }
    return -1;
}
