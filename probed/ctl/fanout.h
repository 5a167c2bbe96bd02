/*
 * fanout.h - one request to each of many nodes' daemons at once, for `probectl cluster` and
 * `probectl hang`: libcurl's multi interface over the transports (transport.h), at most
 * FANOUT_WINDOW connections being made at a time, each node given a deadline of its own.
 *
 * A struct fan_node keeps its connection between two fanout_run() calls (the second request
 * to a node reuses the transport of the first). A node that fails says why in its err (host
 * unreachable, ssh refused, no daemon, version mismatch, no answer in time): the callers name
 * it in their output and their exit status, never leave it out.
 * Threads: the caller's. Memory: fanout_free() ends every transport (in parallel, bounded).
 */
#ifndef PROBECTL_FANOUT_H
#define PROBECTL_FANOUT_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "ctl/client.h"
#include "ctl/transport.h"

#define FANOUT_WINDOW 64

struct fan_node {
    const char *host; /* not owned */
    /* the request of this run: method NULL means none for this node */
    const char *method;
    char path[1024];
    json_t *body; /* borrowed */
    /* the outcome of the last request it was asked (asked: one was): rc 0 and an HTTP status,
     * or rc -errno with err */
    bool asked;
    int rc;
    long status;
    json_t *reply;           /* owned: the reply parsed as JSON, or NULL */
    struct client_reply raw; /* owned: the reply's bytes */
    double seconds;          /* from sending to the last byte */
    char err[640];
    /* private */
    struct transport_set set;
    CURL *curl;
    struct curl_slist *headers;
    char *payload;
    char version[64];
    bool version_ok;
};

struct fanout {
    struct fan_node *nodes;
    size_t n;
    const char *template;
    long timeout_ms; /* per node and request */
    CURLM *multi;    /* holds the connections between runs (matched by the node's socket) */
};

/* @fo over @hosts (borrowed; they must outlive it). -ENOMEM. */
int fanout_init(struct fanout *fo, char *const *hosts, size_t n, const char *template,
                long timeout_ms);
/* Sends each node's request (those with a method), waits for every answer or deadline. Their
 * previous outcomes are freed first; a node without a method keeps its own. Returns how many nodes
 * failed (rc < 0 or a status outside 2xx), or -errno when the fan-out itself could not run. */
int fanout_run(struct fanout *fo);
/* The same request to every node; @body borrowed. */
void fanout_set_all(struct fanout *fo, const char *method, const char *path, json_t *body);
/* A node's failure in words: its err, or its reply's "error" with the HTTP status. */
const char *fanout_error(const struct fan_node *node, char *buf, size_t size);
void fanout_free(struct fanout *fo);

#endif
