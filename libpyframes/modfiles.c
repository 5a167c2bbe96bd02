/* modfiles.c - see modfiles.h. */
#define _GNU_SOURCE
#include "modfiles.h"
#include "pyframes.h"

#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DELETED " (deleted)"

static __thread struct modfiles *current;

void modfiles_init(struct modfiles *m, pid_t pid)
{
    *m = (struct modfiles){.pid = pid};
}

void modfiles_forget_maps(struct modfiles *m)
{
    if (m->maps_read)
        procmaps_free(&m->maps);
    m->maps_read = false;
}

void modfiles_release(struct modfiles *m)
{
    modfiles_forget_maps(m);
    if (current == m)
        current = NULL;
}

void modfiles_enter(struct modfiles *m)
{
    current = m;
}

/* @path (absolute, as the target names it) inside the target's root: symlinks resolve in that
 * root (@resolve adds to that), never into ours. */
static int open_in_root(pid_t pid, const char *path, uint64_t resolve)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | resolve};
    char root[32];
    int dir, fd, e;

    snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
    dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    while (*path == '/')
        path++;
    fd = (int)syscall(SYS_openat2, dir, path, &how, sizeof(how));
    e = errno;
    close(dir);
    errno = e;
    return pyf_open_regular(fd);
}

int pyf_open_in_root(pid_t pid, const char *path)
{
    return open_in_root(pid, path, 0);
}

/* The mapped file itself: /proc/PID/map_files/START-END of the module's first mapping. */
static int open_mapped(struct modfiles *m, const char *path, Dwarf_Addr base)
{
    char link[80];
    size_t len = strlen(path);

    if (len > strlen(DELETED) && strcmp(path + len - strlen(DELETED), DELETED) == 0)
        len -= strlen(DELETED); /* procmaps strips it */
    for (int pass = 0; pass < 2; pass++) {
        if (!m->maps_read && procmaps_read(m->pid, &m->maps) == 0)
            m->maps_read = true;
        for (size_t i = 0; m->maps_read && i < m->maps.n; i++) {
            const struct procmap *p = &m->maps.maps[i];
            if (p->end <= base || strlen(p->path) != len || memcmp(p->path, path, len) != 0)
                continue;
            snprintf(link, sizeof(link), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)m->pid,
                     p->start, p->end);
            return pyf_open_regular(open(link, O_PATH | O_CLOEXEC));
        }
        modfiles_forget_maps(m); /* mapped since the maps were read: once more */
    }
    return -1;
}

int modfiles_find_elf(Dwfl_Module *mod, void **userdata, const char *module_name, Dwarf_Addr base,
                      char **file_name, Elf **elfp)
{
    struct modfiles *m = current;
    int fd;

    if (!m || m->pid <= 0)
        return -1;
    if (module_name[0] != '/') /* [vdso]: read from the process's memory, no file */
        return dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp);
    fd = open_mapped(m, module_name, base);
    if (fd < 0) /* no CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) for map_files: the path */
        fd = open_in_root(m->pid, module_name, 0);
    if (fd < 0 && strlen(module_name) > strlen(DELETED) &&
        strcmp(module_name + strlen(module_name) - strlen(DELETED), DELETED) == 0)
        /* deleted, and no map_files: libdw reads it from the process's memory if it can */
        return dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp);
    if (fd < 0)
        return -1;
    *file_name = strdup(module_name);
    if (!*file_name) {
        close(fd);
        return -1;
    }
    return fd; /* libdw reads the ELF from it */
}

/* @fd when its ELF's build-id is @id, else closed. */
static int same_build_id(int fd, const void *id, int id_len)
{
    Elf *elf = fd >= 0 ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
    const void *got = NULL;
    bool same = elf && dwelf_elf_gnu_build_id(elf, &got) == id_len && memcmp(got, id, id_len) == 0;

    if (elf)
        elf_end(elf);
    if (fd >= 0 && !same) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Keeps @fd (a candidate that is the module's debug file) and names it, or closes it. */
static int found(int fd, const void *id, int id_len, const char *name, char **ret_name)
{
    fd = same_build_id(fd, id, id_len);
    if (fd >= 0 && !(*ret_name = strdup(name))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether @mod's own file has a symbol table (libdw loaded it before asking for its debug
 * file): only a module without one is worth a fetch. */
static bool has_symtab(Dwfl_Module *mod)
{
    Dwarf_Addr bias;
    Elf *elf = dwfl_module_getelf(mod, &bias);
    Elf_Scn *scn = NULL;

    while (elf && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB)
            return true;
    }
    return !elf; /* no file to judge: nothing to fetch for */
}

/* debuginfod's cache: where its client keeps what it fetched, by build-id. */
static int open_debuginfod_cache(const char *hex, char *name, size_t size)
{
    const char *dir = getenv("DEBUGINFOD_CACHE_PATH"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");

    if (dir && dir[0] == '/')
        snprintf(name, size, "%s/%s/debuginfo", dir, hex);
    else if (xdg && xdg[0] == '/')
        snprintf(name, size, "%s/debuginfod_client/%s/debuginfo", xdg, hex);
    else if (home && home[0] == '/')
        snprintf(name, size, "%s/.cache/debuginfod_client/%s/debuginfo", home, hex);
    else
        return -1;
    return pyf_open_regular(open(name, O_PATH | O_CLOEXEC | O_NOFOLLOW));
}

int modfiles_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *module_name,
                            Dwarf_Addr base, const char *file_name, const char *debuglink_file,
                            GElf_Word debuglink_crc, char **debuginfo_file_name)
{
    struct modfiles *m = current;
    const unsigned char *id = NULL;
    GElf_Addr id_vaddr;
    int id_len = dwfl_module_build_id(mod, &id, &id_vaddr), fd = -1;
    char hex[2 * 64 + 1], name[4096], dir[4096];

    (void)userdata, (void)base, (void)debuglink_crc;
    /* without a build-id nothing proves a candidate is this file's (a CRC would mean reading
     * all of it): left without */
    if (!m || m->pid <= 0 || id_len <= 0 || id_len > 64)
        return -1;
    for (int i = 0; i < id_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", id[i]);
    /* by build-id: the target's debug files (its container's), then this machine's */
    snprintf(name, sizeof(name), "/usr/lib/debug/.build-id/%.2s/%s.debug", hex, hex + 2);
    fd = found(open_in_root(m->pid, name, 0), id, id_len, name, debuginfo_file_name);
    if (fd < 0)
        fd = found(pyf_open_regular(open(name, O_PATH | O_CLOEXEC)), id, id_len, name,
                   debuginfo_file_name);
    /* by .gnu_debuglink: beside the file, in its .debug folder, under /usr/lib/debug; the
     * folder may be the target owner's, so no symlink is followed there */
    const char *main_name = file_name ? file_name : module_name;
    const char *slash = strrchr(main_name, '/');
    if (fd < 0 && debuglink_file && debuglink_file[0] && !strchr(debuglink_file, '/') && slash &&
        main_name[0] == '/') {
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - main_name), main_name);
        const char *const forms[] = {"%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s"};
        for (size_t i = 0; fd < 0 && i < sizeof(forms) / sizeof(forms[0]); i++) {
            snprintf(name, sizeof(name), forms[i], dir, debuglink_file);
            fd = found(open_in_root(m->pid, name, RESOLVE_NO_SYMLINKS), id, id_len, name,
                       debuginfo_file_name);
        }
    }
    if (fd < 0)
        fd = found(open_debuginfod_cache(hex, name, sizeof(name)), id, id_len, name,
                   debuginfo_file_name);
    if (fd < 0 && m->fetch && !has_symtab(mod))
        fetchdbg_request(m->fetch, id, (size_t)id_len); /* named once it lands */
    return fd;
}
