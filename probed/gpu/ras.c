/*
 * ras.c - asks a process's NCCL RAS for its job's communicators (ras.h): where it listens
 * (its environment, its sockets, its descriptors), a connection made in its network namespace,
 * RAS's line protocol (NCCL's src/ras/client.cc is the client this speaks as), and NCCL's JSON
 * kept field by field.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>

#include "common/procfs.h"
#include "gpu/ras.h"

#define ENV_MAX (1u << 20) /* of /proc/PID/environ read */
#define LISTENERS_MAX 16   /* sockets listening on the RAS port, in the namespace */
#define FDS_MAX (1u << 20) /* descriptors of the process looked through */
#define LINE_MAX_RAS 256   /* a line of the handshake */
#define HOST_MAX 64        /* a host name or address in the answer */
#define OPS_MAX 32         /* collective kinds counted per rank */
#define RAS_DIAL_TRIES 16  /* connections made until one is answered by the process asked */

struct listener {
    struct sockaddr_storage addr; /* loopback for a wildcard */
    socklen_t len;
    unsigned long inode;
};

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The port @pid's RAS listens on, from its environment: NCCL_RAS_ADDR's, else 28028. -ENOENT
 * where NCCL_RAS_ENABLE=0 turned it off. */
static int ras_port(pid_t pid, int *ret_port, struct errbuf *err)
{
    char *env = malloc(ENV_MAX);
    const char *addr = NULL;
    bool off = false;
    ssize_t n;
    int r = 0;

    if (!env)
        return errbuf_set(err, -ENOMEM, "pid %d: no memory for its environment", (int)pid);
    if ((n = procfs_read(pid, "environ", env, ENV_MAX)) < 0) {
        free(env);
        return errbuf_set(err, (int)n, "pid %d: its environment: %s", (int)pid, strerror((int)-n));
    }
    for (char *p = env; p < env + n; p += strlen(p) + 1) {
        if (strncmp(p, "NCCL_RAS_ADDR=", 14) == 0)
            addr = p + 14;
        else if (strcmp(p, "NCCL_RAS_ENABLE=0") == 0)
            off = true;
    }
    *ret_port = RAS_DEFAULT_PORT;
    if (off) {
        r = errbuf_set(err, -ENOENT, "pid %d: NCCL's RAS is off in it (NCCL_RAS_ENABLE=0)",
                       (int)pid);
    } else if (addr) {
        const char *colon = strrchr(addr, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;

        if (!colon || end == colon + 1 || *end || port < 1 || port > 65535)
            r = errbuf_set(err, -ENOENT, "pid %d: NCCL_RAS_ADDR '%.64s' names no port", (int)pid,
                           addr);
        else
            *ret_port = (int)port;
    }
    free(env);
    return r;
}

#define TCP_ESTABLISHED_STATE 0x01 /* the kernel's TCP_ESTABLISHED, as net/tcp prints it */
#define TCP_LISTEN_STATE 0x0A

/* One line of /proc/PID/net/tcp or tcp6 as a socket in @state whose own port is @port and, with
 * @peer_port above 0, whose peer's is that: its address (loopback for a wildcard) and inode. */
static bool parse_socket(const char *line, bool v6, unsigned state, int port, int peer_port,
                         struct listener *l)
{
    char hex[33];
    unsigned lport, rport, st;
    unsigned long inode;

    if (sscanf(line, " %*u: %32[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %x %*s %*s %*s %*u %*d %lu", hex,
               &lport, &rport, &st, &inode) != 5 ||
        st != state || (int)lport != port || (peer_port > 0 && (int)rport != peer_port) ||
        strlen(hex) != (v6 ? 32u : 8u))
        return false;
    memset(l, 0, sizeof(*l));
    l->inode = inode;
    if (!v6) {
        /* the kernel prints the address's 32 bits as a number read in its own byte order */
        struct sockaddr_in *in = (struct sockaddr_in *)&l->addr;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        in->sin_addr.s_addr = (uint32_t)strtoul(hex, NULL, 16);
        if (in->sin_addr.s_addr == htonl(INADDR_ANY))
            in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l->len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&l->addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        for (int i = 0; i < 4; i++) {
            char word[9];
            uint32_t w;
            memcpy(word, hex + 8 * i, 8);
            word[8] = '\0';
            w = (uint32_t)strtoul(word, NULL, 16);
            memcpy(in6->sin6_addr.s6_addr + 4 * i, &w, 4);
        }
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            in6->sin6_addr = in6addr_loopback;
        l->len = sizeof(*in6);
    }
    return true;
}

/* The sockets in @state on @port (and @peer_port, above 0) in @pid's network namespace. */
static int sockets_on(pid_t pid, unsigned state, int port, int peer_port, struct listener *out,
                      int max)
{
    int n = 0;

    for (int v6 = 0; v6 <= 1; v6++) {
        char path[64], *line = NULL;
        size_t cap = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, v6 ? "tcp6" : "tcp");
        if (!(f = fopen(path, "re")))
            continue; /* no IPv6 in the kernel: no tcp6 */
        while (n < max && getline(&line, &cap, f) > 0)
            if (parse_socket(line, v6, state, port, peer_port, &out[n]))
                n++;
        free(line);
        fclose(f);
    }
    return n;
}

/* Which of @ls @pid holds among its descriptors: its index, or -1. */
static int held_by(pid_t pid, const struct listener *ls, int n)
{
    char path[64];
    struct dirent *e;
    unsigned seen = 0;
    int which = -1;
    DIR *d;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    if (!(d = opendir(path)))
        return -1;
    while (which < 0 && seen++ < FDS_MAX && (e = readdir(d))) {
        char link[64];
        unsigned long inode;
        ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);

        if (len <= 0)
            continue;
        link[len] = '\0';
        if (sscanf(link, "socket:[%lu]", &inode) != 1)
            continue;
        for (int i = 0; i < n && which < 0; i++)
            if (ls[i].inode == inode)
                which = i;
    }
    closedir(d);
    return which;
}

/* A socket made in the network namespace @nsfd names (-1: ours), by a thread of its own: setns
 * changes the namespace of the calling thread only, and that thread is then thrown away. */
struct dial {
    int nsfd, family, type, protocol;
    int fd, err;
};

static void *dial_run(void *arg)
{
    struct dial *d = arg;

    if (d->nsfd >= 0 && setns(d->nsfd, CLONE_NEWNET) < 0) {
        d->err = errno;
        return NULL;
    }
    if ((d->fd = socket(d->family, d->type | SOCK_CLOEXEC | SOCK_NONBLOCK, d->protocol)) < 0)
        d->err = errno;
    return NULL;
}

static int socket_in(pid_t pid, int family, int type, int protocol, struct errbuf *err)
{
    struct dial d = {.nsfd = -1, .family = family, .type = type, .protocol = protocol, .fd = -1};
    struct stat ours, theirs;
    char path[64];
    pthread_t t;
    int r;

    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    if ((d.nsfd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return errbuf_set(err, -errno, "pid %d: its network namespace: %s", (int)pid,
                          strerror(errno));
    if (fstat(d.nsfd, &theirs) == 0 && stat("/proc/self/ns/net", &ours) == 0 &&
        ours.st_ino == theirs.st_ino && ours.st_dev == theirs.st_dev) {
        close(d.nsfd);
        d.nsfd = -1;
    }
    if ((r = pthread_create(&t, NULL, dial_run, &d)) != 0) {
        if (d.nsfd >= 0)
            close(d.nsfd);
        return errbuf_set(err, -r, "a thread to enter pid %d's network: %s", (int)pid, strerror(r));
    }
    pthread_join(t, NULL);
    if (d.nsfd >= 0)
        close(d.nsfd);
    if (d.fd < 0 && d.err == EPERM && d.nsfd >= 0) /* setns: the packaged unit's case */
        return errbuf_set(err, -EPERM,
                          "pid %d runs in a network namespace of its own (a container's), where "
                          "its RAS listens: joining it needs CAP_SYS_ADMIN, which the packaged "
                          "unit does not give probed (a drop-in may add it: docs/cluster.md)",
                          (int)pid);
    if (d.fd < 0)
        return errbuf_set(err, -d.err, "a socket in pid %d's network namespace: %s", (int)pid,
                          strerror(d.err));
    return d.fd;
}

/* Waits for @events on @fd until @deadline (mono ms); -ETIMEDOUT past it. */
static int wait_for(int fd, short events, int64_t deadline)
{
    struct pollfd p = {.fd = fd, .events = events};

    for (;;) {
        int64_t left = deadline - mono_ms();
        int n;

        if (left <= 0)
            return -ETIMEDOUT;
        n = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

static int send_line(int fd, const char *s, int64_t deadline)
{
    size_t done = 0, len = strlen(s);

    while (done < len) {
        ssize_t n = send(fd, s + done, len - done, MSG_NOSIGNAL);
        int r;

        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if ((r = wait_for(fd, POLLOUT, deadline)) < 0)
            return r;
    }
    return 0;
}

/* One answer line (a byte at a time: what follows it is the next answer's), without its
 * newline; -EPROTO for a line past @size or the connection closed before its end. */
static int read_line(int fd, char *buf, size_t size, int64_t deadline)
{
    size_t len = 0;

    for (;;) {
        char c;
        ssize_t n = recv(fd, &c, 1, 0);
        int r;

        if (n == 1) {
            if (c == '\n') {
                if (len && buf[len - 1] == '\r')
                    len--;
                buf[len] = '\0';
                return 0;
            }
            if (len + 1 >= size)
                return -EPROTO;
            buf[len++] = c;
            continue;
        }
        if (n == 0)
            return -EPROTO;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        if ((r = wait_for(fd, POLLIN, deadline)) < 0)
            return r;
    }
}

/* Everything until the connection closes: *ret (malloc'd, NUL-terminated). */
static int read_to_end(int fd, char **ret, size_t *ret_len, int64_t deadline)
{
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap + 1);

    if (!buf)
        return -ENOMEM;
    for (;;) {
        ssize_t n;
        int r;

        if (len == cap) {
            char *more;
            if (cap >= RAS_REPLY_MAX) {
                free(buf);
                return -EFBIG;
            }
            cap = cap * 2 > RAS_REPLY_MAX ? RAS_REPLY_MAX : cap * 2;
            if (!(more = realloc(buf, cap + 1))) {
                free(buf);
                return -ENOMEM;
            }
            buf = more;
        }
        n = recv(fd, buf + len, cap - len, 0);
        if (n > 0) {
            len += (size_t)n;
            continue;
        }
        if (n == 0)
            break;
        if (errno != EAGAIN && errno != EINTR) {
            r = -errno;
            free(buf);
            return r;
        }
        if ((r = wait_for(fd, POLLIN, deadline)) < 0) {
            free(buf);
            return r;
        }
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    return 0;
}

/* @s with what is not printable ASCII as '?', cut to @size: for quoting an answer in an error. */
static const char *printable(const char *s, char *buf, size_t size)
{
    size_t i = 0;

    for (; s[i] && i + 1 < size; i++)
        buf[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

/* The inode of the TCP socket whose own end is @from and whose peer is @to, in the network
 * namespace of netlink socket @nl: one sock_diag lookup (an exact inet_diag_req_v2, as `ss`
 * asks), answered by the kernel alone. 0: no such socket; -errno. */
static int64_t diag_inode(int nl, const struct sockaddr_storage *from,
                          const struct sockaddr_storage *to, int64_t deadline)
{
    struct {
        struct nlmsghdr nh;
        struct inet_diag_req_v2 r;
    } req = {.nh = {.nlmsg_len = sizeof(req),
                    .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST,
                    .nlmsg_seq = 1},
             .r = {.sdiag_family = (uint8_t)from->ss_family,
                   .sdiag_protocol = IPPROTO_TCP,
                   .idiag_states = ~0u,
                   .id.idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}};
    union {
        struct nlmsghdr nh;
        char bytes[1024];
    } reply;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK}, sender;
    socklen_t len = sizeof(sender);
    ssize_t n;
    int r;

    if (from->ss_family == AF_INET) {
        const struct sockaddr_in *f = (const void *)from, *t = (const void *)to;
        req.r.id.idiag_sport = f->sin_port;
        req.r.id.idiag_dport = t->sin_port;
        memcpy(req.r.id.idiag_src, &f->sin_addr, sizeof(f->sin_addr));
        memcpy(req.r.id.idiag_dst, &t->sin_addr, sizeof(t->sin_addr));
    } else {
        const struct sockaddr_in6 *f = (const void *)from, *t = (const void *)to;
        req.r.id.idiag_sport = f->sin6_port;
        req.r.id.idiag_dport = t->sin6_port;
        memcpy(req.r.id.idiag_src, &f->sin6_addr, sizeof(f->sin6_addr));
        memcpy(req.r.id.idiag_dst, &t->sin6_addr, sizeof(t->sin6_addr));
    }
    if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return -errno;
    if ((r = wait_for(nl, POLLIN, deadline)) < 0)
        return r;
    if ((n = recvfrom(nl, &reply, sizeof(reply), 0, (struct sockaddr *)&sender, &len)) < 0)
        return -errno;
    /* the kernel's answer to this request (port 0, its sequence), nothing else */
    if (!NLMSG_OK(&reply.nh, (size_t)n) || sender.nl_pid != 0 || reply.nh.nlmsg_seq != 1)
        return -EPROTO;
    if (reply.nh.nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *e = NLMSG_DATA(&reply.nh);
        if (reply.nh.nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
            return -EPROTO;
        return e->error == -ENOENT ? 0 : (e->error < 0 ? e->error : -EPROTO);
    }
    if (reply.nh.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        reply.nh.nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
        return -EPROTO;
    return ((const struct inet_diag_msg *)NLMSG_DATA(&reply.nh))->idiag_inode;
}

/* Whether the end of connection @fd that answered is a socket @pid holds (its RAS thread
 * accepted it before answering the handshake): the listener was checked before connecting,
 * this closes the moment between (the process let its port go and another bound it). The
 * answering socket is looked up by sock_diag, in the namespace the connection is in; where
 * netlink is refused, in /proc/PID/net/tcp, a table read in pieces the kernel resumes by
 * position, where a socket going away meanwhile can hide the line (the debugger's peer check
 * was refused so in CI): a miss there costs a connection made again (ras_ask). */
static int answered_by(int fd, pid_t pid, int port, int64_t deadline)
{
    struct sockaddr_storage ours, theirs;
    socklen_t len = sizeof(ours), tlen = sizeof(theirs);
    struct listener accepted[LISTENERS_MAX];
    struct errbuf ignored = {{0}};
    int our_port, n, nl;

    if (getsockname(fd, (struct sockaddr *)&ours, &len) < 0 ||
        getpeername(fd, (struct sockaddr *)&theirs, &tlen) < 0)
        return -errno;
    if ((nl = socket_in(pid, AF_NETLINK, SOCK_DGRAM, NETLINK_SOCK_DIAG, &ignored)) >= 0) {
        int64_t inode = diag_inode(nl, &theirs, &ours, deadline);

        close(nl);
        if (inode >= 0) {
            accepted[0] = (struct listener){.inode = (unsigned long)inode};
            return inode > 0 && held_by(pid, accepted, 1) == 0 ? 0 : -EPERM;
        }
    }
    our_port = ntohs(ours.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ours)->sin6_port
                                                : ((struct sockaddr_in *)&ours)->sin_port);
    n = sockets_on(pid, TCP_ESTABLISHED_STATE, port, our_port, accepted, LISTENERS_MAX);
    return n > 0 && held_by(pid, accepted, n) >= 0 ? 0 : -EPERM;
}

/* The handshake, the JSON format, and the status: NCCL's document (*ret_json), or the text
 * report of an NCCL that has no JSON format. */
static int converse(int fd, pid_t pid, int port, const char *where, char **ret, size_t *ret_len,
                    bool *ret_json, int64_t deadline, struct errbuf *err)
{
    /* the handshake is answered by RAS's own thread at once, gathering or not: one not
     * answered in seconds is a process stopped (a debugger's pause, SIGSTOP) or a RAS stuck,
     * and `hang` asking it should not wait the gathering's 15 s for it */
    int64_t shake =
        mono_ms() + RAS_HANDSHAKE_MS < deadline ? mono_ms() + RAS_HANDSHAKE_MS : deadline;
    char line[LINE_MAX_RAS], shown[80];
    int r;

    if ((r = send_line(fd, "CLIENT PROTOCOL 2\n", shake)) < 0 ||
        (r = read_line(fd, line, sizeof(line), shake)) < 0)
        goto shaking;
    if (strncasecmp(line, "SERVER PROTOCOL ", 16) != 0)
        return errbuf_set(err, -EPROTO, "pid %d, %s: not NCCL's RAS (it answered '%s')", (int)pid,
                          where, printable(line, shown, sizeof(shown)));
    if ((r = answered_by(fd, pid, port, shake)) < 0)
        return errbuf_set(err, r,
                          "pid %d, %s: the connection was answered by a socket the process does "
                          "not hold: asked nothing more",
                          (int)pid, where);
    if ((r = send_line(fd, "SET FORMAT json\n", shake)) < 0 ||
        (r = read_line(fd, line, sizeof(line), shake)) < 0)
        goto shaking;
    *ret_json = strcasecmp(line, "OK") == 0; /* else NCCL before 2.28.7: its text report */
    if ((r = send_line(fd, "STATUS\n", deadline)) < 0 ||
        (r = read_to_end(fd, ret, ret_len, deadline)) < 0)
        goto failed;
    return 0;
shaking:
    if (r == -ETIMEDOUT)
        return errbuf_set(err, r,
                          "pid %d, %s: NCCL's RAS did not answer its handshake within %d s (the "
                          "process stopped, or its RAS thread stuck)",
                          (int)pid, where, RAS_HANDSHAKE_MS / 1000);
failed:
    if (r == -ETIMEDOUT)
        return errbuf_set(err, r, "pid %d, %s: NCCL's RAS did not answer within %d s", (int)pid,
                          where, RAS_DEADLINE_MS / 1000);
    if (r == -EFBIG)
        return errbuf_set(err, -EPROTO, "pid %d, %s: NCCL's RAS answered past %u MiB: not read",
                          (int)pid, where, RAS_REPLY_MAX >> 20);
    if (r == -EPROTO)
        return errbuf_set(err, r,
                          "pid %d, %s: not NCCL's RAS (a line past %d bytes, or closed "
                          "mid-line)",
                          (int)pid, where, LINE_MAX_RAS);
    return errbuf_set(err, r, "pid %d, %s: %s", (int)pid, where, strerror(-r));
}

/* ---- NCCL's document, kept field by field ---- */

struct norm {
    int ranks; /* kept so far, in all communicators */
    struct errbuf *err;
};

static int bad(struct norm *n, const char *what, int comm, int rank)
{
    if (rank >= 0)
        return errbuf_set(n->err, -EPROTO, "NCCL's RAS answer: communicator %d, rank entry %d: %s",
                          comm, rank, what);
    if (comm >= 0)
        return errbuf_set(n->err, -EPROTO, "NCCL's RAS answer: communicator %d: %s", comm, what);
    return errbuf_set(n->err, -EPROTO, "NCCL's RAS answer: %s", what);
}

/* A string field of at most @max bytes, printable ASCII; NULL (and *ok false) if it is not one. */
static const char *short_text(json_t *o, const char *key, size_t max, bool *ok)
{
    json_t *v = json_object_get(o, key);
    const char *s;

    if (!v)
        return NULL;
    if (!json_is_string(v) || json_string_length(v) > max) {
        *ok = false;
        return NULL;
    }
    s = json_string_value(v);
    for (const char *p = s; *p; p++)
        if (!isprint((unsigned char)*p)) {
            *ok = false;
            return NULL;
        }
    return s;
}

/* Copies integer @key of @from (between @lo and @hi) to @to as @as; absent: nothing. */
static bool copy_int(json_t *to, const char *as, json_t *from, const char *key, json_int_t lo,
                     json_int_t hi)
{
    json_t *v = json_object_get(from, key);

    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return false;
    json_object_set_new(to, as, json_integer(json_integer_value(v)));
    return true;
}

static bool copy_bool(json_t *to, const char *as, json_t *from, const char *key)
{
    json_t *v = json_object_get(from, key);

    if (!v)
        return true;
    if (!json_is_boolean(v))
        return false;
    json_object_set_new(to, as, json_boolean(json_is_true(v)));
    return true;
}

static bool op_name(const char *s)
{
    size_t len = strlen(s);

    if (len < 1 || len > 24)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return false;
    return true;
}

/* One entry of "ranks" (@missing false) or "missing_ranks" as ours. */
static int norm_rank(struct norm *n, json_t *r, bool missing, int ci, int ri, json_t **ret)
{
    json_t *out, *status = json_object_get(r, "status");
    bool ok = true;
    const char *host;

    if (!json_is_object(r))
        return bad(n, "not an object", ci, ri);
    if (!json_is_integer(json_object_get(r, "rank")))
        return bad(n, "no \"rank\"", ci, ri);
    if (status && !json_is_object(status))
        return bad(n, "\"status\" not an object", ci, ri);
    out = json_object();
    host = short_text(r, "host", HOST_MAX, &ok);
    if (host)
        json_object_set_new(out, "host", json_string(host));
    ok = ok && copy_int(out, "rank", r, "rank", 0, INT32_MAX) &&
         copy_int(out, "pid", r, "pid", -1, INT32_MAX) &&
         copy_int(out, "cuda_dev", r, "cuda_dev", -1, 4096);
    if (ok && status && !missing)
        ok = copy_int(out, "init_state", status, "init_state", INT32_MIN, INT32_MAX) &&
             copy_int(out, "async_error", status, "async_error", INT32_MIN, INT32_MAX) &&
             copy_bool(out, "finalized", status, "finalize_called") &&
             copy_bool(out, "destroyed", status, "destroy_flag") &&
             copy_bool(out, "aborted", status, "abort_flag");
    if (ok && status && missing)
        ok = copy_bool(out, "unresponsive", status, "unresponsive") &&
             copy_bool(out, "dead", status, "considered_dead");
    if (ok && !missing) {
        json_t *counts = json_object_get(r, "collective_counts"), *v, *kept = json_object();
        const char *op;

        if (counts && (!json_is_object(counts) || json_object_size(counts) > OPS_MAX))
            ok = false;
        json_object_foreach(counts, op, v)
        {
            if (!ok || !op_name(op) || !json_is_integer(v) || json_integer_value(v) < 0) {
                ok = false;
                break;
            }
            json_object_set_new(kept, op, json_integer(json_integer_value(v)));
        }
        json_object_set_new(out, "counts", kept);
    }
    if (!ok) {
        json_decref(out);
        return bad(n, "a field of another type or size than NCCL's", ci, ri);
    }
    *ret = out;
    return 0;
}

/* One array of ranks (@key) of communicator @c into @to's @as. */
static int norm_ranks(struct norm *n, json_t *c, const char *key, bool missing, int ci, json_t *to,
                      const char *as)
{
    json_t *arr = json_object_get(c, key), *kept = json_array(), *r;
    size_t i;

    json_object_set_new(to, as, kept);
    if (!arr)
        return 0;
    if (!json_is_array(arr))
        return bad(n, "its ranks not an array", ci, -1);
    json_array_foreach(arr, i, r)
    {
        json_t *one = NULL;
        int rc;

        if (++n->ranks > RAS_RANKS_MAX)
            return errbuf_set(n->err, -EPROTO, "NCCL's RAS answer: past %d ranks: not kept",
                              RAS_RANKS_MAX);
        if ((rc = norm_rank(n, r, missing, ci, (int)i, &one)) < 0)
            return rc;
        json_array_append_new(kept, one);
    }
    return 0;
}

int ras_normalise(json_t *doc, json_t **ret, struct errbuf *err)
{
    struct norm n = {.err = err};
    json_t *comms = json_object_get(doc, "communicators"), *out, *kept, *c, *ras;
    bool ok = true;
    const char *version;
    size_t i;
    int r;

    if (!json_is_object(doc))
        return bad(&n, "not a JSON object", -1, -1);
    if (!json_is_array(comms))
        return bad(&n, "no \"communicators\" array", -1, -1);
    if (json_array_size(comms) > RAS_COMMS_MAX)
        return errbuf_set(err, -EPROTO, "NCCL's RAS answer: %zu communicators, past %d: not kept",
                          json_array_size(comms), RAS_COMMS_MAX);
    version = short_text(doc, "nccl_version", 32, &ok);
    if (!ok)
        return bad(&n, "\"nccl_version\" not a short string", -1, -1);
    out = json_object();
    if (version)
        json_object_set_new(out, "nccl_version", json_string(version));
    ras = json_object_get(doc, "ras");
    if (json_is_object(ras)) {
        json_t *t = json_object_get(ras, "collection_time_sec");
        if (json_is_number(t) && json_number_value(t) >= 0)
            json_object_set_new(out, "collection_s", json_real(json_number_value(t)));
        if (!copy_int(out, "timeouts", ras, "timeouts_count", 0, INT32_MAX)) {
            json_decref(out);
            return bad(&n, "\"timeouts_count\" not a count", -1, -1);
        }
    }
    kept = json_array();
    json_object_set_new(out, "communicators", kept);
    json_array_foreach(comms, i, c)
    {
        json_t *one;
        const char *hash;

        if (!json_is_object(c)) {
            json_decref(out);
            return bad(&n, "not an object", (int)i, -1);
        }
        ok = true;
        hash = short_text(c, "hash", 24, &ok);
        one = json_object();
        json_array_append_new(kept, one);
        if (hash)
            json_object_set_new(one, "hash", json_string(hash));
        if (!ok || !copy_int(one, "size", c, "size", 0, INT32_MAX)) {
            json_decref(out);
            return bad(&n, "\"hash\" or \"size\" not NCCL's", (int)i, -1);
        }
        if ((r = norm_ranks(&n, c, "ranks", false, (int)i, one, "ranks")) < 0 ||
            (r = norm_ranks(&n, c, "missing_ranks", true, (int)i, one, "missing")) < 0) {
            json_decref(out);
            return r;
        }
    }
    *ret = out;
    return 0;
}

/* ---- the whole ask ---- */

static int still_same(pid_t pid, int64_t start_time, struct errbuf *err)
{
    int64_t now_start;
    uint64_t stack;

    if (procfs_identity(pid, &now_start, &stack) < 0 || now_start != start_time)
        return errbuf_set(err, -ESRCH, "pid %d: exited (or its pid is another process's now)",
                          (int)pid);
    return 0;
}

/* A connection to @l in @pid's network namespace, and the conversation on it. */
static int dial(pid_t pid, const struct listener *l, int port, const char *where, char **text,
                size_t *len, bool *json, int64_t deadline, struct errbuf *err)
{
    int fd, r;

    if ((fd = socket_in(pid, l->addr.ss_family, SOCK_STREAM, 0, err)) < 0)
        return fd;
    if (connect(fd, (const struct sockaddr *)&l->addr, l->len) < 0 && errno != EINPROGRESS) {
        r = errbuf_set(err, -errno, "pid %d: connecting to its RAS at %s: %s", (int)pid, where,
                       strerror(errno));
        close(fd);
        return r;
    }
    if ((r = wait_for(fd, POLLOUT, deadline)) == 0) {
        int so = 0;
        socklen_t sl = sizeof(so);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
        r = -so;
    }
    if (r < 0)
        errbuf_set(err, r, "pid %d: connecting to its RAS at %s: %s", (int)pid, where,
                   strerror(-r));
    else
        r = converse(fd, pid, port, where, text, len, json, deadline, err);
    close(fd);
    return r;
}

int ras_ask(pid_t pid, int64_t start_time, json_t **ret, struct errbuf *err)
{
    struct listener ls[LISTENERS_MAX];
    int64_t deadline = mono_ms() + RAS_DEADLINE_MS;
    char where[INET6_ADDRSTRLEN + 16], host[INET6_ADDRSTRLEN];
    char *text = NULL;
    size_t len = 0;
    json_t *doc;
    json_error_t jerr;
    bool json = false;
    int port, n = 0, which = -1, r;

    if ((r = still_same(pid, start_time, err)) < 0 || (r = ras_port(pid, &port, err)) < 0)
        return r;
    /* the table read in pieces may skip a line as sockets go away meanwhile: read again */
    for (int reads = 0; reads < 3 && which < 0; reads++) {
        n = sockets_on(pid, TCP_LISTEN_STATE, port, 0, ls, LISTENERS_MAX);
        which = n > 0 ? held_by(pid, ls, n) : -1;
    }
    if (which < 0)
        return errbuf_set(err, -ENOENT,
                          "pid %d holds no socket listening on port %d: no NCCL RAS in it "
                          "(NCCL before 2.24 or not loaded, RAS off, or the port %s)",
                          (int)pid, port,
                          n > 0 ? "another process's (not asked)" : "named elsewhere");
    if (ls[which].addr.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ls[which].addr)->sin_addr, host, sizeof(host));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ls[which].addr)->sin6_addr, host,
                  sizeof(host));
    snprintf(where, sizeof(where), ls[which].addr.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host,
             port);
    /* two jobs of one user on a node share RAS's port (NCCL binds it with SO_REUSEPORT) and
     * the kernel spreads connections among them: one answered by the other job's is dropped
     * after the handshake, and a new one, from another port, may fall on this one's */
    for (int tries = 0;
         (r = dial(pid, &ls[which], port, where, &text, &len, &json, deadline, err)) == -EPERM &&
         ++tries < RAS_DIAL_TRIES;)
        ;
    if (r == 0)
        r = still_same(pid, start_time, err); /* what was read was that process's job's */
    if (r < 0) {
        free(text);
        return r;
    }
    if (!json) { /* shown as NCCL wrote it, what is not printable ASCII or a newline as '?' */
        for (size_t i = 0; i < len; i++)
            if (!isprint((unsigned char)text[i]) && text[i] != '\n')
                text[i] = '?';
        *ret = json_pack("{s:s, s:s%}", "address", where, "text", text, len);
        free(text);
        return *ret ? 0
                    : errbuf_set(err, -ENOMEM, "pid %d: no memory for its RAS's report", (int)pid);
    }
    doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!doc)
        return errbuf_set(err, -EPROTO, "pid %d, %s: NCCL's RAS answer is no JSON: %s (line %d)",
                          (int)pid, where, jerr.text, jerr.line);
    r = ras_normalise(doc, ret, err);
    json_decref(doc);
    if (r == 0)
        json_object_set_new(*ret, "address", json_string(where));
    return r;
}
