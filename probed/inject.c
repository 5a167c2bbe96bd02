/* inject.c - dlopen() inside a running process through ptrace; see inject.h. */
#define _GNU_SOURCE
#include "inject.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include "errbuf.h"

#define RANGES_MAX 16
#define SAFE_POINT_TRIES 500
#define XSTATE_BYTES (64 * 1024)
#define STRING_MAX 512

/* Where the target's libc and dynamic loader are: dlopen's address, and the code ranges
 * the main thread must not be stopped in (it could hold one of their locks). */
struct libs {
    char libc_path[4096];
    uint64_t libc_base;
    uint64_t unsafe[RANGES_MAX][2];
    size_t n_unsafe;
};

static bool is_libc(const char *base)
{
    return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0;
}

static bool is_loader(const char *base)
{
    return strncmp(base, "ld-linux", 8) == 0 || strncmp(base, "ld-2.", 5) == 0;
}

static int find_libs(pid_t pid, struct libs *l, char *err, size_t errlen)
{
    char path[64], line[4096 + 128];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return errbuf_set(err, errlen, -errno, "pid %d: open %s: %s", (int)pid, path,
                          strerror(errno));
    *l = (struct libs){0};
    while (fgets(line, sizeof(line), f)) {
        uint64_t lo, hi, off;
        char perms[8], file[4096] = "";
        const char *base;

        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %4095[^\n]", &lo, &hi,
                   perms, &off, file) < 4 ||
            file[0] != '/')
            continue;
        base = strrchr(file, '/') + 1;
        if (!is_libc(base) && !is_loader(base))
            continue;
        if (is_libc(base) && off == 0 && !l->libc_base) {
            l->libc_base = lo;
            snprintf(l->libc_path, sizeof(l->libc_path), "%s", file);
        }
        if (strchr(perms, 'x') && l->n_unsafe < RANGES_MAX) {
            l->unsafe[l->n_unsafe][0] = lo;
            l->unsafe[l->n_unsafe++][1] = hi;
        }
    }
    fclose(f);
    if (!l->libc_base)
        return errbuf_set(
            err, errlen, -ENOTSUP,
            "pid %d has no glibc mapped (a static or musl program): cannot load the stub",
            (int)pid);
    return 0;
}

/* @name's value in the .dynsym of the target's libc, read through /proc/PID/root. */
static int libc_symbol(pid_t pid, const struct libs *l, const char *name, uint64_t *ret, char *err,
                       size_t errlen)
{
    char path[4200];
    int fd, r = -ENOENT;
    Elf *elf = NULL;
    Elf_Scn *scn = NULL;

    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, l->libc_path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errbuf_set(err, errlen, -errno, "pid %d: open %s: %s", (int)pid, path,
                          strerror(errno));
    if (elf_version(EV_CURRENT) != EV_NONE)
        elf = elf_begin(fd, ELF_C_READ, NULL);
    while (elf && r == -ENOENT && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        Elf_Data *data;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !(data = elf_getdata(scn, NULL)))
            continue;
        for (size_t i = 0; sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            const char *s;
            if (!gelf_getsym(data, (int)i, &sym) || sym.st_value == 0 ||
                !(s = elf_strptr(elf, sh.sh_link, sym.st_name)) || strcmp(s, name) != 0)
                continue;
            *ret = l->libc_base + sym.st_value;
            r = 0;
            break;
        }
    }
    if (elf)
        elf_end(elf);
    close(fd);
    return r == 0 ? 0 : errbuf_set(err, errlen, r, "pid %d: %s has no %s", (int)pid, path, name);
}

/* Waits for the next stop of @pid: 0 and the status, or -ESRCH when it exited. */
static int wait_stop(pid_t pid, int *status)
{
    for (;;) {
        pid_t r = waitpid(pid, status, __WALL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (WIFEXITED(*status) || WIFSIGNALED(*status))
            return -ESRCH;
        if (WIFSTOPPED(*status))
            return 0;
    }
}

/* Interrupts @pid and waits for that stop, passing on any signal that arrives first. */
static int interrupt_stop(pid_t pid)
{
    int status, r;

    if (ptrace(PTRACE_INTERRUPT, pid, 0, 0) < 0)
        return -errno;
    while ((r = wait_stop(pid, &status)) == 0) {
        int sig = WSTOPSIG(status);
        if (status >> 16 == PTRACE_EVENT_STOP)
            return 0;
        if (ptrace(PTRACE_CONT, pid, 0, (void *)(intptr_t)sig) < 0) /* its own signal */
            return -errno;
    }
    return r;
}

static bool in_ranges(const struct libs *l, uint64_t ip)
{
    for (size_t i = 0; i < l->n_unsafe; i++)
        if (ip >= l->unsafe[i][0] && ip < l->unsafe[i][1])
            return true;
    return false;
}

/* Blocked in one of these, the thread holds no libc lock, and the call restarts after us. */
static bool safe_syscall(long nr)
{
    static const long ok[] = {
        0,   17,  19,  45,  47,
        43,  288, 42,            /* read pread64 readv recvfrom recvmsg accept* connect */
        23,  270, 7,   271,      /* select pselect6 poll ppoll */
        232, 281, 441,           /* epoll_wait epoll_pwait epoll_pwait2 */
        35,  230, 219, 202,      /* nanosleep clock_nanosleep restart_syscall futex */
        61,  247, 34,  130, 128, /* wait4 waitid pause rt_sigsuspend rt_sigtimedwait */
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (ok[i] == nr)
            return true;
    return false;
}

/* Stops the main thread where a call into libc is safe: in a blocking syscall, or running
 * code outside libc and the loader. Lets it run a little between tries. */
static int stop_at_safe_point(pid_t pid, const struct libs *l, struct user_regs_struct *regs,
                              char *err, size_t errlen)
{
    for (int i = 0; i < SAFE_POINT_TRIES; i++) {
        int r = interrupt_stop(pid);
        long nr;
        if (r < 0)
            return errbuf_set(err, errlen, r, "pid %d: stop the main thread: %s", (int)pid,
                              strerror(-r));
        if (ptrace(PTRACE_GETREGS, pid, 0, regs) < 0)
            return errbuf_set(err, errlen, -errno, "pid %d: read registers: %s", (int)pid,
                              strerror(errno));
        nr = (long)regs->orig_rax;
        if (nr >= 0 ? safe_syscall(nr) : !in_ranges(l, regs->rip))
            return 0;
        if (ptrace(PTRACE_CONT, pid, 0, 0) < 0)
            return errbuf_set(err, errlen, -errno, "pid %d: resume: %s", (int)pid, strerror(errno));
        usleep(200 + (unsigned)(i * 37 % 800));
    }
    return errbuf_set(
        err, errlen, -EAGAIN,
        "pid %d: the main thread never stopped at a safe point (it keeps running inside "
        "libc or the dynamic loader)",
        (int)pid);
}

static int mem_rw(int memfd, uint64_t at, void *buf, size_t len, bool write)
{
    ssize_t n = write ? pwrite(memfd, buf, len, (off_t)at) : pread(memfd, buf, len, (off_t)at);
    return n == (ssize_t)len ? 0 : -(n < 0 ? errno : EIO);
}

/*
 * Calls @fn(@a1, @a2) on the stopped thread and returns its rax. The call returns to address
 * 0, which stops the thread with SIGSEGV at rip 0: that is how we know it is done (the signal
 * is dropped on detach). orig_rax = -1 keeps the kernel from restarting the interrupted
 * syscall into our call; the caller restores the real registers afterwards.
 */
static int remote_call(pid_t pid, int memfd, const struct user_regs_struct *saved, uint64_t sp,
                       uint64_t fn, uint64_t a1, uint64_t a2, uint64_t *ret)
{
    struct user_regs_struct r = *saved;
    uint64_t zero = 0;
    int status, e;

    sp = (sp & ~0xfULL) - 8; /* as after a call: rsp % 16 == 8 at the function's entry */
    if ((e = mem_rw(memfd, sp, &zero, sizeof(zero), true)) < 0)
        return e;
    r.rsp = sp;
    r.rip = fn;
    r.rdi = a1;
    r.rsi = a2;
    r.rax = 0;
    r.orig_rax = (uint64_t)-1;
    r.eflags &= ~0x400ULL; /* DF clear, as the ABI requires */
    if (ptrace(PTRACE_SETREGS, pid, 0, &r) < 0 || ptrace(PTRACE_CONT, pid, 0, 0) < 0)
        return -errno;
    while ((e = wait_stop(pid, &status)) == 0) {
        int sig = WSTOPSIG(status);
        if (sig == SIGSEGV && ptrace(PTRACE_GETREGS, pid, 0, &r) == 0 && r.rip == 0) {
            *ret = r.rax;
            return 0;
        }
        if (sig == SIGSEGV)
            return -EFAULT; /* it crashed inside the call: report, do not deliver */
        /* a stop of ours, or the target's own signal: let it through and keep waiting */
        if (ptrace(PTRACE_CONT, pid, 0,
                   (void *)(intptr_t)(status >> 16 == PTRACE_EVENT_STOP ? 0 : sig)) < 0)
            return -errno;
    }
    return e;
}

/* The text of the target's dlerror(), after a dlopen() that returned NULL. */
static void remote_dlerror(pid_t pid, int memfd, const struct user_regs_struct *saved, uint64_t sp,
                           uint64_t dlerror_fn, char *buf, size_t size)
{
    uint64_t msg = 0;

    snprintf(buf, size, "dlopen failed (no message)");
    if (remote_call(pid, memfd, saved, sp, dlerror_fn, 0, 0, &msg) == 0 && msg) {
        struct iovec local = {buf, size - 1}, remote = {(void *)(uintptr_t)msg, size - 1};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        buf[n > 0 ? (size_t)n : 0] = '\0';
        buf[strnlen(buf, size - 1)] = '\0';
    }
}

/* With the main thread stopped at a safe point: the call, then every register put back. */
static int call_dlopen(pid_t pid, const char *path, uint64_t dlopen_fn, uint64_t dlerror_fn,
                       const struct user_regs_struct *saved, char *err, size_t errlen)
{
    /* Below the red zone: the path, and under it the stack of the call. */
    uint64_t str_at = (saved->rsp - 128 - STRING_MAX) & ~0xfULL, sp = str_at - 64;
    uint64_t lo = (sp & ~0xfULL) - 16, handle = 0;
    size_t len = strlen(path) + 1, saved_len = (size_t)(str_at + STRING_MAX - lo);
    struct iovec xs = {.iov_len = XSTATE_BYTES};
    uint8_t *old_mem = malloc(saved_len);
    char path_buf[STRING_MAX] = {0}, memf[64];
    int memfd, r;

    xs.iov_base = malloc(XSTATE_BYTES);
    snprintf(memf, sizeof(memf), "/proc/%d/mem", (int)pid);
    memfd = open(memf, O_RDWR | O_CLOEXEC);
    if (!old_mem || !xs.iov_base || memfd < 0 || len > STRING_MAX) {
        r = errbuf_set(err, errlen, memfd < 0 ? -errno : -ENOMEM, "pid %d: prepare the call: %s",
                       (int)pid, memfd < 0 ? strerror(errno) : "no memory or path too long");
        goto out;
    }
    /* The whole FPU/SSE/AVX state: the call clobbers it, the target's floats must not see it. */
    if (ptrace(PTRACE_GETREGSET, pid, NT_X86_XSTATE, &xs) < 0) {
        r = errbuf_set(err, errlen, -errno, "pid %d: read the FPU state: %s", (int)pid,
                       strerror(errno));
        goto out;
    }
    memcpy(path_buf, path, len);
    if ((r = mem_rw(memfd, lo, old_mem, saved_len, false)) < 0 ||
        (r = mem_rw(memfd, str_at, path_buf, STRING_MAX, true)) < 0) {
        errbuf_set(err, errlen, r, "pid %d: write below the stack at 0x%" PRIx64 ": %s", (int)pid,
                   lo, strerror(-r));
        goto out;
    }
    r = remote_call(pid, memfd, saved, sp, dlopen_fn, str_at, RTLD_NOW, &handle);
    if (r == 0 && !handle) {
        remote_dlerror(pid, memfd, saved, sp, dlerror_fn, err, errlen);
        r = -ENOEXEC;
    } else if (r < 0) {
        errbuf_set(err, errlen, r, "pid %d: the call to dlopen() failed: %s", (int)pid,
                   strerror(-r));
    }
    if (r != -ESRCH) {
        mem_rw(memfd, lo, old_mem, saved_len, true);
        ptrace(PTRACE_SETREGSET, pid, NT_X86_XSTATE, &xs);
        ptrace(PTRACE_SETREGS, pid, 0, saved); /* and the kernel restarts its syscall */
    }
out:
    if (memfd >= 0)
        close(memfd);
    free(old_mem);
    free(xs.iov_base);
    return r;
}

int inject_library(pid_t pid, const char *path_in_target, char *err, size_t errlen)
{
    struct user_regs_struct saved;
    uint64_t dlopen_fn, dlerror_fn;
    struct libs l;
    int r;

    if ((r = find_libs(pid, &l, err, errlen)) < 0 ||
        (r = libc_symbol(pid, &l, "dlopen", &dlopen_fn, err, errlen)) < 0 ||
        (r = libc_symbol(pid, &l, "dlerror", &dlerror_fn, err, errlen)) < 0)
        return r;
    if (ptrace(PTRACE_SEIZE, pid, 0, 0) < 0)
        return errbuf_set(err, errlen, -errno, "pid %d: ptrace: %s%s", (int)pid, strerror(errno),
                          errno == EPERM ? " (another tracer, no CAP_SYS_PTRACE, or not dumpable)"
                                         : "");
    r = stop_at_safe_point(pid, &l, &saved, err, errlen);
    if (r == 0)
        r = call_dlopen(pid, path_in_target, dlopen_fn, dlerror_fn, &saved, err, errlen);
    if (r == -ESRCH)
        return errbuf_set(err, errlen, r, "pid %d exited while the stub was being loaded",
                          (int)pid);
    ptrace(PTRACE_DETACH, pid, 0, 0); /* drops our SIGSEGV; the target runs on as it was */
    return r;
}
