/* inject.c - dlopen() inside a running process through ptrace; see inject.h. */
#define _GNU_SOURCE
#include "intarget/inject.h"

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
#include <stddef.h>
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

static int find_libs(pid_t pid, struct libs *l, struct errbuf *err)
{
    char path[64], line[4096 + 128];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return errbuf_set(err, -errno, "pid %d: open %s: %s", (int)pid, path, strerror(errno));
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
            err, -ENOTSUP,
            "pid %d has no glibc mapped (a static or musl program): cannot load the stub",
            (int)pid);
    return 0;
}

/* What a call in the target needs from its libc: the functions, and the two pieces of code a
 * call returns through (found by their bytes in libc's executable segments):
 *   restorer     glibc's __restore_rt, `mov $15, %rax; syscall`: rt_sigreturn, which puts
 *                every register back from the frame we leave under the call;
 *   syscall_ret  `syscall; ret`: makes the value a call returned (rax) visible to us as the
 *                number of a syscall we stop at (and skip), then goes on to the restorer. */
struct libc_addrs {
    uint64_t dlopen, dlerror, restorer, syscall_ret; /* syscall_ret 0: none found */
};

#define RESTORER_LEN 9 /* rip at its syscall's stop is restorer + 9 */
static const uint8_t restorer_code[RESTORER_LEN] = {0x48, 0xc7, 0xc0, 0x0f, 0x00,
                                                    0x00, 0x00, 0x0f, 0x05};
static const uint8_t syscall_ret_code[3] = {0x0f, 0x05, 0xc3};

static void find_code(Elf *elf, const struct libs *l, struct libc_addrs *a)
{
    size_t n = 0, size = 0;
    const uint8_t *file = (const uint8_t *)elf_rawfile(elf, &size);

    if (!file || elf_getphdrnum(elf, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X) ||
            ph.p_offset + ph.p_filesz > size || ph.p_filesz < RESTORER_LEN)
            continue;
        for (uint64_t off = 0; off + RESTORER_LEN <= ph.p_filesz; off++) {
            const uint8_t *at = file + ph.p_offset + off;
            uint64_t addr = l->libc_base + ph.p_vaddr + off;
            if (!a->restorer && memcmp(at, restorer_code, RESTORER_LEN) == 0)
                a->restorer = addr;
            if (!a->syscall_ret && memcmp(at, syscall_ret_code, sizeof(syscall_ret_code)) == 0)
                a->syscall_ret = addr;
        }
    }
}

/* The addresses in @pid of what a call needs, from its libc read through /proc/PID/root. */
static int libc_addrs(pid_t pid, const struct libs *l, struct libc_addrs *ret, struct errbuf *err)
{
    static const char *const names[] = {"dlopen", "dlerror"};
    uint64_t *slots[] = {&ret->dlopen, &ret->dlerror};
    char path[4200];
    int fd;
    Elf *elf = NULL;
    Elf_Scn *scn = NULL;

    *ret = (struct libc_addrs){0};
    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, l->libc_path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errbuf_set(err, -errno, "pid %d: open %s: %s", (int)pid, path, strerror(errno));
    if (elf_version(EV_CURRENT) != EV_NONE)
        elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    while (elf && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        Elf_Data *data;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !(data = elf_getdata(scn, NULL)))
            continue;
        for (size_t i = 0; sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            const char *s;
            if (!gelf_getsym(data, (int)i, &sym) || sym.st_value == 0 ||
                !(s = elf_strptr(elf, sh.sh_link, sym.st_name)))
                continue;
            for (size_t k = 0; k < 2; k++)
                if (!*slots[k] && strcmp(s, names[k]) == 0)
                    *slots[k] = l->libc_base + sym.st_value;
        }
    }
    if (elf)
        find_code(elf, l, ret);
    if (elf)
        elf_end(elf);
    close(fd);
    if (!ret->dlopen || !ret->dlerror)
        return errbuf_set(err, -ENOENT, "pid %d: %s has no %s", (int)pid, path,
                          ret->dlopen ? "dlerror" : "dlopen");
    if (!ret->restorer)
        return errbuf_set(err, -ENOTSUP,
                          "pid %d: %s has no signal-return code (__restore_rt): a call into the "
                          "process could not put it back by itself",
                          (int)pid, path);
    return 0;
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
                              struct errbuf *err)
{
    for (int i = 0; i < SAFE_POINT_TRIES; i++) {
        int r = interrupt_stop(pid);
        long nr;
        if (r < 0)
            return errbuf_set(err, r, "pid %d: stop the main thread: %s", (int)pid, strerror(-r));
        if (ptrace(PTRACE_GETREGS, pid, 0, regs) < 0)
            return errbuf_set(err, -errno, "pid %d: read registers: %s", (int)pid, strerror(errno));
        nr = (long)regs->orig_rax;
        if (nr >= 0 ? safe_syscall(nr) : !in_ranges(l, regs->rip))
            return 0;
        if (ptrace(PTRACE_CONT, pid, 0, 0) < 0)
            return errbuf_set(err, -errno, "pid %d: resume: %s", (int)pid, strerror(errno));
        usleep(200 + (unsigned)(i * 37 % 800));
    }
    return errbuf_set(
        err, -EAGAIN,
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
 * The kernel's x86-64 signal frame, as rt_sigreturn reads it back (arch/x86/include/asm/
 * sigframe.h, uapi asm/ucontext.h): what we leave under each call, so that the call returns
 * through glibc's __restore_rt into rt_sigreturn, which puts every register, the FPU/AVX state
 * and the signal mask back as they were, and the thread goes on where it was stopped. Should
 * the daemon die at any instant of the call, the thread still gets back by itself.
 */
struct kernel_ucontext {
    uint64_t uc_flags;
    uint64_t uc_link;
    stack_t uc_stack;
    struct sigcontext uc_mcontext;
    uint64_t uc_sigmask;
};

struct rt_sigframe {
    uint64_t pretcode; /* where the call returns: the restorer */
    struct kernel_ucontext uc;
    uint8_t info[128]; /* siginfo_t: unread by rt_sigreturn, but it checks it is there */
};

_Static_assert(sizeof(struct sigcontext) == 256, "struct sigcontext is the kernel's");
_Static_assert(offsetof(struct rt_sigframe, uc.uc_mcontext) == 48, "the kernel's rt_sigframe");

#define UC_FP_XSTATE 0x1
#define UC_SIGCONTEXT_SS 0x2
#define UC_STRICT_RESTORE_SS 0x4
#define SW_BYTES_AT 464 /* struct _fpx_sw_bytes in the legacy area's unused bytes */

#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516
#define NR_RT_SIGRETURN 15
#define NR_RESTART_SYSCALL 219

/* One injection: the thread as we stopped it, and the memory under its stack we write. */
struct hijack {
    pid_t pid;
    int memfd;
    const struct libc_addrs *libc;
    struct user_regs_struct saved;
    uint64_t sigmask;
    struct iovec xs;  /* its whole FPU/SSE/AVX state (NT_X86_XSTATE) */
    uint64_t top;     /* below the red zone: what we use grows down from here */
    uint64_t lo;      /* the lowest byte we write */
    uint8_t *old_mem; /* [lo, top) as it was */
};

/* The syscall the thread was in, to be run again when it goes on (the kernel's restart rules,
 * which a thread held at a syscall's entry follows when we put this number in orig_rax): -1
 * when it was in none, or the syscall finished. */
static long restart_nr(const struct user_regs_struct *r)
{
    if ((long)r->orig_rax < 0)
        return -1;
    switch (-(long)r->rax) {
    case ERESTARTSYS:
    case ERESTARTNOINTR:
    case ERESTARTNOHAND:
        return (long)r->orig_rax;
    case ERESTART_RESTARTBLOCK:
        return NR_RESTART_SYSCALL; /* the rest of a sleep, from the thread's restart block */
    default:
        return -1;
    }
}

/* The frame under a call: the saved registers, as the thread would go on by itself. rt_sigreturn
 * does no syscall restart and forgets the restart block: a thread stopped in a syscall goes back
 * to its `syscall` instruction and runs it again whole (a sleep starts over: longer, never
 * wrong). The altstack field is invalid on purpose: rt_sigreturn leaves the thread's as it is. */
static void build_frame(const struct hijack *h, uint64_t fpstate_at, uint64_t pretcode,
                        struct rt_sigframe *f)
{
    const struct user_regs_struct *r = &h->saved;
    struct sigcontext *sc = &f->uc.uc_mcontext;
    bool again = restart_nr(r) >= 0;

    memset(f, 0, sizeof(*f));
    f->pretcode = pretcode;
    f->uc.uc_flags = UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS;
    f->uc.uc_stack.ss_flags = SS_ONSTACK | SS_DISABLE; /* EINVAL to rt_sigreturn: kept */
    f->uc.uc_sigmask = h->sigmask;
    *sc = (struct sigcontext){.r8 = r->r8,
                              .r9 = r->r9,
                              .r10 = r->r10,
                              .r11 = r->r11,
                              .r12 = r->r12,
                              .r13 = r->r13,
                              .r14 = r->r14,
                              .r15 = r->r15,
                              .rdi = r->rdi,
                              .rsi = r->rsi,
                              .rbp = r->rbp,
                              .rbx = r->rbx,
                              .rdx = r->rdx,
                              .rax = again ? r->orig_rax : r->rax,
                              .rcx = r->rcx,
                              .rsp = r->rsp,
                              .rip = again ? r->rip - 2 : r->rip,
                              .eflags = r->eflags,
                              .cs = (unsigned short)r->cs,
                              .__pad0 = (unsigned short)r->ss,
                              .fpstate = (struct _fpstate *)(uintptr_t)fpstate_at};
}

/* The xsave image for the frame: the thread's state as ptrace gave it, whose software bytes
 * hold XCR0 (the features enabled, as gdb reads them), rewritten as a signal frame's (magic1,
 * sizes, the same features), with magic2 after it. */
static int write_fpstate(const struct hijack *h, uint64_t at)
{
    uint32_t size = (uint32_t)h->xs.iov_len, magic2 = FP_XSTATE_MAGIC2;
    uint8_t *image = malloc(h->xs.iov_len);
    struct _fpx_sw_bytes sw = {.magic1 = FP_XSTATE_MAGIC1,
                               .extended_size = size + (uint32_t)sizeof(magic2),
                               .xstate_size = size};
    int r;

    if (!image)
        return -ENOMEM;
    if (h->xs.iov_len < SW_BYTES_AT + sizeof(sw)) {
        free(image);
        return -EPROTO;
    }
    memcpy(image, h->xs.iov_base, h->xs.iov_len);
    memcpy(&sw.xstate_bv, image + SW_BYTES_AT, sizeof(sw.xstate_bv)); /* XCR0 */
    memcpy(image + SW_BYTES_AT, &sw, sizeof(sw));
    r = mem_rw(h->memfd, at, image, size, true);
    if (r == 0)
        r = mem_rw(h->memfd, at + size, &magic2, sizeof(magic2), true);
    free(image);
    return r;
}

/*
 * Calls @fn(@a1, @a2) on the held thread, and holds it again at the entry of the rt_sigreturn
 * it returns into: done, with nothing of the call left but what it did. Every syscall of the
 * call stops (PTRACE_SYSCALL) so that we see that one. @ret_value: @fn's return value, when
 * given (it returns through `syscall; ret`, its value the number of a syscall we skip).
 * -EFAULT: the call crashed (the thread is held at the signal, not delivered).
 */
static int hijacked_call(struct hijack *h, uint64_t fn, uint64_t a1, uint64_t a2,
                         uint64_t *ret_value)
{
    const uint64_t str_end = h->top;
    uint64_t fp_at = (str_end - STRING_MAX - h->xs.iov_len - 8) & ~63ULL;
    uint64_t frame_at, sp, gadget = h->libc->syscall_ret;
    struct rt_sigframe f;
    struct user_regs_struct r;
    int status, e;

    /* at the call, rsp % 16 == 8 (as after a `call`); the frame starts at rsp, or at rsp + 8
     * after the syscall_ret gadget's own return address */
    if (ret_value) {
        sp = ((fp_at - sizeof(f)) & ~0xfULL) - 8 - 16;
        frame_at = sp + 8;
    } else {
        sp = ((fp_at - sizeof(f)) & ~0xfULL) - 8;
        frame_at = sp;
    }
    if (sp < h->lo)
        return -EOVERFLOW;
    build_frame(h, fp_at, h->libc->restorer, &f);
    if ((e = write_fpstate(h, fp_at)) < 0 ||
        (e = mem_rw(h->memfd, frame_at, &f, sizeof(f), true)) < 0 ||
        (ret_value && (e = mem_rw(h->memfd, sp, &gadget, sizeof(gadget), true)) < 0))
        return e;
    r = h->saved;
    r.rsp = sp;
    r.rip = fn;
    r.rdi = a1;
    r.rsi = a2;
    r.rax = 0;
    r.orig_rax = (uint64_t)-1; /* no restart into our call, and at a syscall stop: none run */
    r.eflags &= ~0x400ULL;     /* DF clear, as the ABI requires */
    if (ptrace(PTRACE_SETREGS, h->pid, 0, &r) < 0 || ptrace(PTRACE_SYSCALL, h->pid, 0, 0) < 0)
        return -errno;
    while ((e = wait_stop(h->pid, &status)) == 0) {
        int sig = WSTOPSIG(status), pass = 0;
        if (sig == (SIGTRAP | 0x80)) {
            struct __ptrace_syscall_info si;
            if (ptrace(PTRACE_GET_SYSCALL_INFO, h->pid, sizeof(si), &si) > 0 &&
                si.op == PTRACE_SYSCALL_INFO_ENTRY) {
                /* ours, and not a signal handler's return through the same restorer, nor
                 * a syscall of libc's own that runs the gadget's bytes: the stack pointer
                 * is where our frame or our gadget's return address left it */
                if (si.entry.nr == NR_RT_SIGRETURN &&
                    si.instruction_pointer == h->libc->restorer + RESTORER_LEN &&
                    si.stack_pointer == frame_at + 8)
                    return 0;
                if (ret_value && si.instruction_pointer == h->libc->syscall_ret + 2 &&
                    si.stack_pointer == sp + 8) {
                    *ret_value = si.entry.nr;
                    ptrace(PTRACE_POKEUSER, h->pid, offsetof(struct user, regs.orig_rax), -1L);
                }
            }
        } else if (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) {
            return -EFAULT; /* it crashed inside the call: report, do not deliver */
        } else if (status >> 16 != PTRACE_EVENT_STOP) {
            pass = sig; /* the target's own signal: its handler runs on top of our call */
        }
        if (ptrace(PTRACE_SYSCALL, h->pid, 0, (void *)(intptr_t)pass) < 0)
            return -errno;
    }
    return e;
}

/* Lets the thread go on exactly as it was stopped: from the rt_sigreturn entry we hold it at,
 * the syscall it was in runs again (or none), with every register and its FPU state back. */
static void put_back(struct hijack *h, bool at_syscall_entry)
{
    struct user_regs_struct r = h->saved;

    ptrace(PTRACE_SETREGSET, h->pid, NT_X86_XSTATE, &h->xs);
    if (at_syscall_entry)
        r.orig_rax = (uint64_t)restart_nr(&h->saved);
    /* at a signal stop (a crash inside the call), the kernel restarts the syscall itself */
    ptrace(PTRACE_SETREGS, h->pid, 0, &r);
    /* only now is the frame no longer needed (were we to die before, rt_sigreturn reads it);
     * the memory is below the stack pointer, dead to the thread, put back all the same */
    mem_rw(h->memfd, h->lo, h->old_mem, (size_t)(h->top - h->lo), true);
}

/* Whether @path is mapped in @pid: dlopen() loaded it. */
static bool mapped(pid_t pid, const char *path)
{
    char maps[64], line[4096 + 128];
    size_t n = strlen(path);
    bool found = false;
    FILE *f;

    snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)pid);
    if (!(f = fopen(maps, "re")))
        return false;
    while (!found && fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/');
        found = p && strncmp(p, path, n) == 0 && (p[n] == '\n' || p[n] == '\0');
    }
    fclose(f);
    return found;
}

/* With the main thread held at a safe point: dlopen(), dlerror() when it failed, put back. */
static int call_dlopen(struct hijack *h, const char *path, struct errbuf *err)
{
    char path_buf[STRING_MAX] = {0};
    size_t len = strlen(path) + 1;
    uint64_t msg = 0;
    int r;

    if (len > STRING_MAX)
        return errbuf_set(err, -ENAMETOOLONG, "pid %d: path too long: %s", (int)h->pid, path);
    memcpy(path_buf, path, len);
    if ((r = mem_rw(h->memfd, h->lo, h->old_mem, (size_t)(h->top - h->lo), false)) < 0 ||
        (r = mem_rw(h->memfd, h->top - STRING_MAX, path_buf, STRING_MAX, true)) < 0)
        return errbuf_set(err, r, "pid %d: write below the stack at 0x%" PRIx64 ": %s", (int)h->pid,
                          h->lo, strerror(-r));
    r = hijacked_call(h, h->libc->dlopen, h->top - STRING_MAX, RTLD_NOW, NULL);
    if (r == 0 && !mapped(h->pid, path)) {
        errbuf_set(err, 0, "dlopen failed (no message)");
        if (h->libc->syscall_ret && hijacked_call(h, h->libc->dlerror, 0, 0, &msg) == 0 && msg) {
            size_t room = sizeof(err->msg) - 1;
            struct iovec local = {err->msg, room}, remote = {(void *)(uintptr_t)msg, room};
            ssize_t n = process_vm_readv(h->pid, &local, 1, &remote, 1, 0);
            err->msg[n > 0 ? (size_t)n : 0] = '\0';
            err->msg[strnlen(err->msg, room)] = '\0';
        }
        r = -ENOEXEC;
    } else if (r < 0 && r != -ESRCH) {
        errbuf_set(err, r, "pid %d: the call to dlopen() failed: %s", (int)h->pid, strerror(-r));
    }
    if (r != -ESRCH)
        put_back(h, r != -EFAULT);
    return r;
}

int inject_library(const struct proc_grant *target, const char *path_in_target, struct errbuf *err)
{
    pid_t pid = target->pid;
    struct libc_addrs libc;
    struct hijack h = {.pid = pid, .memfd = -1, .libc = &libc};
    char memf[64];
    struct libs l;
    int r;

    if ((r = find_libs(pid, &l, err)) < 0 || (r = libc_addrs(pid, &l, &libc, err)) < 0)
        return r;
    if (ptrace(PTRACE_SEIZE, pid, 0, (void *)(long)PTRACE_O_TRACESYSGOOD) < 0)
        return errbuf_set(err, -errno, "pid %d: ptrace: %s%s", (int)pid, strerror(errno),
                          errno == EPERM ? " (another tracer, no CAP_SYS_PTRACE, or not dumpable)"
                                         : "");
    /* held now, it cannot become another process: it must be the one the caller may act on
     * (the pid reused, or a setuid exec, since the request was authorised: refused) */
    if ((r = procfs_grant_check(target, err->msg, sizeof(err->msg))) < 0) {
        ptrace(PTRACE_DETACH, pid, 0, 0);
        return r;
    }
    r = stop_at_safe_point(pid, &l, &h.saved, err);
    if (r == 0) {
        snprintf(memf, sizeof(memf), "/proc/%d/mem", (int)pid);
        h.memfd = open(memf, O_RDWR | O_CLOEXEC);
        h.xs = (struct iovec){.iov_base = malloc(XSTATE_BYTES), .iov_len = XSTATE_BYTES};
        if (h.memfd < 0 || !h.xs.iov_base)
            r = errbuf_set(err, h.memfd < 0 ? -errno : -ENOMEM, "pid %d: prepare the call: %s",
                           (int)pid, h.memfd < 0 ? strerror(errno) : "out of memory");
        else if (ptrace(PTRACE_GETREGSET, pid, NT_X86_XSTATE, &h.xs) < 0 ||
                 ptrace(PTRACE_GETSIGMASK, pid, sizeof(h.sigmask), &h.sigmask) < 0)
            r = errbuf_set(err, -errno, "pid %d: read the FPU state and signal mask: %s", (int)pid,
                           strerror(errno));
        if (r == 0) {
            /* below the red zone: the path, the xsave image, the frame, two return addresses */
            size_t use = STRING_MAX + h.xs.iov_len + 64 + sizeof(struct rt_sigframe) + 64;
            h.top = (h.saved.rsp - 128) & ~0xfULL;
            h.lo = (h.top - use) & ~0xfULL;
            h.old_mem = malloc((size_t)(h.top - h.lo));
            r = h.old_mem ? call_dlopen(&h, path_in_target, err)
                          : errbuf_set(err, -ENOMEM, "pid %d: out of memory", (int)pid);
        }
    }
    if (h.memfd >= 0)
        close(h.memfd);
    free(h.xs.iov_base);
    free(h.old_mem);
    if (r == -ESRCH)
        return errbuf_set(err, r, "pid %d exited while the stub was being loaded", (int)pid);
    ptrace(PTRACE_DETACH, pid, 0, 0); /* the thread goes on as it was */
    return r;
}
