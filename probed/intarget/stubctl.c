/* stubctl.c - loads the stub into targets and talks to it; see stubctl.h. */
#define _GNU_SOURCE
#include "intarget/stubctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "intarget/inject.h"
#include "intarget/remote_exec.h"
#include "log.h"
#include "common/procfs.h"
#include "errbuf.h"

#define SOCKET_WAIT_MS 3000 /* from dlopen() returning to the stub's socket being up */
/* for the main thread of a 3.14+ target to take a remote-exec request and its stub to come
 * up; it checks at least every switch interval (5 ms) while it runs Python, so only one
 * blocked in a C call waits it out (and then gets ptrace) */
#define REMOTE_EXEC_WAIT_MS 1500

#define GATES_MAX 64 /* targets with calls in progress (the workers are fewer) */

struct stubctl {
    char *stub_path;
    pthread_mutex_t inject_lock;
    /* the calls in progress, per target: many shared ones, or one exclusive (stub_call) */
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_changed; /* CLOCK_MONOTONIC */
    struct gate {
        pid_t pid; /* 0: free */
        int shared;
        bool exclusive;
    } gates[GATES_MAX];
};

/*
 * Where one target's stub lives. Everything under the target's /tmp is the user's to change at
 * any instant, so it is reached only through these fds, opened once without following links
 * and checked on the opened object (never by path again): the daemon acts with root's rights.
 */
struct stub_place {
    pid_t pid;
    const struct proc_grant *grant; /* who may act on which process (procfs.h) */
    uid_t uid;                      /* the target's (the owner of /proc/PID) */
    gid_t gid;
    char name[48];          /* probed-PID-START */
    char dir_in_target[64]; /* /tmp/probed-PID-START, as the target sees it */
    int tmp_fd;             /* the target's /tmp, through /proc/PID/root */
    int dir_fd;             /* the stub directory, once checked; -1 before */
};

static void place_close(struct stub_place *p)
{
    if (p->tmp_fd >= 0)
        close(p->tmp_fd);
    if (p->dir_fd >= 0)
        close(p->dir_fd);
    p->tmp_fd = p->dir_fd = -1;
}

/* Empties and removes one stale stub directory (opened without following links). */
static void remove_stub_dir(int tmp_fd, const char *name)
{
    int fd = openat(tmp_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "stub-", 5) == 0 || strncmp(e->d_name, "enter-", 6) == 0 ||
            strncmp(e->d_name, STUB_SOCKET_NAME, 4) == 0)
            unlinkat(fd, e->d_name, 0);
    closedir(d);
    unlinkat(tmp_fd, name, AT_REMOVEDIR);
}

#define STALE_AGE_S 600 /* a directory with no socket this old is no injection in progress */

/* Whether a stub listens in the directory @dir_fd: 1 yes, 0 its socket is there but nobody listens
 * (the process is gone: a live stub never stops listening), -1 no socket (or not one we can tell).
 * The socket is opened without following a link and connected through that fd, never waiting:
 * a full backlog (EAGAIN) is a listener too. */
static int stub_listens(int dir_fd)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct stat st;
    int sock_fd = openat(dir_fd, STUB_SOCKET_NAME, O_PATH | O_NOFOLLOW | O_CLOEXEC), fd, r = -1;

    if (sock_fd < 0)
        return -1;
    if (fstat(sock_fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
        (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) >= 0) {
        snprintf(addr.sun_path, sizeof(addr.sun_path), "/proc/self/fd/%d", sock_fd);
        if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 || errno == EAGAIN)
            r = 1;
        else if (errno == ECONNREFUSED)
            r = 0;
        close(fd);
    }
    close(sock_fd);
    return r;
}

/*
 * The stubs of processes that are gone (a normal exit removes its own; kill -9 cannot): the
 * /tmp/probed-PID-START directories in our mount namespace whose process is no more. The pid
 * in the name is the one the daemon that made it saw: a daemon in a container shares /tmp
 * with others in other pid namespaces, where "no such pid here" proves nothing. So a
 * directory goes when its socket is there and nobody listens on it, or, with no socket (a
 * stub copied and never loaded: the daemon was killed), when its pid is not alive here and
 * nothing was written in it for STALE_AGE_S (another daemon's injection may be in progress).
 */
static void sweep_stale_stubs(void)
{
    int tmp_fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = tmp_fd >= 0 ? fdopendir(dup(tmp_fd)) : NULL;
    struct dirent *e;

    while (d && (e = readdir(d)) != NULL) {
        int pid, listens, dir_fd;
        long long start;
        int64_t now;
        char tail;
        struct stat st;
        if (sscanf(e->d_name, "probed-%d-%lld%c", &pid, &start, &tail) != 2 || pid <= 0)
            continue;
        if (procfs_start_time(pid, &now) == 0 && now == start)
            continue; /* alive */
        dir_fd = openat(tmp_fd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0)
            continue;
        listens = stub_listens(dir_fd);
        if (listens < 0 && fstat(dir_fd, &st) == 0 && time(NULL) - st.st_mtime >= STALE_AGE_S)
            listens = 0;
        close(dir_fd);
        if (listens == 0)
            remove_stub_dir(tmp_fd, e->d_name);
    }
    if (d)
        closedir(d);
    if (tmp_fd >= 0)
        close(tmp_fd);
}

int stubctl_new(const char *stub_path, struct stubctl **ret)
{
    struct stubctl *sc = calloc(1, sizeof(*sc));

    if (!sc || !(sc->stub_path = strdup(stub_path))) {
        free(sc);
        return -ENOMEM;
    }
    pthread_condattr_t ca;

    pthread_mutex_init(&sc->inject_lock, NULL);
    pthread_mutex_init(&sc->gate_lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sc->gate_changed, &ca);
    pthread_condattr_destroy(&ca);
    sweep_stale_stubs();
    *ret = sc;
    return 0;
}

void stubctl_free(struct stubctl *sc)
{
    if (!sc)
        return;
    pthread_mutex_destroy(&sc->inject_lock);
    pthread_mutex_destroy(&sc->gate_lock);
    pthread_cond_destroy(&sc->gate_changed);
    free(sc->stub_path);
    free(sc);
}

/* Opens @pid's /tmp as @pid sees it (through /proc/PID/root, its links resolved inside that
 * root only), after @pid's /proc entry: its owner is whom the stub's files must belong to, and
 * a start time read through that entry after the opens proves the pid was not reused. */
static int place_open(const struct proc_grant *g, struct stub_place *p, struct errbuf *err)
{
    pid_t pid = g->pid;
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    char proc[32];
    struct stat st;
    int64_t start, start_after;
    int proc_fd, root_fd, r;

    *p = (struct stub_place){.pid = pid, .grant = g, .tmp_fd = -1, .dir_fd = -1};
    snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
    proc_fd = open(proc, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (proc_fd < 0 || fstat(proc_fd, &st) < 0 || procfs_start_time(pid, &start) < 0) {
        if (proc_fd >= 0)
            close(proc_fd);
        return errbuf_set(err, -ESRCH, "pid %d does not exist", (int)pid);
    }
    p->uid = st.st_uid;
    p->gid = st.st_gid;
    root_fd = openat(proc_fd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
    r = root_fd < 0 ? -errno : 0;
    if (r == 0) {
        p->tmp_fd = (int)syscall(SYS_openat2, root_fd, "tmp", &how, sizeof(how));
        if (p->tmp_fd < 0 && errno == ENOSYS) /* before Linux 5.6: /tmp itself, not a link */
            p->tmp_fd = openat(root_fd, "tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        r = p->tmp_fd < 0 ? -errno : 0;
        close(root_fd);
    }
    close(proc_fd);
    if (r < 0)
        return errbuf_set(err, r, "pid %d: open its /tmp through /proc/%d/root: %s", (int)pid,
                          (int)pid, strerror(-r));
    if (procfs_start_time(pid, &start_after) < 0 || start_after != start) {
        place_close(p);
        return errbuf_set(err, -ESRCH, "pid %d exited", (int)pid);
    }
    /* the process the request named, still admitting its caller; its owner now is the one
     * read above (the same process: the start time) */
    if (start != g->start_time || (r = procfs_grant_check(g, err->msg, sizeof(err->msg))) < 0) {
        place_close(p);
        return start != g->start_time
                   ? errbuf_set(err, -ESRCH,
                                "pid %d is no longer the process named (it exited, and the pid"
                                " is another process's now)",
                                (int)pid)
                   : r;
    }
    snprintf(p->name, sizeof(p->name), "probed-%d-%" PRId64, (int)pid, start);
    snprintf(p->dir_in_target, sizeof(p->dir_in_target), "/tmp/%s", p->name);
    return 0;
}

/* The stub directory, opened without following a link and checked on the opened fd: a
 * directory of the target's user that nobody else may enter. -ENOENT when there is none. */
static int place_open_dir(struct stub_place *p, struct errbuf *err)
{
    struct stat st;
    int fd = openat(p->tmp_fd, p->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return -ENOENT;
        return errbuf_set(err, e == ELOOP || e == ENOTDIR ? -EPERM : -e,
                          "pid %d: %s is not a directory of its user (%s)", (int)p->pid,
                          p->dir_in_target, e == ELOOP ? "a symbolic link" : strerror(e));
    }
    if (fstat(fd, &st) < 0 || st.st_uid != p->uid || (st.st_mode & 077)) {
        close(fd);
        return errbuf_set(err, -EPERM,
                          "pid %d: %s is not a private directory of uid %u (owner %u, mode %o)",
                          (int)p->pid, p->dir_in_target, (unsigned)p->uid, (unsigned)st.st_uid,
                          (unsigned)(st.st_mode & 07777));
    }
    if (p->dir_fd >= 0)
        close(p->dir_fd);
    p->dir_fd = fd;
    return 0;
}

/*
 * Connects to the stub's socket and proves the target is on the other end: the socket file is
 * opened without following a link and connected through that fd (/proc/self/fd/N, so nothing
 * can be swapped between the check and the connect), and SO_PEERCRED must name the target's
 * pid and uid. -ENOENT: no stub listens there yet (load one); -EPERM: something else does.
 */
static int connect_stub(const struct stub_place *p, struct errbuf *err)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct ucred cred;
    socklen_t len = sizeof(cred);
    struct stat st;
    int sock_fd, fd, r;

    sock_fd = openat(p->dir_fd, STUB_SOCKET_NAME, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (sock_fd < 0)
        return errno == ENOENT ? -ENOENT
                               : errbuf_set(err, -EPERM, "pid %d: open %s/%s: %s", (int)p->pid,
                                            p->dir_in_target, STUB_SOCKET_NAME, strerror(errno));
    if (fstat(sock_fd, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != p->uid) {
        close(sock_fd);
        return errbuf_set(err, -EPERM, "pid %d: %s/%s is not a socket of uid %u (%s, owner %u)",
                          (int)p->pid, p->dir_in_target, STUB_SOCKET_NAME, (unsigned)p->uid,
                          S_ISLNK(st.st_mode) ? "a symbolic link" : "another kind of file",
                          (unsigned)st.st_uid);
    }
    snprintf(addr.sun_path, sizeof(addr.sun_path), "/proc/self/fd/%d", sock_fd);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    r = fd < 0 ? -errno : 0;
    if (r == 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
        r = -errno;
    close(sock_fd);
    if (r < 0) {
        if (fd >= 0)
            close(fd);
        return r == -ECONNREFUSED ? -ENOENT : r; /* a stale socket: nobody listens */
    }
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid != p->pid ||
        cred.uid != p->uid) {
        close(fd);
        return errbuf_set(err, -EPERM,
                          "pid %d: %s/%s is a socket of pid %d (uid %u), not pid %d's stub: "
                          "refused",
                          (int)p->pid, p->dir_in_target, STUB_SOCKET_NAME, (int)cred.pid,
                          (unsigned)cred.uid, (int)p->pid);
    }
    return fd;
}

/* This thread's filesystem identity (fsuid/fsgid, per thread on Linux): what it creates while
 * it is the target's user belongs to that user and is made with that user's rights only (the
 * kernel drops CAP_DAC_OVERRIDE, CAP_CHOWN... while the fsuid is not 0). */
struct fs_identity {
    uid_t uid;
    gid_t gid;
};

static int fs_identity_become(uid_t uid, gid_t gid, struct fs_identity *ret_old)
{
    ret_old->gid = (gid_t)setfsgid(gid);
    ret_old->uid = (uid_t)setfsuid(uid);
    if ((uid_t)setfsuid((uid_t)-1) != uid || (gid_t)setfsgid((gid_t)-1) != gid) {
        setfsuid(ret_old->uid);
        setfsgid(ret_old->gid);
        return -EPERM;
    }
    return 0;
}

static void fs_identity_restore(const struct fs_identity *old)
{
    setfsuid(old->uid);
    setfsgid(old->gid);
}

/* The directory, made by the target's user, or the one already there when it is theirs. */
static int make_dir(struct stub_place *p, struct errbuf *err)
{
    struct fs_identity old;
    int r = fs_identity_become(p->uid, p->gid, &old);

    if (r < 0)
        return errbuf_set(err, r, "pid %d: act as uid %u: cannot set the fsuid", (int)p->pid,
                          (unsigned)p->uid);
    r = mkdirat(p->tmp_fd, p->name, 0700) < 0 && errno != EEXIST ? -errno : 0;
    fs_identity_restore(&old);
    if (r < 0)
        return errbuf_set(err, r, "pid %d: mkdir %s as uid %u: %s", (int)p->pid, p->dir_in_target,
                          (unsigned)p->uid, strerror(-r));
    return place_open_dir(p, err);
}

/* A file of the target's user in the checked directory, named @prefix-TIME@suffix (used once):
 * filled from @src_fd, or else from @data. Its name goes to @name. */
static int create_file(const struct stub_place *p, const char *prefix, const char *suffix,
                       int src_fd, const char *data, mode_t mode, char *name, size_t size,
                       struct errbuf *err)
{
    char buf[65536];
    struct fs_identity old;
    struct timespec ts;
    int out, r = 0;
    ssize_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, size, "%s-%lld%09ld%s", prefix, (long long)ts.tv_sec, ts.tv_nsec, suffix);
    if ((r = fs_identity_become(p->uid, p->gid, &old)) < 0)
        return errbuf_set(err, r, "pid %d: act as uid %u: cannot set the fsuid", (int)p->pid,
                          (unsigned)p->uid);
    out = openat(p->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (out < 0)
        r = -errno;
    fs_identity_restore(&old);
    if (out < 0)
        return errbuf_set(err, r, "pid %d: create %s/%s as uid %u: %s", (int)p->pid,
                          p->dir_in_target, name, (unsigned)p->uid, strerror(-r));
    if (src_fd < 0 && write(out, data, strlen(data)) != (ssize_t)strlen(data))
        r = errbuf_set(err, -EIO, "write %s/%s: %s", p->dir_in_target, name, strerror(errno));
    while (src_fd >= 0 && r == 0 && (n = read(src_fd, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            r = errbuf_set(err, -EIO, "write %s/%s: %s", p->dir_in_target, name, strerror(errno));
    if (close(out) < 0 && r == 0)
        r = errbuf_set(err, -errno, "close %s/%s: %s", p->dir_in_target, name, strerror(errno));
    if (r < 0)
        unlinkat(p->dir_fd, name, 0);
    return r;
}

/* A copy of the stub under a name used once (dlopen() of a path already loaded would not run
 * the constructor again), created by the target's user inside the checked directory only. */
static int copy_stub(const struct stubctl *sc, const struct stub_place *p, char *name, size_t size,
                     struct errbuf *err)
{
    int in = open(sc->stub_path, O_RDONLY | O_CLOEXEC), r;

    if (in < 0)
        return errbuf_set(err, -errno, "open %s: %s", sc->stub_path, strerror(errno));
    r = create_file(p, "stub", ".so", in, NULL, 0500, name, size, err);
    close(in);
    return r;
}

/* Waits up to @wait_ms for the stub's socket: the connected socket, or -ENOENT. */
static int await_socket(const struct stub_place *p, double wait_ms, struct errbuf *err)
{
    double deadline = mono_ms() + wait_ms;
    int fd;

    while ((fd = connect_stub(p, err)) == -ENOENT && mono_ms() < deadline)
        usleep(2000);
    return fd;
}

/*
 * CPython 3.14+: the stub enters through PEP 768's external debugger hook (remote_exec.h): a
 * script next to it, run by the main thread at its next safe point, loads @stub_in_target.
 * The connected socket; -ENOSYS before 3.14, -EOPNOTSUPP where the hook is off,
 * -ETIMEDOUT when the main thread did not take the request within REMOTE_EXEC_WAIT_MS
 * (blocked in a C call): the request is withdrawn and the caller uses ptrace, loading the
 * same copy, so the stub starts once either way.
 */
static int enter_by_remote_exec(const struct stub_place *p, const char *stub_in_target,
                                struct errbuf *err)
{
    char script[512], name[64], in_target[160];
    struct remote_exec req;
    int fd, r;

    /* the path goes into Python source: only the characters stubctl's own names use */
    if (strspn(stub_in_target, "abcdefghijklmnopqrstuvwxyz0123456789/._-") !=
        strlen(stub_in_target))
        return errbuf_set(err, -EOPNOTSUPP, "pid %d: the stub's path %s is not plain", (int)p->pid,
                          stub_in_target);
    if ((r = remote_exec_find(p->grant, &req, err)) < 0)
        return r; /* no hook here, or it is off: nothing written */
    snprintf(script, sizeof(script),
             "# probed: loads its stub (PEP 768's hook; see probed's docs/eval.md)\n"
             "import ctypes\n"
             "ctypes.CDLL('%s')\n",
             stub_in_target);
    r = create_file(p, "enter", ".py", -1, script, 0400, name, sizeof(name), err);
    if (r < 0)
        return r;
    snprintf(in_target, sizeof(in_target), "%s/%s", p->dir_in_target, name);
    r = remote_exec_send(&req, p->grant, in_target, err);
    if (r < 0) {
        unlinkat(p->dir_fd, name, 0);
        return r;
    }
    fd = await_socket(p, REMOTE_EXEC_WAIT_MS, err);
    /* the script has run once the stub is up, and never will once withdrawn; else it is
     * running now, and the stub (at exit) or the sweep removes it */
    if (remote_exec_withdraw(&req) || fd >= 0)
        unlinkat(p->dir_fd, name, 0);
    if (fd == -ENOENT)
        return errbuf_set(err, -ETIMEDOUT,
                          "pid %d: its main thread did not take the remote-exec request within "
                          "%d ms",
                          (int)p->pid, REMOTE_EXEC_WAIT_MS);
    return fd;
}

/* Loads the stub and waits for its socket; returns the connected socket. */
static int inject_stub(struct stubctl *sc, struct stub_place *p, struct stub_result *res,
                       struct errbuf *err)
{
    char name[64], in_target[160];
    int r, fd;

    sweep_stale_stubs();
    if ((r = make_dir(p, err)) < 0 || (r = copy_stub(sc, p, name, sizeof(name), err)) < 0)
        return r;
    snprintf(in_target, sizeof(in_target), "%s/%s", p->dir_in_target, name);
    fd = enter_by_remote_exec(p, in_target, err);
    if (fd >= 0 || fd == -ESRCH || fd == -EPERM) {
        res->injected = fd >= 0;
        res->entry = "remote_exec";
        return fd;
    }
    if (fd != -ENOSYS) /* 3.14+ that did not take it: say why ptrace */
        log_msg(LOG_INFO, "%s; loading the stub through ptrace", err->msg);
    res->entry = "ptrace";
    r = inject_library(p->grant, in_target, err);
    if (r < 0)
        return r;
    res->injected = true; /* whether or not its socket comes up (a stopped process: later) */
    fd = await_socket(p, SOCKET_WAIT_MS, err);
    if (fd == -ENOENT)
        return errbuf_set(err, -ETIMEDOUT,
                          "pid %d loaded the stub but its socket %s/%s did not appear within "
                          "%d ms",
                          (int)p->pid, p->dir_in_target, STUB_SOCKET_NAME, SOCKET_WAIT_MS);
    return fd;
}

/* The stub's socket, loading the stub first when the target has none. */
static int open_stub(struct stubctl *sc, const struct proc_grant *g, bool may_inject,
                     struct stub_result *res, struct errbuf *err)
{
    struct stub_place p;
    pid_t pid = g->pid;
    double t0 = mono_ms();
    int fd = place_open(g, &p, err);

    if (fd < 0)
        return fd;
    fd = place_open_dir(&p, err);
    if (fd == 0)
        fd = connect_stub(&p, err);
    if (fd != -ENOENT || !may_inject) {
        if (fd == -ENOENT)
            errbuf_set(err, -ENOENT, "pid %d has no stub loaded", (int)pid);
        place_close(&p);
        return fd;
    }
    pthread_mutex_lock(&sc->inject_lock);
    /* another worker may have loaded it meanwhile */
    fd = place_open_dir(&p, err);
    if (fd == 0)
        fd = connect_stub(&p, err);
    if (fd == -ENOENT) {
        fd = inject_stub(sc, &p, res, err);
        res->inject_ms = mono_ms() - t0;
    }
    pthread_mutex_unlock(&sc->inject_lock);
    place_close(&p);
    return fd;
}

static int send_all(int fd, const void *buf, size_t len)
{
    for (size_t sent = 0; sent < len;) {
        ssize_t n = send(fd, (const char *)buf + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -(n < 0 ? errno : EPIPE);
        sent += (size_t)n;
    }
    return 0;
}

/* Reads @len bytes before @deadline; -ETIMEDOUT when the stub has not answered by then. */
static int recv_all(int fd, void *buf, size_t len, double deadline)
{
    for (size_t got = 0; got < len;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        double left = deadline - mono_ms();
        ssize_t n;
        int r;

        if (left <= 0)
            return -ETIMEDOUT;
        r = poll(&pfd, 1, (int)(left + 1));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -ETIMEDOUT;
        n = recv(fd, (char *)buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -ECONNRESET;
        got += (size_t)n;
    }
    return 0;
}

static int exchange(int fd, pid_t pid, const struct stub_call *call, struct stub_result *res,
                    struct errbuf *err)
{
    struct stub_request rq = {.magic = STUB_MAGIC,
                              .kind = (uint8_t)call->kind,
                              .flags = (uint8_t)call->flags,
                              .session = call->session,
                              .len = (uint32_t)strlen(call->code)};
    double deadline = mono_ms() + (double)call->timeout_ms;
    struct stub_reply h;
    int r;

    if (rq.len > STUB_CODE_MAX)
        return errbuf_set(err, -E2BIG, "code of %u bytes: the limit is %u", rq.len, STUB_CODE_MAX);
    if ((r = send_all(fd, &rq, sizeof(rq))) < 0 || (r = send_all(fd, call->code, rq.len)) < 0)
        return errbuf_set(err, r, "pid %d: send to the stub: %s", (int)pid, strerror(-r));
    r = recv_all(fd, &h, sizeof(h), deadline);
    if (r == -ETIMEDOUT) {
        res->timed_out = true;
        return 0;
    }
    if (r < 0 || h.magic != STUB_MAGIC)
        return errbuf_set(err, r < 0 ? r : -EPROTO, "pid %d: the stub's reply: %s", (int)pid,
                          r < 0 ? strerror(-r) : "garbled");
    if (h.len > STUB_REPLY_MAX) /* whoever answers on a target's socket is not trusted */
        return errbuf_set(err, -EPROTO, "pid %d: a reply of %u bytes (the limit is %u)", (int)pid,
                          h.len, STUB_REPLY_MAX);
    res->status = (enum stub_status)h.status;
    res->text = malloc((size_t)h.len + 1);
    if (!res->text)
        return errbuf_set(err, -ENOMEM, "a reply of %u bytes", h.len);
    /* the header came: the text follows at once, whatever the timeout */
    r = recv_all(fd, res->text, h.len, mono_ms() + 10000);
    if (r < 0) {
        free(res->text);
        res->text = NULL;
        return errbuf_set(err, r, "pid %d: the stub's reply text: %s", (int)pid, strerror(-r));
    }
    res->text[h.len] = '\0';
    return 0;
}

/* With gate_lock: @pid's gate, taken when none is (NULL: all are in use). */
static struct gate *gate_of(struct stubctl *sc, pid_t pid)
{
    struct gate *free_gate = NULL;

    for (int i = 0; i < GATES_MAX; i++) {
        if (sc->gates[i].pid == pid)
            return &sc->gates[i];
        if (!sc->gates[i].pid && !free_gate)
            free_gate = &sc->gates[i];
    }
    if (free_gate)
        *free_gate = (struct gate){.pid = pid};
    return free_gate;
}

/* Enters @pid's gate, shared or @exclusive, waiting until @deadline_ms at most. */
static int gate_enter(struct stubctl *sc, pid_t pid, bool exclusive, double deadline_ms,
                      struct errbuf *err)
{
    struct gate *g;
    int r = 0;

    pthread_mutex_lock(&sc->gate_lock);
    for (;;) {
        g = gate_of(sc, pid);
        if (g && !g->exclusive && (!exclusive || g->shared == 0))
            break;
        if (mono_ms() >= deadline_ms) {
            r = -EBUSY;
            break;
        }
        int64_t at_ns = (int64_t)(deadline_ms * 1e6);
        struct timespec ts = {.tv_sec = at_ns / 1000000000LL, .tv_nsec = at_ns % 1000000000LL};
        pthread_cond_timedwait(&sc->gate_changed, &sc->gate_lock, &ts);
    }
    if (r == 0 && exclusive)
        g->exclusive = true;
    else if (r == 0)
        g->shared++;
    else if (g && !g->shared && !g->exclusive)
        g->pid = 0;
    pthread_mutex_unlock(&sc->gate_lock);
    if (r < 0)
        return errbuf_set(err, r, "pid %d: busy: %s in the process; try again", (int)pid,
                          exclusive ? "another call of probed's is running"
                                    : "tracemalloc is being started or stopped");
    return 0;
}

static void gate_leave(struct stubctl *sc, pid_t pid, bool exclusive)
{
    struct gate *g;

    pthread_mutex_lock(&sc->gate_lock);
    g = gate_of(sc, pid);
    if (exclusive)
        g->exclusive = false;
    else
        g->shared--;
    if (!g->shared && !g->exclusive)
        g->pid = 0;
    pthread_cond_broadcast(&sc->gate_changed);
    pthread_mutex_unlock(&sc->gate_lock);
}

int stubctl__call(struct stubctl *sc, const struct proc_grant *target, const struct stub_call *call,
                  struct stub_result *ret, struct errbuf *err)
{
    pid_t pid = target->pid;
    double wait_ms = call->exclusive ? STUBCTL_EXCLUSIVE_WAIT_MS : (double)call->timeout_ms;
    int fd, r;

    *ret = (struct stub_result){0};
    r = gate_enter(sc, pid, call->exclusive, mono_ms() + wait_ms, err);
    if (r < 0)
        return r;
    fd = open_stub(sc, target, call->may_inject, ret, err);
    /* connected, its peer is pid's process (SO_PEERCRED): still the one granted, so the peer
     * is it (the wait at the gate can be long: a pid reused meanwhile is refused here) */
    if (fd >= 0 && (r = procfs_grant_check(target, err->msg, sizeof(err->msg))) < 0) {
        close(fd);
        fd = r;
    }
    if (fd >= 0) {
        r = exchange(fd, pid, call, ret, err);
        if (r == 0 && call->ret_fd && !ret->timed_out && ret->status == STUB_OK)
            *call->ret_fd = fd;
        else
            close(fd); /* after a timeout too: the stub's reply, when it comes, goes nowhere */
    } else {
        r = fd;
    }
    gate_leave(sc, pid, call->exclusive);
    return r;
}
