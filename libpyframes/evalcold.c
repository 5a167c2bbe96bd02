/*
 * evalcold.c - where the unnamed cold part of a stripped interpreter's eval loop is.
 *
 * GCC splits a function's rarely run blocks into a part of their own, foo.cold, in
 * .text.unlikely; with PGO that can be most of _PyEval_EvalFrameDefault (Debian's 3.14 runs
 * every call to a builtin from it). A stripped binary keeps only .dynsym, which names the hot
 * part alone, so a native frame in the cold part would not be known for the eval loop and
 * Python frames could not be merged into the native stack.
 *
 * The unwind tables still tell: the assembler writes a function's FDEs to .eh_frame in the
 * order their parts were emitted, so the cold part's FDE is the one right after the hot
 * part's. It is taken only when the hot part jumps into it (a conditional or plain jump,
 * rel32: calls and other functions' tail calls are not jumps from the hot part to a block of
 * its own), and only when no named function covers it. Every byte read is bounds-checked:
 * the file is the target's.
 */
#include "evalcold.h"

#include <gelf.h>
#include <stdbool.h>
#include <string.h>

/* DW_EH_PE_* (the pointer encodings of .eh_frame) we decode: 4-byte values, absolute or
 * relative to where they are stored; an FDE of any other encoding ends the search. */
#define PE_UDATA4 0x03
#define PE_SDATA4 0x0b
#define PE_PCREL 0x10
#define PE_OMIT 0xff

struct bytes {
    const uint8_t *p;
    size_t n;
    uint64_t addr; /* the address of p[0] */
};

static bool uleb(const struct bytes *b, size_t *at, uint64_t *ret)
{
    uint64_t v = 0;

    for (unsigned shift = 0; *at < b->n && shift < 64; shift += 7) {
        uint8_t c = b->p[(*at)++];
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *ret = v;
            return true;
        }
    }
    return false;
}

static bool u32_at(const struct bytes *b, size_t at, uint32_t *ret)
{
    if (at > b->n || b->n - at < 4)
        return false;
    memcpy(ret, b->p + at, 4);
    return true;
}

/* A 4-byte encoded pointer at @at (pc-relative when @enc says). */
static bool pointer_at(const struct bytes *b, size_t at, uint8_t enc, bool range, uint64_t *ret)
{
    uint32_t v;

    if ((enc & 0x0f) != PE_UDATA4 && (enc & 0x0f) != PE_SDATA4)
        return false;
    if ((enc & 0x70) != 0 && (enc & 0x70) != PE_PCREL)
        return false;
    if (!u32_at(b, at, &v))
        return false;
    *ret = (enc & 0x0f) == PE_SDATA4 ? (uint64_t)(int64_t)(int32_t)v : v;
    if (!range && (enc & 0x70) == PE_PCREL)
        *ret += b->addr + at;
    return true;
}

/* The FDE pointer encoding of the CIE at @at ("zR" augmentation), or PE_OMIT. */
static uint8_t cie_encoding(const struct bytes *b, size_t at)
{
    uint64_t skip;
    const char *aug;
    size_t end;

    at += 8;                         /* length, CIE id */
    if (at >= b->n || b->p[at] != 1) /* version 1: the return register is a byte */
        return PE_OMIT;
    aug = (const char *)b->p + at + 1;
    end = at + 1;
    while (end < b->n && b->p[end])
        end++;
    if (end >= b->n || aug[0] != 'z')
        return PE_OMIT;
    at = end + 1;
    if (!uleb(b, &at, &skip) || !uleb(b, &at, &skip) || at >= b->n) /* code and data align */
        return PE_OMIT;
    at++;                     /* return address register */
    if (!uleb(b, &at, &skip)) /* augmentation data length */
        return PE_OMIT;
    for (const char *c = aug + 1; *c; c++) {
        if (at >= b->n)
            return PE_OMIT;
        if (*c == 'R')
            return b->p[at];
        if (*c == 'L')
            at++;
        else if (*c == 'P') { /* personality: an encoding, then a pointer of it */
            uint8_t penc = b->p[at++];
            if ((penc & 0x0f) != PE_UDATA4 && (penc & 0x0f) != PE_SDATA4)
                return PE_OMIT;
            at += 4;
        } else if (*c != 'S' && *c != 'B')
            return PE_OMIT;
    }
    return PE_OMIT;
}

/* The FDE at @at: its range; false at the end, a CIE, or what cannot be decoded. */
static bool fde_at(const struct bytes *b, size_t at, uint64_t *start, uint64_t *end)
{
    uint32_t cie_ptr, len;
    uint8_t enc;
    uint64_t range;

    if (!u32_at(b, at, &len) || len == 0 || len == 0xffffffffu || !u32_at(b, at + 4, &cie_ptr) ||
        cie_ptr == 0 || cie_ptr > at + 4)
        return false;
    enc = cie_encoding(b, at + 4 - cie_ptr);
    if (enc == PE_OMIT || !pointer_at(b, at + 8, enc, false, start) ||
        !pointer_at(b, at + 12, enc, true, &range))
        return false;
    *end = *start + range;
    return true;
}

static bool section(Elf *elf, const char *want, uint64_t addr, struct bytes *ret)
{
    size_t shstrndx;
    Elf_Scn *scn = NULL;

    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        return false;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        const char *name;
        Elf_Data *d;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS)
            continue;
        name = elf_strptr(elf, shstrndx, sh.sh_name);
        if (want ? !name || strcmp(name, want) != 0
                 : !(sh.sh_flags & SHF_EXECINSTR) || addr < sh.sh_addr ||
                       addr - sh.sh_addr >= sh.sh_size)
            continue;
        d = elf_getdata(scn, NULL);
        if (!d || !d->d_buf || d->d_size > sh.sh_size)
            return false;
        *ret = (struct bytes){.p = d->d_buf, .n = d->d_size, .addr = sh.sh_addr};
        return true;
    }
    return false;
}

/* Whether the code in [@start, @end) jumps (jcc or jmp, rel32) into [@lo, @hi). */
static bool jumps_into(const struct bytes *text, uint64_t start, uint64_t end, uint64_t lo,
                       uint64_t hi)
{
    if (start < text->addr || end > text->addr + text->n || end <= start)
        return false;
    for (uint64_t a = start; a + 6 <= end; a++) {
        const uint8_t *c = text->p + (a - text->addr);
        int32_t rel;
        uint64_t to;
        if (c[0] == 0x0f && (c[1] & 0xf0) == 0x80) {
            memcpy(&rel, c + 2, 4);
            to = a + 6 + (uint64_t)(int64_t)rel;
        } else if (c[0] == 0xe9) {
            memcpy(&rel, c + 1, 4);
            to = a + 5 + (uint64_t)(int64_t)rel;
        } else {
            continue;
        }
        if (to >= lo && to < hi)
            return true;
    }
    return false;
}

int evalcold_scan(const uint8_t *eh_frame, size_t eh_size, uint64_t eh_addr, const uint8_t *code,
                  size_t code_size, uint64_t code_addr, uint64_t hot_start, uint64_t hot_end,
                  uint64_t *ret_start, uint64_t *ret_end)
{
    const struct bytes eh = {.p = eh_frame, .n = eh_size, .addr = eh_addr};
    const struct bytes text = {.p = code, .n = code_size, .addr = code_addr};
    bool after_hot = false;

    for (size_t at = 0; at + 8 <= eh.n;) {
        uint32_t len, id;
        uint64_t start, end;
        if (!u32_at(&eh, at, &len) || len == 0 || len == 0xffffffffu || !u32_at(&eh, at + 4, &id))
            return -1;
        if (id != 0 && fde_at(&eh, at, &start, &end)) {
            if (after_hot) {
                if ((end <= hot_start || start >= hot_end) && end > start &&
                    jumps_into(&text, hot_start, hot_end, start, end)) {
                    *ret_start = start;
                    *ret_end = end;
                    return 0;
                }
                return -1;
            }
            after_hot = start == hot_start;
        }
        if (len > eh.n - at - 4)
            return -1;
        at += 4 + (size_t)len;
    }
    return -1;
}

int evalcold_find(Elf *elf, uint64_t hot_start, uint64_t hot_end, uint64_t *ret_start,
                  uint64_t *ret_end)
{
    struct bytes eh, text;

    if (!elf || !section(elf, ".eh_frame", 0, &eh) || !section(elf, NULL, hot_start, &text))
        return -1;
    return evalcold_scan(eh.p, eh.n, eh.addr, text.p, text.n, text.addr, hot_start, hot_end,
                         ret_start, ret_end);
}
