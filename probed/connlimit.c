/* connlimit.c - bounds on one listener's clients; see connlimit.h. */
#define _GNU_SOURCE
#include "connlimit.h"

#include <errno.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define ACCEPT_PAUSE_MS 200
#define LOG_EVERY_S 60

struct connlimit {
    struct connlimit_config cfg;
    struct event_base *base;
    struct evconnlistener *listener; /* owned by the evhttp it is bound to */
    struct event *resume;            /* ends a pause of accepting */
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
    evconnlistener_enable(cl->listener);
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
    if (now - cl->logged_at >= LOG_EVERY_S) {
        log_msg(LOG_WARN,
                "%s: accept: %s (%llu times in all); pausing accepts for "
                "%d ms each time",
                cl->cfg.what, strerror(e), (unsigned long long)cl->stats.accept_errors,
                ACCEPT_PAUSE_MS);
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
    }
    /* no callback yet: evhttp_bind_listener() sets its own, and so enables it */
    if (cl && cl->resume)
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
    *ret = cl;
    return 0;
}

void connlimit_free(struct connlimit *cl)
{
    if (!cl)
        return;
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
}
