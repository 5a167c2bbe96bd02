/* stubctl.c - loads the stub into targets and talks to it; see stubctl.h. */
#define _GNU_SOURCE
#include "stubctl.h"

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
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "inject.h"
#include "procfs.h"
#include "errbuf.h"

#define SOCKET_WAIT_MS 3000 /* from dlopen() returning to the stub's socket being up */

struct stubctl {
    char *stub_path;
    pthread_mutex_t inject_lock;
};

/* Where one target's stub lives: as the target sees it, and as we reach it. */
struct stub_place {
    char dir_in_target[64];
    char dir[128];
    char sock[160];
    uid_t uid;
    gid_t gid;
};

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
        if (strncmp(e->d_name, "stub-", 5) == 0 || strncmp(e->d_name, STUB_SOCKET_NAME, 4) == 0)
            unlinkat(fd, e->d_name, 0);
    closedir(d);
    unlinkat(tmp_fd, name, AT_REMOVEDIR);
}

/* The stubs of processes that are gone (a normal exit removes its own; kill -9 cannot): the
 * /tmp/probed-PID-START directories in our mount namespace whose process is no more. */
static void sweep_stale_stubs(void)
{
    int tmp_fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = tmp_fd >= 0 ? fdopendir(dup(tmp_fd)) : NULL;
    struct dirent *e;

    while (d && (e = readdir(d)) != NULL) {
        int pid;
        long long start;
        int64_t now;
        char tail;
        if (sscanf(e->d_name, "probed-%d-%lld%c", &pid, &start, &tail) != 2 || pid <= 0)
            continue;
        if (procfs_start_time(pid, &now) == 0 && now == start)
            continue; /* alive */
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
    pthread_mutex_init(&sc->inject_lock, NULL);
    sweep_stale_stubs();
    *ret = sc;
    return 0;
}

void stubctl_free(struct stubctl *sc)
{
    if (!sc)
        return;
    pthread_mutex_destroy(&sc->inject_lock);
    free(sc->stub_path);
    free(sc);
}

static int place_of(pid_t pid, struct stub_place *p, char *err, size_t errlen)
{
    char proc[32];
    struct stat st;
    int64_t start;
    int r = procfs_start_time(pid, &start);

    snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
    if (r < 0 || stat(proc, &st) < 0)
        return errbuf_set(err, errlen, -ESRCH, "pid %d does not exist", (int)pid);
    snprintf(p->dir_in_target, sizeof(p->dir_in_target), "/tmp/probed-%d-%" PRId64, (int)pid,
             start);
    snprintf(p->dir, sizeof(p->dir), "/proc/%d/root%s", (int)pid, p->dir_in_target);
    snprintf(p->sock, sizeof(p->sock), "%s/%s", p->dir, STUB_SOCKET_NAME);
    p->uid = st.st_uid;
    p->gid = st.st_gid;
    return 0;
}

static int connect_stub(const struct stub_place *p)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(p->sock) >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    memcpy(addr.sun_path, p->sock, strlen(p->sock) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* The directory: created 0700 for the target's user, or an existing one that is exactly that
 * (never a symlink or someone else's: /tmp is shared). */
static int make_dir(const struct stub_place *p, char *err, size_t errlen)
{
    struct stat st;

    if (mkdir(p->dir, 0700) == 0) {
        if (chown(p->dir, p->uid, p->gid) < 0)
            return errbuf_set(err, errlen, -errno, "chown %s: %s", p->dir, strerror(errno));
        return 0;
    }
    if (errno != EEXIST)
        return errbuf_set(err, errlen, -errno, "mkdir %s: %s", p->dir, strerror(errno));
    if (lstat(p->dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != p->uid || (st.st_mode & 077))
        return errbuf_set(err, errlen, -EPERM,
                          "%s exists and is not a private directory of the target's user", p->dir);
    return 0;
}

/* A copy of the stub under a name used once: dlopen() of a path already loaded would not
 * run the constructor again. */
static int copy_stub(const struct stubctl *sc, const struct stub_place *p, char *name, size_t size,
                     char *err, size_t errlen)
{
    char path[256], buf[65536];
    struct timespec ts;
    int in, out, r = 0;
    ssize_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, size, "stub-%lld%09ld.so", (long long)ts.tv_sec, ts.tv_nsec);
    snprintf(path, sizeof(path), "%s/%s", p->dir, name);
    in = open(sc->stub_path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return errbuf_set(err, errlen, -errno, "open %s: %s", sc->stub_path, strerror(errno));
    out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0500);
    if (out < 0) {
        r = errbuf_set(err, errlen, -errno, "create %s: %s", path, strerror(errno));
        close(in);
        return r;
    }
    while (r == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            r = errbuf_set(err, errlen, -EIO, "write %s: %s", path, strerror(errno));
    if (r == 0 && fchown(out, p->uid, p->gid) < 0)
        r = errbuf_set(err, errlen, -errno, "chown %s: %s", path, strerror(errno));
    close(in);
    if (close(out) < 0 && r == 0)
        r = errbuf_set(err, errlen, -errno, "close %s: %s", path, strerror(errno));
    if (r < 0)
        unlink(path);
    return r;
}

/* Loads the stub and waits for its socket; returns the connected socket. */
static int inject_stub(struct stubctl *sc, pid_t pid, const struct stub_place *p, char *err,
                       size_t errlen)
{
    char name[64], in_target[160];
    double deadline;
    int r, fd;

    sweep_stale_stubs();
    if ((r = make_dir(p, err, errlen)) < 0 ||
        (r = copy_stub(sc, p, name, sizeof(name), err, errlen)) < 0)
        return r;
    snprintf(in_target, sizeof(in_target), "%s/%s", p->dir_in_target, name);
    r = inject_library(pid, in_target, err, errlen);
    if (r < 0)
        return r;
    deadline = mono_ms() + SOCKET_WAIT_MS;
    while ((fd = connect_stub(p)) < 0 && mono_ms() < deadline)
        usleep(2000);
    if (fd < 0)
        return errbuf_set(err, errlen, -ETIMEDOUT,
                          "pid %d loaded the stub but its socket %s did not appear within %d ms",
                          (int)pid, p->sock, SOCKET_WAIT_MS);
    return fd;
}

/* The stub's socket, loading the stub first when the target has none. */
static int open_stub(struct stubctl *sc, pid_t pid, bool may_inject, struct stub_result *res,
                     char *err, size_t errlen)
{
    struct stub_place p;
    double t0 = mono_ms();
    int fd = place_of(pid, &p, err, errlen);

    if (fd < 0)
        return fd;
    fd = connect_stub(&p);
    if (fd >= 0)
        return fd;
    if (!may_inject)
        return errbuf_set(err, errlen, -ENOENT, "pid %d has no stub loaded", (int)pid);
    pthread_mutex_lock(&sc->inject_lock);
    fd = connect_stub(&p); /* another worker may have loaded it meanwhile */
    if (fd < 0) {
        fd = inject_stub(sc, pid, &p, err, errlen);
        res->injected = fd >= 0;
        res->inject_ms = mono_ms() - t0;
    }
    pthread_mutex_unlock(&sc->inject_lock);
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
                    char *err, size_t errlen)
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
        return errbuf_set(err, errlen, -E2BIG, "code of %u bytes: the limit is %u", rq.len,
                          STUB_CODE_MAX);
    if ((r = send_all(fd, &rq, sizeof(rq))) < 0 || (r = send_all(fd, call->code, rq.len)) < 0)
        return errbuf_set(err, errlen, r, "pid %d: send to the stub: %s", (int)pid, strerror(-r));
    r = recv_all(fd, &h, sizeof(h), deadline);
    if (r == -ETIMEDOUT) {
        res->timed_out = true;
        return 0;
    }
    if (r < 0 || h.magic != STUB_MAGIC)
        return errbuf_set(err, errlen, r < 0 ? r : -EPROTO, "pid %d: the stub's reply: %s",
                          (int)pid, r < 0 ? strerror(-r) : "garbled");
    res->status = (enum stub_status)h.status;
    res->text = malloc((size_t)h.len + 1);
    if (!res->text)
        return errbuf_set(err, errlen, -ENOMEM, "a reply of %u bytes", h.len);
    /* the header came: the text follows at once, whatever the timeout */
    r = recv_all(fd, res->text, h.len, mono_ms() + 10000);
    if (r < 0) {
        free(res->text);
        res->text = NULL;
        return errbuf_set(err, errlen, r, "pid %d: the stub's reply text: %s", (int)pid,
                          strerror(-r));
    }
    res->text[h.len] = '\0';
    return 0;
}

int stubctl__call(struct stubctl *sc, pid_t pid, const struct stub_call *call,
                  struct stub_result *ret, char *err, size_t errlen)
{
    int fd, r;

    *ret = (struct stub_result){0};
    fd = open_stub(sc, pid, call->may_inject, ret, err, errlen);
    if (fd < 0)
        return fd;
    r = exchange(fd, pid, call, ret, err, errlen);
    close(fd); /* after a timeout too: the stub's reply, when it comes, goes nowhere */
    return r;
}
