/* remote.c - see remote.h. */
#define _GNU_SOURCE
#include "ctl/remote.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl/client.h"

#define PROXY_BUF 65536

/* One direction of the proxy: bytes read from @in and not yet written to @out. */
struct pipe_half {
    int in, out;
    char buf[PROXY_BUF];
    size_t len, off;
    bool eof;      /* @in ended */
    bool out_shut; /* and @out was shut for writing once the buffer was empty */
};

/* Moves what @h can without blocking: a write of what is buffered, else a read. -errno. */
static int pump(struct pipe_half *h, short revents_in, short revents_out)
{
    ssize_t n;

    if (h->len > h->off && (revents_out & (POLLOUT | POLLERR | POLLHUP))) {
        n = write(h->out, h->buf + h->off, h->len - h->off);
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return -errno;
        h->off += n > 0 ? (size_t)n : 0;
        if (h->off == h->len)
            h->off = h->len = 0;
    }
    if (h->len == 0 && !h->eof && (revents_in & (POLLIN | POLLHUP | POLLERR))) {
        n = read(h->in, h->buf, sizeof(h->buf));
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return -errno;
        if (n == 0)
            h->eof = true;
        h->len = n > 0 ? (size_t)n : 0;
    }
    return 0;
}

/* Connects to the daemon's socket at @path; -errno after saying why on stderr. */
static int connect_daemon(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, e;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "probectl proxy: socket path too long: %s\n", path);
        return -ENAMETOOLONG;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        e = errno;
        fprintf(stderr, "probectl proxy: no daemon at %s: %s\n", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    return fd;
}

int proxy_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    static struct pipe_half up, down; /* stdin -> daemon, daemon -> stdout */
    const char *socket_opt = NULL;
    int c, fd, r = 0;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'S') {
            socket_opt = optarg;
        } else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: probectl proxy [--socket PATH]\n"
                    "Joins stdin and stdout to the daemon's socket: the remote end of a\n"
                    "transport such as `ssh -T HOST probectl proxy`.\n");
            return c == 'h' ? 0 : 2;
        }
    }
    fd = connect_daemon(client_socket_path(socket_opt));
    if (fd < 0)
        return 1;
    up = (struct pipe_half){.in = STDIN_FILENO, .out = fd};
    down = (struct pipe_half){.in = fd, .out = STDOUT_FILENO};
    /* until the daemon is done: its replies to all that came in, or it hung up */
    while (r == 0 && !(down.eof && down.len == 0)) {
        struct pollfd p[4] = {
            {.fd = up.eof || up.len ? -1 : STDIN_FILENO, .events = POLLIN},
            {.fd = up.len ? fd : -1, .events = POLLOUT},
            {.fd = down.eof || down.len ? -1 : fd, .events = POLLIN},
            {.fd = down.len ? STDOUT_FILENO : -1, .events = POLLOUT},
        };

        if (poll(p, 4, -1) < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            break;
        }
        r = pump(&up, p[0].revents, p[1].revents);
        if (r == 0)
            r = pump(&down, p[2].revents, p[3].revents);
        if (up.eof && up.len == 0 && !up.out_shut) {
            shutdown(fd, SHUT_WR); /* the client is done asking */
            up.out_shut = true;
        }
    }
    close(fd);
    if (r < 0 && r != -EPIPE) {
        fprintf(stderr, "probectl proxy: %s\n", strerror(-r));
        return 1;
    }
    return 0;
}
