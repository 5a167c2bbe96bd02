/* connlimit.c - bounds on one listener's clients; see connlimit.h. */
#define _GNU_SOURCE
#include "common/connlimit.h"

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stdio.h>

#define ACCEPT_PAUSE_MS 200
#define LOG_EVERY_S 60

static int64_t now_ms(void) /* CLOCK_MONOTONIC */
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
#define SWEEP_MS 100 /* how often closed connections are counted out and slow ones cut */

/* One connection: its bufferevent, held by a reference of ours so that evhttp freeing it is
 * seen (its callbacks are then gone) and its fd closes when we let go; when it came, and
 * whether a whole request has arrived on it. */
struct conn {
    struct bufferevent *bev;
    int64_t accepted_ms;
    bool served;
    bool known; /* its peer's uid is read (or there is none to read: TCP) */
    bool over;  /* cut: past its user's share */
    uid_t uid;  /* the peer's, when known on a Unix socket */
};

struct connlimit {
    struct connlimit_config cfg;
    struct event_base *base;
    struct evconnlistener *listener; /* owned by the evhttp it is bound to */
    struct event *resume;            /* ends a pause of accepting */
    struct event *sweep;
    struct event *classify; /* made active by each accept on a Unix socket */
    struct conn *conns;     /* 2 * max_conns */
    int n_conns;
    int n_users;      /* of those, known to be of users who are not root and not cut */
    int n_over;       /* of those, cut for their user's share, not yet freed by evhttp */
    bool paused_full; /* at 2 * max_conns: accepting waits for a connection to close */
    struct connlimit_stats stats;
    time_t logged_at;
};

/* The error callback's argument is the listener's, which evhttp set to itself: the bounds of
 * a listener are found by the listener (the daemon serves two at most). */
#define LISTENERS_MAX 8
static struct connlimit *registered[LISTENERS_MAX]; /* loop thread only */

static struct connlimit *of_listener(const struct evconnlistener *l)
{
    for (int i = 0; i < LISTENERS_MAX; i++)
        if (registered[i] && registered[i]->listener == l)
            return registered[i];
    return NULL;
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct connlimit *cl = arg;

    (void)fd, (void)what;
    if (!cl->paused_full)
        evconnlistener_enable(cl->listener);
}

static void classify_new(evutil_socket_t fd, short what, void *arg);

/* evhttp's bufferevent for a connection it accepted (it sets the fd on it next: its user is
 * learnt at once after, in the loop's next turn, not at the next sweep). */
static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    struct connlimit *cl = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

    if (!bev || cl->n_conns == 2 * cl->cfg.max_conns)
        return bev; /* (never: accepting pauses before) unbounded, but served */
    bufferevent_incref(bev);
    cl->conns[cl->n_conns++] = (struct conn){.bev = bev, .accepted_ms = now_ms()};
    if (cl->cfg.per_user_max)
        event_active(cl->classify, 0, 0);
    if (cl->n_conns == 2 * cl->cfg.max_conns && !cl->paused_full) {
        cl->paused_full = true;
        evconnlistener_disable(cl->listener);
    }
    return bev;
}

/* Cuts @c: shut, so evhttp sees its end and frees it (counted out by the sweep). */
static void cut(struct conn *c)
{
    if (bufferevent_getfd(c->bev) >= 0)
        shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
    c->served = true; /* cut once */
}

/* Learns @c's user once it has an fd, and cuts it when that user, or all users who are not
 * root, hold their share already. */
static void classify(struct connlimit *cl, struct conn *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    int fd = bufferevent_getfd(c->bev), same = 0;

    if (c->known || fd < 0)
        return;
    c->known = true;
    if (!cl->cfg.per_user_max || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
        cred.uid == 0)
        return; /* root's, or no user to tell (TCP) */
    c->uid = cred.uid;
    for (int i = 0; i < cl->n_conns; i++)
        same += cl->conns[i].known && !cl->conns[i].over && cl->conns[i].uid == cred.uid &&
                &cl->conns[i] != c;
    if (same >= cl->cfg.per_user_max || cl->n_users >= cl->cfg.max_conns - cl->cfg.root_reserve) {
        c->over = true;
        cl->n_over++;
        cl->stats.cut_user++;
        cut(c);
        return;
    }
    cl->n_users++;
}

/* The loop's turn after accepts: each new connection's user learnt, and those past their
 * share cut. */
static void classify_new(evutil_socket_t fd, short what, void *arg)
{
    struct connlimit *cl = arg;

    (void)fd, (void)what;
    for (int i = 0; i < cl->n_conns; i++)
        classify(cl, &cl->conns[i]);
}

/* Counts out the connections evhttp has freed (closing their fds now), and cuts those whose
 * first request has not arrived whole within request_s (slow or trickling clients): their
 * socket shut, evhttp sees the end and frees them. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct connlimit *cl = arg;
    int64_t now = now_ms();

    (void)fd, (void)what;
    for (int i = 0; i < cl->n_conns;) {
        struct conn *c = &cl->conns[i];
        bufferevent_data_cb readcb, writecb;
        bufferevent_event_cb eventcb;
        void *cbarg;
        bufferevent_getcb(c->bev, &readcb, &writecb, &eventcb, &cbarg);
        if (!readcb && !writecb && !eventcb && !cbarg) { /* evhttp let it go */
            cl->n_users -= c->known && c->uid && !c->over;
            cl->n_over -= c->over;
            bufferevent_decref(c->bev);
            *c = cl->conns[--cl->n_conns];
            continue;
        }
        classify(cl, c);
        if (!c->served && now - c->accepted_ms > cl->cfg.request_s * 1000LL &&
            bufferevent_getfd(c->bev) >= 0) {
            cut(c);
            cl->stats.cut_slow++;
        }
        i++;
    }
    if (cl->paused_full && cl->n_conns < 2 * cl->cfg.max_conns) {
        cl->paused_full = false;
        evconnlistener_enable(cl->listener);
    }
}

/* accept() failed for want of fds or memory: pause rather than spin, and say so once a
 * minute with how often, not once per try. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct connlimit *cl = of_listener(l);
    int e = EVUTIL_SOCKET_ERROR();
    time_t now = time(NULL);

    (void)arg;
    if (!cl)
        return;
    cl->stats.accept_errors++;
    if (now - cl->logged_at >= LOG_EVERY_S && cl->cfg.warn) {
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "%s: accept: %s (%llu times in all); pausing accepts for %d ms"
                 " each time",
                 cl->cfg.what, strerror(e), (unsigned long long)cl->stats.accept_errors,
                 ACCEPT_PAUSE_MS);
        cl->cfg.warn(msg);
        cl->logged_at = now;
    }
    evconnlistener_disable(l);
    event_add(cl->resume, &(struct timeval){.tv_usec = ACCEPT_PAUSE_MS * 1000});
}

int connlimit_serve(struct event_base *base, struct evhttp *http, int fd,
                    const struct connlimit_config *cfg, struct connlimit **ret)
{
    struct connlimit *cl = calloc(1, sizeof(*cl));

    evutil_make_socket_nonblocking(fd);
    if (cl) {
        cl->cfg = *cfg;
        cl->base = base;
        cl->resume = evtimer_new(base, on_resume, cl);
        cl->sweep = event_new(base, -1, EV_PERSIST, on_sweep, cl);
        cl->classify = event_new(base, -1, 0, classify_new, cl);
        cl->conns = calloc((size_t)(2 * cfg->max_conns), sizeof(*cl->conns));
    }
    if (cl && cl->sweep &&
        event_add(cl->sweep, &(struct timeval){.tv_usec = SWEEP_MS * 1000}) < 0) {
        event_free(cl->sweep);
        cl->sweep = NULL;
    }
    /* no callback yet: evhttp_bind_listener() sets its own, and so enables it */
    if (cl && cl->resume && cl->sweep && cl->classify && cl->conns)
        cl->listener = evconnlistener_new(base, NULL, NULL,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (!cl || !cl->listener || !evhttp_bind_listener(http, cl->listener)) {
        if (cl && cl->listener)
            evconnlistener_free(cl->listener); /* closes @fd */
        else
            close(fd);
        connlimit_free(cl);
        return -ENOMEM;
    }
    for (int i = 0; i < LISTENERS_MAX; i++)
        if (!registered[i]) {
            registered[i] = cl;
            break;
        }
    evconnlistener_set_error_cb(cl->listener, on_accept_error);
    evhttp_set_bevcb(http, make_bev, cl);
    *ret = cl;
    return 0;
}

void connlimit_free(struct connlimit *cl)
{
    if (!cl)
        return;
    for (int i = 0; i < cl->n_conns; i++) /* evhttp_free() has freed them all: ours closes */
        bufferevent_decref(cl->conns[i].bev);
    free(cl->conns);
    if (cl->sweep)
        event_free(cl->sweep);
    if (cl->classify)
        event_free(cl->classify);
    for (int i = 0; i < LISTENERS_MAX; i++)
        if (registered[i] == cl)
            registered[i] = NULL;
    if (cl->resume)
        event_free(cl->resume);
    free(cl);
}

void connlimit__stats(const struct connlimit *cl, struct connlimit_stats *ret)
{
    *ret = cl->stats;
    ret->open = cl->n_conns;
}

bool connlimit__request(struct connlimit *cl, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = req ? evhttp_request_get_connection(req) : NULL;
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;

    struct conn *c = NULL;

    if (!cl)
        return true;
    for (int i = 0; i < cl->n_conns; i++) { /* each user's share known before anyone is served */
        classify(cl, &cl->conns[i]);
        if (bev && cl->conns[i].bev == bev)
            c = &cl->conns[i];
    }
    if (c)
        c->served = true;
    if (c && c->over)
        return false; /* counted in cut_user */
    /* users hold max_conns - root_reserve at most: root finds its share under max_conns, once
     * those cut are gone */
    if (cl->n_conns - cl->n_over <= cl->cfg.max_conns)
        return true;
    cl->stats.refused_over++;
    return false;
}

int connlimit_listen_tcp(const char *host, const char *port, int *ret_fd)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int fd, rc, one = 1;

    if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0)
        return rc == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    /* TCP_NODELAY (inherited by accepted sockets): a reply in several segments is not held
     * back waiting for the client's delayed ACK (40 ms each). */
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return rc;
    }
    freeaddrinfo(ai);
    *ret_fd = fd;
    return 0;
}
