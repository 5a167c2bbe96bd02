/* fanout.c - see fanout.h. */
#define _GNU_SOURCE
#include "ctl/fanout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl/client.h"

int fanout_init(struct fanout *fo, char *const *hosts, size_t n, const char *template,
                long timeout_ms)
{
    *fo = (struct fanout){.n = n, .template = template, .timeout_ms = timeout_ms};
    fo->nodes = calloc(n ? n : 1, sizeof(*fo->nodes));
    fo->multi = curl_multi_init();
    if (!fo->nodes || !fo->multi) {
        free(fo->nodes);
        if (fo->multi)
            curl_multi_cleanup(fo->multi);
        return -ENOMEM;
    }
    curl_multi_setopt(fo->multi, CURLMOPT_MAXCONNECTS, (long)n + 4);
    for (size_t i = 0; i < n; i++) {
        fo->nodes[i].host = hosts[i];
        transport_set_init(&fo->nodes[i].set, template, hosts[i]);
    }
    return 0;
}

void fanout_set_all(struct fanout *fo, const char *method, const char *path, json_t *body)
{
    for (size_t i = 0; i < fo->n; i++) {
        fo->nodes[i].method = method;
        snprintf(fo->nodes[i].path, sizeof(fo->nodes[i].path), "%s", path);
        fo->nodes[i].body = body;
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    static const char name[] = "x-probed-version:";
    struct fan_node *node = ctx;
    size_t len = size * n;

    if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        size_t i = sizeof(name) - 1, end = len;
        while (i < len && p[i] == ' ')
            i++;
        while (end > i && (p[end - 1] == '\r' || p[end - 1] == '\n' || p[end - 1] == ' '))
            end--;
        snprintf(node->version, sizeof(node->version), "%.*s", (int)(end - i), p + i);
    }
    return len;
}

static void clear_outcome(struct fan_node *node)
{
    json_decref(node->reply);
    free(node->raw.data);
    free(node->payload);
    curl_slist_free_all(node->headers);
    node->reply = NULL;
    node->raw = (struct client_reply){0};
    node->payload = NULL;
    node->headers = NULL;
    node->rc = 0;
    node->status = 0;
    node->err[0] = '\0';
    node->version[0] = '\0';
}

/* Readies @node's handle for its request; -errno with err set. */
static int prepare(struct fanout *fo, struct fan_node *node)
{
    char url[1100];
    int r;

    if (!node->curl && !(node->curl = curl_easy_init())) {
        snprintf(node->err, sizeof(node->err), "%s: libcurl could not start", node->host);
        return -ENOMEM;
    }
    curl_easy_reset(node->curl); /* keeps the connection of the previous run */
    if ((r = transport_set_use(&node->set, node->curl)) < 0) {
        snprintf(node->err, sizeof(node->err), "%s: no socket for the transport: %s", node->host,
                 strerror(-r));
        return r;
    }
    snprintf(url, sizeof(url), "%s%s", node->set.base, node->path);
    curl_easy_setopt(node->curl, CURLOPT_URL, url);
    curl_easy_setopt(node->curl, CURLOPT_CUSTOMREQUEST, node->method);
    curl_easy_setopt(node->curl, CURLOPT_WRITEFUNCTION, client_on_data);
    curl_easy_setopt(node->curl, CURLOPT_WRITEDATA, (void *)&node->raw);
    curl_easy_setopt(node->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(node->curl, CURLOPT_HEADERDATA, (void *)node);
    curl_easy_setopt(node->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(node->curl, CURLOPT_TIMEOUT_MS, fo->timeout_ms);
    curl_easy_setopt(node->curl, CURLOPT_PRIVATE, (void *)node);
    if (node->body) {
        node->payload = json_dumps(node->body, JSON_COMPACT);
        node->headers = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(node->curl, CURLOPT_HTTPHEADER, node->headers);
        curl_easy_setopt(node->curl, CURLOPT_POSTFIELDS, node->payload ? node->payload : "");
    }
    return 0;
}

/* The first two numbers of a version must agree: the API's shape. */
static bool same_api(const char *a, const char *b)
{
    const char *da = strchr(a, '.'), *db = strchr(b, '.');

    da = da ? strchr(da + 1, '.') : NULL;
    db = db ? strchr(db + 1, '.') : NULL;
    if (!da || !db)
        return strcmp(a, b) == 0;
    return da - a == db - b && strncmp(a, b, (size_t)(da - a)) == 0;
}

static void finish(struct fanout *fo, struct fan_node *node, CURLcode rc)
{
    double total = 0;

    curl_easy_getinfo(node->curl, CURLINFO_TOTAL_TIME, &total);
    node->seconds = total;
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(node->err, sizeof(node->err), "%s: no answer within %.1f s (transport: %s)",
                 node->host, (double)fo->timeout_ms / 1000, fo->template);
        node->rc = -ETIMEDOUT;
        return;
    }
    if (rc != CURLE_OK) {
        transport_explain(&node->set, curl_easy_strerror(rc), node->err, sizeof(node->err));
        node->rc = -EHOSTUNREACH;
        return;
    }
    if (!node->version_ok && !same_api(node->version, PROBED_VERSION)) {
        snprintf(node->err, sizeof(node->err),
                 "version mismatch: probectl %s here, probed %s on %s (install the same version"
                 " on both)",
                 PROBED_VERSION, *node->version ? node->version : "(older, unnamed)", node->host);
        node->rc = -EPROTO;
        return;
    }
    node->version_ok = true;
    curl_easy_getinfo(node->curl, CURLINFO_RESPONSE_CODE, &node->status);
    node->reply = node->raw.data ? json_loadb(node->raw.data, node->raw.len, 0, NULL) : NULL;
}

int fanout_run(struct fanout *fo)
{
    CURLM *m = fo->multi;
    size_t next = 0, active = 0;
    int failed = 0;

    for (size_t i = 0; i < fo->n; i++)
        if (fo->nodes[i].method) {
            clear_outcome(&fo->nodes[i]);
            fo->nodes[i].asked = true;
        }
    while (next < fo->n || active) {
        CURLMsg *msg;
        int left, still;

        while (active < FANOUT_WINDOW && next < fo->n) {
            struct fan_node *node = &fo->nodes[next++];
            if (!node->method)
                continue;
            if ((node->rc = prepare(fo, node)) < 0)
                continue;
            if (curl_multi_add_handle(m, node->curl) != CURLM_OK) {
                snprintf(node->err, sizeof(node->err), "%s: libcurl could not add the request",
                         node->host);
                node->rc = -ENOMEM;
                continue;
            }
            active++;
        }
        curl_multi_perform(m, &still);
        while ((msg = curl_multi_info_read(m, &left))) {
            struct fan_node *node = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&node);
            finish(fo, node, msg->data.result);
            curl_multi_remove_handle(m, msg->easy_handle);
            active--;
        }
        if (active)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        failed += node->method && (node->rc < 0 || node->status < 200 || node->status > 299);
        node->method = NULL; /* asked; the next run asks what it is given */
    }
    return failed;
}

const char *fanout_error(const struct fan_node *node, char *buf, size_t size)
{
    if (node->rc < 0)
        return node->err;
    snprintf(buf, size, "%s: %s (HTTP %ld)", node->host, client_error_text(node->reply),
             node->status);
    return buf;
}

void fanout_free(struct fanout *fo)
{
    struct transport_set **sets = calloc(fo->n ? fo->n : 1, sizeof(*sets));

    if (fo->multi)
        curl_multi_cleanup(fo->multi); /* closes the connections it holds */
    fo->multi = NULL;
    for (size_t i = 0; i < fo->n; i++) {
        clear_outcome(&fo->nodes[i]);
        if (fo->nodes[i].curl)
            curl_easy_cleanup(fo->nodes[i].curl); /* closes its connection */
        if (sets)
            sets[i] = &fo->nodes[i].set;
        else
            transport_set_free(&fo->nodes[i].set);
    }
    if (sets)
        transport_sets_free(sets, fo->n);
    free(sets);
    free(fo->nodes);
    fo->nodes = NULL;
    fo->n = 0;
}
