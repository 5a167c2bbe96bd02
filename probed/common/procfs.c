/* procfs.c - see procfs.h. */
#define _GNU_SOURCE
#include "common/procfs.h"
#include "pyframes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* A whole small file @name of directory @dfd (AT_FDCWD: a path), NUL-terminated and cut to
 * @size: the bytes read, or -errno when it cannot be opened ("" in @buf). */
static ssize_t read_at(int dfd, const char *name, char *buf, size_t size)
{
    ssize_t n, total = 0;
    int fd;

    if (size == 0)
        return -EINVAL;
    fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        buf[0] = '\0';
        return -errno;
    }
    while ((size_t)total < size - 1 && (n = read(fd, buf + total, size - 1 - (size_t)total)) > 0)
        total += n;
    close(fd);
    buf[total] = '\0';
    return total;
}

ssize_t procfs_read(pid_t pid, const char *name, char *buf, size_t size)
{
    char path[64];

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
    return read_at(AT_FDCWD, path, buf, size);
}

void procfs_cmdline(pid_t pid, char *buf, size_t size)
{
    ssize_t n = procfs_read(pid, "cmdline", buf, size);

    while (n > 0 && buf[n - 1] == '\0') /* the terminator of the last argument */
        n--;
    for (ssize_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20) /* NULs between arguments, and newlines */
            buf[i] = ' ';
    if (n >= 0)
        buf[n] = '\0';
    pyf_utf8_scrub(buf, size); /* an argument can be any bytes */
}

/* Fields of a stat file (/proc/PID/stat or /proc/PID/task/TID/stat) that probed uses. */
struct stat_fields {
    char state;                      /* R, S, D, ... Z a zombie, X dead */
    unsigned long long utime, stime; /* clock ticks */
    long long threads, start_time;
    unsigned long long start_stack;
};

/* The fields of a stat file's text @buf; -EPROTO when it is not one. */
static int parse_stat(const char *buf, struct stat_fields *f)
{
    const char *p;

    /* The command name can hold spaces and parentheses: fields start after the last ')'.
     * From field 3 (state): 14 utime, 15 stime, 20 num_threads, 22 starttime, 28 startstack. */
    p = strrchr(buf, ')');
    if (!p ||
        sscanf(p + 2,
               "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d "
               "%*d %lld %*d %lld %*u %*d %*u %*u %*u %llu",
               &f->state, &f->utime, &f->stime, &f->threads, &f->start_time, &f->start_stack) != 6)
        return -EPROTO;
    return 0;
}

static int read_stat(const char *name, pid_t pid, struct stat_fields *f)
{
    char buf[1024];
    ssize_t n = procfs_read(pid, name, buf, sizeof(buf));

    if (n <= 0)
        return n < 0 ? (int)n : -EIO;
    return parse_stat(buf, f);
}

static int64_t ticks_ns(unsigned long long ticks)
{
    long hz = sysconf(_SC_CLK_TCK);

    return (int64_t)ticks * (1000000000LL / (hz > 0 ? hz : 100));
}

int procfs_start_time(pid_t pid, int64_t *ret)
{
    struct stat_fields f;
    int r = read_stat("stat", pid, &f);

    if (r == 0)
        *ret = f.start_time;
    return r;
}

int procfs_identity(pid_t pid, int64_t *ret_start_time, uint64_t *ret_start_stack)
{
    struct stat_fields f;
    int r = read_stat("stat", pid, &f);

    /* A zombie has exited: only its status waits for its parent (or, its leader a zombie, its
     * other threads are being torn down: what its pid reaches has no memory left either). */
    if (r == 0 && (f.state == 'Z' || f.state == 'X'))
        return -ESRCH;
    if (r == 0) {
        *ret_start_time = f.start_time;
        *ret_start_stack = f.start_stack;
    }
    return r;
}

/* The owner of the user namespace of the process whose /proc directory is @dfd, when it is
 * not ours; (uid_t)-1 when it is ours or cannot be told. */
static uid_t userns_owner(int dfd)
{
    struct stat ours, theirs;
    uid_t owner = (uid_t)-1;
    int fd = openat(dfd, "ns/user", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return owner;
    if (fstat(fd, &theirs) == 0 && stat("/proc/self/ns/user", &ours) == 0 &&
        (theirs.st_ino != ours.st_ino || theirs.st_dev != ours.st_dev) &&
        ioctl(fd, NS_GET_OWNER_UID, &owner) < 0)
        owner = (uid_t)-1;
    close(fd);
    return owner;
}

int procfs_owner(pid_t pid, struct proc_owner *ret)
{
    char path[32], status[4096], stat[1024], *p;
    unsigned long long cap_prm = 0;
    unsigned u[3], g[3];
    struct stat_fields f;
    struct stat st;
    ssize_t n;
    int dfd, r = 0;

    if (pid <= 0)
        return -ESRCH;
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? -ESRCH : -errno;
    /* a read through this fd after the pid was reused fails (-ESRCH): all is of one process */
    if (fstat(dfd, &st) < 0)
        r = -errno;
    else if ((n = read_at(dfd, "status", status, sizeof(status))) <= 0 ||
             (n = read_at(dfd, "stat", stat, sizeof(stat))) <= 0)
        r = n < 0 ? (int)n : -ESRCH;
    ret->ns_owner = r == 0 ? userns_owner(dfd) : (uid_t)-1;
    close(dfd);
    if (r == -ENOENT)
        r = -ESRCH;
    if (r < 0)
        return r;
    if (!(p = strstr(status, "\nUid:")) || sscanf(p, "\nUid: %u %u %u", &u[0], &u[1], &u[2]) != 3 ||
        !(p = strstr(status, "\nGid:")) || sscanf(p, "\nGid: %u %u %u", &g[0], &g[1], &g[2]) != 3 ||
        !(p = strstr(status, "\nCapPrm:")) || sscanf(p, "\nCapPrm: %llx", &cap_prm) != 1 ||
        parse_stat(stat, &f) < 0)
        return -EPROTO;
    ret->start_time = f.start_time;
    for (int i = 0; i < 3; i++) {
        ret->uid[i] = (uid_t)u[i];
        ret->gid[i] = (gid_t)g[i];
    }
    ret->dump_owner = st.st_uid;
    ret->has_caps = cap_prm != 0;
    return 0;
}

bool procfs_owner_admits(const struct proc_owner *o, bool root, uid_t uid, gid_t gid)
{
    if (root || (o->ns_owner != (uid_t)-1 && o->ns_owner == uid))
        return true;
    for (int i = 0; i < 3; i++)
        if (o->uid[i] != uid || o->gid[i] != gid)
            return false;
    return o->dump_owner == uid && !o->has_caps;
}

int procfs_grant_check(const struct proc_grant *g, char *why, size_t why_size)
{
    struct proc_owner o;
    int r = procfs_owner(g->pid, &o);

    if (r == 0 && o.start_time != g->start_time)
        r = -ESRCH;
    if (r < 0) {
        snprintf(why, why_size, "pid %d is no longer the process named (%s)", (int)g->pid,
                 r == -ESRCH ? "it exited, and the pid may be another process's now"
                             : strerror(-r));
        return r == -ESRCH ? r : -ESRCH;
    }
    if (!procfs_owner_admits(&o, g->root, g->uid, g->gid)) {
        snprintf(why, why_size,
                 "pid %d: permission denied (uids %u/%u/%u, gids %u/%u/%u%s%s; you are uid %u,"
                 " gid %u)",
                 (int)g->pid, (unsigned)o.uid[0], (unsigned)o.uid[1], (unsigned)o.uid[2],
                 (unsigned)o.gid[0], (unsigned)o.gid[1], (unsigned)o.gid[2],
                 o.dump_owner != o.uid[1] ? ", not dumpable" : "",
                 o.has_caps ? ", with capabilities" : "", (unsigned)g->uid, (unsigned)g->gid);
        return -EPERM;
    }
    return 0;
}

int procfs_thread_cpu(pid_t pid, pid_t tid, int64_t *cpu_ns)
{
    char name[48];
    struct stat_fields f;
    int r;

    snprintf(name, sizeof(name), "task/%d/stat", (int)tid);
    r = read_stat(name, pid, &f);
    if (r == 0)
        *cpu_ns = ticks_ns(f.utime + f.stime);
    return r;
}

/* The value of "@key:   123 kB" lines, in bytes (0 when absent). */
static int64_t rollup_field(const char *text, const char *key)
{
    size_t n = strlen(key);

    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == ':')
            return strtoll(p + n + 1, NULL, 10) * 1024;
    return 0;
}

int procfs_usage(pid_t pid, struct proc_usage *u)
{
    char buf[2048];
    struct stat_fields f;
    ssize_t n;
    int r = read_stat("stat", pid, &f);

    if (r < 0)
        return r;
    /* smaps_rollup: one walk of the mappings in the kernel (Linux 4.14+) */
    n = procfs_read(pid, "smaps_rollup", buf, sizeof(buf));
    if (n <= 0)
        return n < 0 ? (int)n : -ESRCH; /* empty: a zombie, or a kernel thread */
    *u = (struct proc_usage){
        .rss = rollup_field(buf, "Rss"),
        .pss = rollup_field(buf, "Pss"),
        .uss = rollup_field(buf, "Private_Clean") + rollup_field(buf, "Private_Dirty"),
        .swap = rollup_field(buf, "Swap"),
        .cpu_ns = ticks_ns(f.utime + f.stime),
        .start_time = f.start_time,
        .threads = (int32_t)f.threads,
    };
    return 0;
}

bool procfs_in_initial_pidns(void)
{
    char buf[4096];
    const char *line;

    if (procfs_read(getpid(), "status", buf, sizeof(buf)) <= 0 || !(line = strstr(buf, "\nNSpid:")))
        return false;
    line += strlen("\nNSpid:");
    line += strspn(line, " \t");
    line += strspn(line, "0123456789");
    return *line == '\n' || *line == '\0';
}

int procfs_net_addresses(pid_t pid, procfs_address_fn fn, void *ctx)
{
    char path[64], *line = NULL;
    size_t cap = 0;
    struct in_addr last = {0};
    bool have = false;
    FILE *f;

    /* IPv4: the trie's LOCAL host routes ("|-- 10.1.2.3" then "/32 host LOCAL"), each listed
       in the main table and the local one: the caller keeps each once */
    snprintf(path, sizeof(path), "/proc/%d/net/fib_trie", (int)pid);
    if (!(f = fopen(path, "re")))
        return -errno;
    while (getline(&line, &cap, f) > 0) {
        char text[INET_ADDRSTRLEN];
        const char *at = strstr(line, "|-- ");
        if (at) {
            have = sscanf(at + 4, "%15[0-9.]", text) == 1 && inet_pton(AF_INET, text, &last) == 1;
        } else if (have && strstr(line, "/32 host LOCAL")) {
            if ((ntohl(last.s_addr) >> 24) != 127) /* loopback's are every namespace's */
                fn(AF_INET, &last, ctx);
            have = false;
        }
    }
    fclose(f);
    /* IPv6: the addresses of global scope (if_inet6: address, index, prefix, scope, ...) */
    snprintf(path, sizeof(path), "/proc/%d/net/if_inet6", (int)pid);
    if ((f = fopen(path, "re"))) {
        while (getline(&line, &cap, f) > 0) {
            char hex[33];
            unsigned scope;
            struct in6_addr a;
            if (sscanf(line, "%32[0-9a-fA-F] %*x %*x %x", hex, &scope) != 2 || strlen(hex) != 32 ||
                scope != 0)
                continue;
            for (int i = 0; i < 16; i++) {
                unsigned byte;
                sscanf(hex + 2 * i, "%2x", &byte);
                a.s6_addr[i] = (uint8_t)byte;
            }
            fn(AF_INET6, &a, ctx);
        }
        fclose(f);
    }
    free(line);
    return 0;
}
