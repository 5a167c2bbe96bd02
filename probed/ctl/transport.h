/*
 * transport.h - probectl's way to a daemon on another node: a command the site already trusts
 * (`ssh -T HOST probectl proxy` by default, or any template such as `kubectl exec -i {host} --
 * probectl proxy`) is started with its stdin and stdout joined to one end of a socketpair, and
 * libcurl speaks HTTP over the other end as it would over the daemon's Unix socket. (The "pair"
 * is a loopback TCP connection curl makes to a listener of ours, taken by the command's
 * process only when it comes from the port our socket bound: see listen_once().) The remote
 * daemon authorises the proxy's user by SO_PEERCRED: no port of ours, no secrets of our own.
 *
 * The template runs under /bin/sh -c, its `{host}` replaced by the host quoted for the shell;
 * a template without `{host}` is refused, as it could not name the node.
 * Threads: one caller at a time per struct transport_set (probectl is single-threaded).
 * Memory: a set owns its transports; transport_set_free() ends their commands (SIGTERM after
 * their stdin is closed and a grace of TRANSPORT_GRACE_MS) and reaps them.
 * Failure: when a connection ends before a reply, transport_explain() says why in words a user
 * can act on: the host cannot be reached or refused ssh (the transport's own message), no
 * daemon on that node, probectl not installed there, or the command's exit status.
 */
#ifndef PROBECTL_TRANSPORT_H
#define PROBECTL_TRANSPORT_H

#include <curl/curl.h>
#include <stdbool.h>
#include <sys/types.h>

#define TRANSPORT_DEFAULT "ssh -T -o BatchMode=yes -o ConnectTimeout=10 -- {host} probectl proxy"
#define TRANSPORT_GRACE_MS 2000
#define TRANSPORT_STDERR_MAX 2048 /* the end of what the command said, kept for errors */

/* One started transport command: our end of its socketpair, and what it said on stderr. */
struct transport {
    pid_t pid;
    int fd;     /* ours; -1 once curl closed it */
    int err_fd; /* the read end of its stderr; -1 once drained */
    int status; /* its wait status once reaped; -1 before */
    char said[TRANSPORT_STDERR_MAX];
    size_t said_len;
};

/* The transports started for one host (a connection curl dropped may be made again). */
struct transport_set {
    const char *template; /* not owned */
    const char *host;     /* not owned */
    struct transport t[4];
    size_t n;
    int listen_fd; /* where curl connects; the transport's child takes the connection */
    char base[64]; /* the URL that reaches the listener: http://127.0.0.1:PORT */
};

/* The transport template: @option, else $PROBED_TRANSPORT, else TRANSPORT_DEFAULT. */
const char *transport_template(const char *option);

/* 0 when @template names the host ({host}) and fits; else -EINVAL with why in @err. */
int transport_template_check(const char *template, char *err, size_t err_len);

/* @set ready for @host over @template (neither copied). */
void transport_set_init(struct transport_set *set, const char *template, const char *host);
/* Makes @curl open its connections through @set (set before curl_easy_perform), whose URLs
 * then start with set->base; -errno when the listener the transports are reached through
 * cannot be made. */
int transport_set_use(struct transport_set *set, CURL *curl);
/* Why the connection through @set failed, curl having said @curl_error: into @err. */
void transport_explain(struct transport_set *set, const char *curl_error, char *err,
                       size_t err_len);
/* Ends and reaps the commands of @set; of all @n @sets at once (one grace for all). */
void transport_set_free(struct transport_set *set);
void transport_sets_free(struct transport_set *const *sets, size_t n);

#endif
