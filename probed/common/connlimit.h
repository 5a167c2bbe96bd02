/*
 * connlimit.h - bounds what the clients of one HTTP listener (the API's Unix socket, the
 * Prometheus port, `probectl web`'s port) can hold: connections, time to send a first request, and
 * what an accept() that fails costs. Before, 1100 idle connections under the usual 1024-fd limit
 * made accept() fail in a loop (57 % CPU, 370 MB of log in 30 s) and live targets were taken for
 * exited (sampler.c now tells a failed open from a gone process).
 *
 * The listener is ours (an evconnlistener bound to the evhttp), and so is each connection's
 * bufferevent (evhttp_set_bevcb), held by a reference of ours: evhttp freeing it is seen in a
 * sweep every 100 ms (its callbacks are gone), and only then is it counted out and its fd
 * closed. Past max_conns open connections a request is answered 503 (connlimit__request()
 * false); at twice that, accepting pauses until one closes. A connection whose first request
 * has not arrived whole within request_s is cut (slow or trickling clients). accept() failing
 * (EMFILE, ENFILE, ENOBUFS, ENOMEM) pauses accepting for 200 ms and is logged once a minute
 * with a count, never in a loop. main.c raises the fd limit to the hard one.
 * On a Unix socket, each connection's user (SO_PEERCRED) is learnt as soon as it has an fd (at
 * the next sweep, or its first request): one user who is not root holds per_user_max at
 * most, and all of them together max_conns - root_reserve; a connection past either is cut
 * at once (its request, if one came, answered 503). Before, one user holding 1,100 idle
 * connections made 12 of 25 of root's requests fail over a minute.
 * Threads: the loop thread only. Memory: 2 * max_conns small entries, at the start.
 * Failure: connlimit_serve() -ENOMEM (the fd closed).
 */
#ifndef PROBED_CONNLIMIT_H
#define PROBED_CONNLIMIT_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>

struct connlimit_config {
    const char *what; /* for the log: the socket's path, "/metrics" */
    int max_conns;    /* past it 503; at twice it accepting pauses */
    int request_s;    /* a connection's first request must arrive whole within this */
    int per_user_max; /* a Unix socket's: connections one user who is not root holds; 0: any */
    int root_reserve; /* ... and what all of them leave to root */
    void (*warn)(const char *msg); /* what is said of accept() failing; NULL: nothing */
};

struct connlimit;

/* A listening TCP socket on @host (a name or an address) and @port ("0": any free one), for
 * connlimit_serve(): 0, or -errno (-EADDRNOTAVAIL: @host names no address). */
int connlimit_listen_tcp(const char *host, const char *port, int *ret_fd);

/* Serves listening socket @fd with @http. Takes @fd: @http closes it in evhttp_free(), or
 * this call does when it fails. Free @cl after evhttp_free(@http). */
int connlimit_serve(struct event_base *base, struct evhttp *http, int fd,
                    const struct connlimit_config *cfg, struct connlimit **ret);
void connlimit_free(struct connlimit *cl); /* NULL is a no-op */

/* A request arrived whole on its connection: false when more than max_conns are open (answer
 * it 503 and close). NULL @cl: true. */
bool connlimit__request(struct connlimit *cl, struct evhttp_request *req);

struct connlimit_stats {
    int open;
    uint64_t accept_errors, refused_over, cut_slow, cut_user; /* cut_user: past a user's share */
};
void connlimit__stats(const struct connlimit *cl, struct connlimit_stats *ret);

#endif
