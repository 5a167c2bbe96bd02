/*
 * connlimit.h - what the clients of one HTTP listener (the API's Unix socket, the Prometheus
 * port) can cost the daemon when its fds run out. Before, 1100 idle connections under the
 * usual 1024-fd limit made accept() fail in a loop: 57 % CPU, 370 MB of log in 30 s, and live
 * targets taken for exited (sampler.c now tells a failed open from a gone process).
 *
 * The listener is ours (an evconnlistener bound to the evhttp): accept() failing (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM) pauses accepting for ACCEPT_PAUSE_MS and is logged once a minute
 * with a count, never in a loop. evhttp's own timeout closes a connection idle for its
 * timeout; main.c raises the fd limit to the hard one (the unit sets LimitNOFILE).
 * Not yet: a cap on open connections with 503 past it, and a deadline for a request that
 * trickles in (libevent 2.1 has no hook for either without a filter bufferevent, which loses
 * replies evhttp closes after: docs/SECURITY.md).
 * Threads: the loop thread only. Memory: fixed.
 * Failure: connlimit_serve() -ENOMEM (the fd closed).
 */
#ifndef PROBED_CONNLIMIT_H
#define PROBED_CONNLIMIT_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdint.h>

struct connlimit_config {
    const char *what; /* for the log: the socket's path, "/metrics" */
};

struct connlimit;

/* Serves listening socket @fd with @http. Takes @fd: @http closes it in evhttp_free(), or
 * this call does when it fails. Free @cl after evhttp_free(@http). */
int connlimit_serve(struct event_base *base, struct evhttp *http, int fd,
                    const struct connlimit_config *cfg, struct connlimit **ret);
void connlimit_free(struct connlimit *cl); /* NULL is a no-op */

struct connlimit_stats {
    uint64_t accept_errors;
};
void connlimit__stats(const struct connlimit *cl, struct connlimit_stats *ret);

#endif
