/* transport.c - see transport.h. */
#define _GNU_SOURCE
#include "ctl/transport.h"

#include "ctl/nodes.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD_MAX 4096

const char *transport_template(const char *option)
{
    const char *env = getenv("PROBED_TRANSPORT");

    return option ? option : env && *env ? env : TRANSPORT_DEFAULT;
}

/* @tpl with every {host} replaced by @host in single quotes; -E2BIG when it does not fit,
 * -EINVAL when @host is not a host name (nodes.h: never an option of the transport). */
static int expand(const char *tpl, const char *host, char *out, size_t cap)
{
    size_t n = 0;

    if (!nodes_host_name_ok(host))
        return -EINVAL;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (n + 1 >= cap)                                                                          \
            return -E2BIG;                                                                         \
        out[n++] = (c);                                                                            \
    } while (0)
    for (const char *p = tpl; *p;) {
        if (strncmp(p, "{host}", 6) != 0) {
            PUT(*p++);
            continue;
        }
        PUT('\'');
        for (const char *h = host; *h; h++) {
            if (*h == '\'') { /* ' ends the quote, \' is one quote, ' opens it again */
                PUT('\'');
                PUT('\\');
                PUT('\'');
            }
            PUT(*h);
        }
        PUT('\'');
        p += 6;
    }
#undef PUT
    out[n] = '\0';
    return 0;
}

int transport_template_check(const char *template, char *err, size_t err_len)
{
    char cmd[CMD_MAX];

    if (!strstr(template, "{host}")) {
        snprintf(err, err_len,
                 "the transport '%s' does not name the host: put {host} where it goes", template);
        return -EINVAL;
    }
    if (expand(template, "x", cmd, sizeof(cmd)) < 0) {
        snprintf(err, err_len, "the transport is longer than %d bytes", CMD_MAX);
        return -EINVAL;
    }
    return 0;
}

void transport_set_init(struct transport_set *set, const char *template, const char *host)
{
    *set = (struct transport_set){.template = template, .host = host, .listen_fd = -1};
}

/* Reaps @t if it has ended, waiting @wait_ms at most. */
static void reap(struct transport *t, int wait_ms)
{
    for (int waited = 0; t->status < 0; waited += 10) {
        int st;
        pid_t r = waitpid(t->pid, &st, WNOHANG);

        if (r == t->pid || (r < 0 && errno == ECHILD)) {
            t->status = r == t->pid ? st : 0;
            return;
        }
        if (waited >= wait_ms)
            return;
        usleep(10 * 1000);
    }
}

/* The child: takes the one connection probectl makes to the set's listener from @port (the
 * port of the socket it bound for it: no other process can connect from there, so no other
 * process can borrow this transport), joins it to the command's stdin and stdout, and runs
 * the command. */
static void run_transport(int listen_fd, int err_fd, in_port_t port, const char *cmd)
{
    for (int tries = 0; tries < 16; tries++) {
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        int fd;

        if (poll(&p, 1, 10000) <= 0)
            _exit(125);
        fd = accept4(listen_fd, (struct sockaddr *)&peer, &len, 0);
        if (fd < 0)
            continue;
        if (peer.sin_family != AF_INET || peer.sin_port != port ||
            peer.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
            close(fd);
            continue;
        }
        /* its own process group, so that ending it ends what the shell started */
        setpgid(0, 0);
        if (dup2(fd, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0 ||
            dup2(err_fd, STDERR_FILENO) < 0)
            _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    _exit(125);
}

/* A TCP socket bound to a port of its own on the loopback; its port in *port. */
static int bound_socket(in_port_t *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        close(fd);
        return -1;
    }
    *port = sa.sin_port;
    return fd;
}

/* curl opens a connection: start the transport that will take it, then let curl connect. */
static curl_socket_t open_transport(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    struct transport_set *set = clientp;
    struct transport *t;
    char cmd[CMD_MAX];
    int ep[2], fd;
    in_port_t port = 0;
    pid_t pid;

    (void)purpose;
    if (addr->family != AF_INET)
        return CURL_SOCKET_BAD;
    /* forget transports whose connection curl closed and that have ended */
    for (size_t i = 0; i < set->n;) {
        reap(&set->t[i], 0);
        if (set->t[i].fd < 0 && set->t[i].status >= 0) {
            if (set->t[i].err_fd >= 0)
                close(set->t[i].err_fd);
            set->t[i] = set->t[--set->n];
        } else {
            i++;
        }
    }
    if (set->listen_fd < 0 || set->n == sizeof(set->t) / sizeof(set->t[0]) ||
        expand(set->template, set->host, cmd, sizeof(cmd)) < 0)
        return CURL_SOCKET_BAD;
    if (pipe2(ep, O_CLOEXEC) < 0)
        return CURL_SOCKET_BAD;
    fd = bound_socket(&port);
    pid = fd < 0 ? -1 : fork();
    if (pid == 0)
        run_transport(set->listen_fd, ep[1], port, cmd);
    close(ep[1]);
    if (pid < 0) {
        if (fd >= 0)
            close(fd);
        close(ep[0]);
        return CURL_SOCKET_BAD;
    }
    fcntl(ep[0], F_SETFL, O_NONBLOCK);
    t = &set->t[set->n++];
    *t = (struct transport){.pid = pid, .fd = fd, .err_fd = ep[0], .status = -1};
    return fd;
}

static int close_transport(void *clientp, curl_socket_t fd)
{
    struct transport_set *set = clientp;

    for (size_t i = 0; i < set->n; i++)
        if (set->t[i].fd == fd)
            set->t[i].fd = -1;
    return close(fd);
}

/* The set's listener on a loopback port. curl 7.88 connects every socket it opens (it ignores
 * "already connected"), and reuses no connection to a Unix socket with its threaded resolver
 * ("still name resolving"): so the transport is reached through a TCP connection curl makes
 * and keeps, to a port only for this set. */
static int listen_once(struct transport_set *set)
{
    in_port_t port;
    int fd;

    if (set->listen_fd >= 0)
        return 0;
    fd = bound_socket(&port);
    if (fd < 0)
        return -errno;
    if (listen(fd, 4) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    set->listen_fd = fd;
    snprintf(set->base, sizeof(set->base), "http://127.0.0.1:%u", (unsigned)ntohs(port));
    return 0;
}

int transport_set_use(struct transport_set *set, CURL *curl)
{
    int r = listen_once(set);

    if (r < 0)
        return r;
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_transport);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, set);
    curl_easy_setopt(curl, CURLOPT_CLOSESOCKETFUNCTION, close_transport);
    curl_easy_setopt(curl, CURLOPT_CLOSESOCKETDATA, set);
    return 0;
}

/* Reads what @t wrote to stderr, for at most @wait_ms or until it closed it; keeps the end. */
static void drain_said(struct transport *t, int wait_ms)
{
    struct timespec start, now;
    char buf[1024];

    clock_gettime(CLOCK_MONOTONIC, &start);
    while (t->err_fd >= 0) {
        struct pollfd p = {.fd = t->err_fd, .events = POLLIN};
        ssize_t n;
        int left;

        clock_gettime(CLOCK_MONOTONIC, &now);
        left = wait_ms -
               (int)((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return;
        n = read(t->err_fd, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            close(t->err_fd);
            t->err_fd = -1;
            return;
        }
        if (t->said_len + (size_t)n >= sizeof(t->said)) { /* keep the end: the reason is last */
            size_t drop = t->said_len + (size_t)n - (sizeof(t->said) - 1);
            if (drop > t->said_len)
                drop = t->said_len;
            memmove(t->said, t->said + drop, t->said_len - drop);
            t->said_len -= drop;
        }
        if ((size_t)n > sizeof(t->said) - 1 - t->said_len)
            n = (ssize_t)(sizeof(t->said) - 1 - t->said_len);
        memcpy(t->said + t->said_len, buf, (size_t)n);
        t->said_len += (size_t)n;
        t->said[t->said_len] = '\0';
    }
}

/* The last non-empty line of @s, into @out. */
static void last_line(const char *s, char *out, size_t cap)
{
    const char *end = s + strlen(s), *start;

    while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
        end--;
    start = end;
    while (start > s && start[-1] != '\n')
        start--;
    snprintf(out, cap, "%.*s", (int)(end - start), start);
}

void transport_explain(struct transport_set *set, const char *curl_error, char *err, size_t err_len)
{
    struct transport *t = set->n ? &set->t[set->n - 1] : NULL;
    char line[TRANSPORT_STDERR_MAX];
    int code;

    if (!t) {
        snprintf(err, err_len, "%s: the transport could not be started: %s", set->host, curl_error);
        return;
    }
    drain_said(t, 1000);
    reap(t, 1000);
    last_line(t->said, line, sizeof(line));
    if (t->status < 0) {
        snprintf(err, err_len, "%s: %s (the transport is still running: %s)", set->host, curl_error,
                 set->template);
        return;
    }
    code = WIFEXITED(t->status) ? WEXITSTATUS(t->status) : 128 + WTERMSIG(t->status);
    if (strstr(t->said, "probectl proxy: no daemon at"))
        snprintf(err, err_len, "no daemon on %s: %s", set->host, line);
    else if (code == 127 && strstr(t->said, "probectl"))
        snprintf(err, err_len, "probectl is not installed on %s (or not on its PATH): %s",
                 set->host, line);
    else if (code == 255 && strncmp(set->template, "ssh", 3) == 0)
        snprintf(err, err_len, "cannot reach %s over ssh: %s", set->host,
                 *line ? line : "ssh exited with 255");
    else
        snprintf(err, err_len, "%s: the transport ended (exit status %d): %s", set->host, code,
                 *line ? line : curl_error);
}

/* Reaps every transport of @sets that has ended, until none is left or @wait_ms passed;
 * returns how many are still running. */
static size_t reap_all(struct transport_set *const *sets, size_t n, int wait_ms)
{
    size_t running = 0;

    for (int waited = 0;; waited += 10) {
        running = 0;
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < sets[s]->n; i++) {
                reap(&sets[s]->t[i], 0);
                running += sets[s]->t[i].status < 0;
            }
        if (!running || waited >= wait_ms)
            return running;
        usleep(10 * 1000);
    }
}

static void signal_all(struct transport_set *const *sets, size_t n, int sig)
{
    for (size_t s = 0; s < n; s++)
        for (size_t i = 0; i < sets[s]->n; i++)
            if (sets[s]->t[i].status < 0)
                kill(-sets[s]->t[i].pid, sig);
}

void transport_sets_free(struct transport_set *const *sets, size_t n)
{
    for (size_t s = 0; s < n; s++)
        for (size_t i = 0; i < sets[s]->n; i++)
            if (sets[s]->t[i].fd >= 0) {
                close(sets[s]->t[i].fd);
                sets[s]->t[i].fd = -1;
            }
    /* stdin closed: ssh and the proxy end of themselves; a stuck one is ended, all at once */
    if (reap_all(sets, n, TRANSPORT_GRACE_MS)) {
        signal_all(sets, n, SIGTERM);
        if (reap_all(sets, n, 1000)) {
            signal_all(sets, n, SIGKILL);
            reap_all(sets, n, 1000);
        }
    }
    for (size_t s = 0; s < n; s++) {
        struct transport_set *set = sets[s];
        for (size_t i = 0; i < set->n; i++)
            if (set->t[i].err_fd >= 0)
                close(set->t[i].err_fd);
        set->n = 0;
        if (set->listen_fd >= 0)
            close(set->listen_fd);
        set->listen_fd = -1;
    }
}

void transport_set_free(struct transport_set *set)
{
    transport_sets_free(&set, 1);
}
