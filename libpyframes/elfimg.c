/* elfimg.c - ELF symbol lookup with libelf; see elfimg.h. */
#define _GNU_SOURCE
#include "elfimg.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "err.h"

struct elfimg {
    int fd;
    Elf *elf;
    Elf_Scn *symtab, *dynsym; /* NULL when absent */
};

/* Whether @fd is a file of an overlay mount (a container's): /proc/PID/maps names the layer's
 * inode, which the overlay may number otherwise (xino). */
static bool on_overlay(int fd)
{
    struct statfs sf;

    return fstatfs(fd, &sf) == 0 && sf.f_type == 0x794c7630; /* OVERLAYFS_SUPER_MAGIC */
}

/* A FIFO or a device may block or never end, and opening some has effects of its own (a tape
 * rewinds): a name a target's user controls is never opened as root unless it is a regular
 * file. */
int pyf_open_regular(int path_fd)
{
    struct stat st;
    char self[32];
    int opened = -1, e = EINVAL;

    if (path_fd < 0)
        return -1;
    if (fstat(path_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(self, sizeof(self), "/proc/self/fd/%d", path_fd);
        opened = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        e = errno;
    }
    close(path_fd);
    if (opened < 0)
        errno = e;
    return opened;
}

int elfimg_open(const char *path, uint64_t inode, struct elfimg **ret_img, struct pyf_err *reterr)
{
    struct elfimg *img;
    Elf_Scn *scn = NULL;
    struct stat st;
    int r;

    if (elf_version(EV_CURRENT) == EV_NONE)
        return pyf_fail(reterr, PYF_INVALID, 0, 0, "libelf: %s", elf_errmsg(-1));
    img = calloc(1, sizeof(*img));
    if (!img)
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "elfimg");
    /* looked up, not opened (O_PATH): a device or FIFO at the name is never opened */
    img->fd = open(path, O_PATH | O_CLOEXEC);
    if (img->fd >= 0 && (fstat(img->fd, &st) < 0 || !S_ISREG(st.st_mode) ||
                         (inode && (uint64_t)st.st_ino != inode && !on_overlay(img->fd)))) {
        close(img->fd);
        free(img);
        return pyf_fail(reterr, PYF_DENIED, EPERM, 0,
                        "%s is not the file mapped (inode %llu): swapped since, refused", path,
                        (unsigned long long)inode);
    }
    if (img->fd >= 0) /* the regular file looked up, opened for reading */
        img->fd = pyf_open_regular(img->fd);
    if (img->fd < 0) {
        r = errno;
        free(img);
        return pyf_fail(reterr,
                        r == EACCES || r == EPERM   ? PYF_DENIED
                        : r == ENOENT || r == ESRCH ? PYF_GONE
                                                    : PYF_INVALID, /* EMFILE: not the process */
                        r, 0, "open %s", path);
    }
    img->elf = elf_begin(img->fd, ELF_C_READ_MMAP, NULL);
    if (!img->elf || elf_kind(img->elf) != ELF_K_ELF || gelf_getclass(img->elf) != ELFCLASS64) {
        r = pyf_fail(reterr, PYF_INVALID, 0, 0, "%s: not a 64-bit ELF file (%s)", path,
                     elf_errmsg(-1));
        elfimg_free(img);
        return r;
    }
    while ((scn = elf_nextscn(img->elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        if (sh.sh_type == SHT_SYMTAB)
            img->symtab = scn;
        else if (sh.sh_type == SHT_DYNSYM)
            img->dynsym = scn;
    }
    *ret_img = img;
    return 0;
}

void elfimg_free(struct elfimg *img)
{
    if (!img)
        return;
    if (img->elf)
        elf_end(img->elf);
    if (img->fd >= 0)
        close(img->fd);
    free(img);
}

bool elfimg__has_symtab(const struct elfimg *img)
{
    return img->symtab != NULL;
}

/* Scans the table's raw Elf64_Sym array and its string table directly: a lookup runs at
 * every attach, often for a name the file lacks (Python 2's, 3.6's), over tens of thousands
 * of symbols, and gelf_getsym()/elf_strptr() per symbol cost several times the comparison.
 * The file is the target's: every name offset is bounds-checked against the string table. */
static int find_in(Elf *elf, Elf_Scn *scn, const char *name, uint64_t *ret_vaddr)
{
    size_t len = strlen(name);
    const Elf64_Sym *syms;
    const char *strs;
    Elf_Data *data, *strdata;
    size_t n, strsz;
    GElf_Shdr sh;

    if (!scn || !gelf_getshdr(scn, &sh))
        return -ENOENT;
    data = elf_getdata(scn, NULL);
    strdata = elf_getdata(elf_getscn(elf, sh.sh_link), NULL);
    if (!data || !data->d_buf || data->d_type != ELF_T_SYM || !strdata || !strdata->d_buf)
        return -ENOENT;
    syms = data->d_buf;
    n = data->d_size / sizeof(Elf64_Sym); /* 64-bit only: elfimg_open() checked the class */
    strs = strdata->d_buf;
    strsz = strdata->d_size;
    for (size_t i = 0; i < n; i++) {
        const Elf64_Sym *sym = &syms[i];
        /* Compares len + 1 bytes: the name and its NUL, all within the table. */
        if (sym->st_name >= strsz || strsz - sym->st_name <= len || strs[sym->st_name] != name[0] ||
            memcmp(strs + sym->st_name, name, len + 1) != 0)
            continue;
        if (sym->st_shndx == SHN_UNDEF || sym->st_value == 0)
            continue;
        *ret_vaddr = sym->st_value;
        return 0;
    }
    return -ENOENT;
}

int elfimg__symbol(const struct elfimg *img, const char *name, uint64_t *ret_vaddr)
{
    /* .symtab first: it also has the static symbols (3.6's interp_head). */
    if (find_in(img->elf, img->symtab, name, ret_vaddr) == 0)
        return 0;
    return find_in(img->elf, img->dynsym, name, ret_vaddr);
}

int elfimg__first_load(const struct elfimg *img, uint64_t *ret_vaddr, uint64_t *ret_offset)
{
    size_t n;

    if (elf_getphdrnum(img->elf, &n) != 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(img->elf, (int)i, &ph) || ph.p_type != PT_LOAD)
            continue;
        *ret_vaddr = ph.p_vaddr & ~0xfffULL;
        *ret_offset = ph.p_offset & ~0xfffULL;
        return 0;
    }
    return -ENOENT;
}

/* Parses "M.N.P[(a|b|rc)K][+]" exactly, the whole string. */
static bool parse_version(const char *s, int *major, int *minor)
{
    char *end;
    long a, b;

    if (!isdigit((unsigned char)s[0]))
        return false;
    a = strtol(s, &end, 10);
    if (*end != '.' || !isdigit((unsigned char)end[1]))
        return false;
    b = strtol(end + 1, &end, 10);
    if (*end != '.' || !isdigit((unsigned char)end[1]))
        return false;
    strtol(end + 1, &end, 10);
    if (*end == 'a' || *end == 'b' || (end[0] == 'r' && end[1] == 'c')) {
        end += *end == 'r' ? 2 : 1;
        if (!isdigit((unsigned char)*end))
            return false;
        strtol(end, &end, 10);
    }
    if (*end == '+')
        end++;
    if (*end != '\0' || a < 2 || a > 3 || b < 0 || b > 99)
        return false;
    *major = (int)a;
    *minor = (int)b;
    return true;
}

int elfimg_scan_version(const unsigned char *data, size_t len, int major, int minor, char *buf,
                        size_t size)
{
    size_t i = 0;

    while (i < len) {
        size_t start = i, slen;
        char tmp[24];
        int ma, mi;

        while (i < len && data[i] != '\0')
            i++;
        slen = i - start;
        i++; /* the NUL */
        /* The linker merges a string literal into the tail of a longer one that ends the
         * same way ("/tmp/build/Python-3.9.18"), so PY_VERSION may be a suffix: try each
         * tail that starts after a non-version character. */
        for (size_t skip = 0; slen >= 5 && skip + 5 <= slen; skip++) {
            const unsigned char *p = data + start + skip;
            if (skip > 0 && (isdigit(p[-1]) || p[-1] == '.'))
                continue;
            if (slen - skip >= sizeof(tmp) || !isdigit(p[0]))
                continue;
            memcpy(tmp, p, slen - skip);
            tmp[slen - skip] = '\0';
            if (!parse_version(tmp, &ma, &mi) || ma != major || (minor >= 0 && mi != minor))
                continue;
            snprintf(buf, size, "%s", tmp);
            return 0;
        }
    }
    return -ENOENT;
}

int elfimg__find_version(const struct elfimg *img, int major, int minor, char *buf, size_t size)
{
    Elf_Scn *scn = NULL;
    size_t shstrndx;

    if (elf_getshdrstrndx(img->elf, &shstrndx) != 0)
        return -EINVAL;
    while ((scn = elf_nextscn(img->elf, scn)) != NULL) {
        GElf_Shdr sh;
        const char *name;
        Elf_Data *data;

        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS)
            continue;
        name = elf_strptr(img->elf, shstrndx, sh.sh_name);
        if (!name || strcmp(name, ".rodata") != 0)
            continue;
        data = elf_getdata(scn, NULL);
        if (data && data->d_buf &&
            elfimg_scan_version(data->d_buf, data->d_size, major, minor, buf, size) == 0)
            return 0;
    }
    return -ENOENT;
}
