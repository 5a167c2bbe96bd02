/* client.c - see client.h. */
#define _GNU_SOURCE
#include "ctl/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/units.h"
#include "ctl/fanout.h"

/* -H HOST: every call goes to HOST's daemon, a fan-out of one node (its connection kept for
 * the next call, its version checked on the first reply). One call at a time goes through it:
 * `probectl web` and `mcp` make calls from several threads. */
static struct fanout remote;
static char *remote_hosts[1];
static const char *remote_template;
static pthread_mutex_t remote_lock = PTHREAD_MUTEX_INITIALIZER;

size_t client_on_data(char *p, size_t size, size_t n, void *ctx)
{
    struct client_reply *r = ctx;
    char *grown = realloc(r->data, r->len + size * n + 1);

    if (!grown)
        return 0;
    memcpy(grown + r->len, p, size * n);
    r->len += size * n;
    grown[r->len] = '\0';
    r->data = grown;
    return size * n;
}

static void remote_end(void)
{
    fanout_free(&remote);
}

void client_use_remote(const char *host, const char *template)
{
    remote_hosts[0] = (char *)host;
    remote_template = template;
    if (fanout_init(&remote, remote_hosts, 1, template, CLIENT_REMOTE_TIMEOUT_MS) == 0)
        atexit(remote_end);
}

const char *client_remote_host(void)
{
    return remote.n ? remote.nodes[0].host : NULL;
}

const char *client_remote_template(void)
{
    return remote.n ? remote_template : NULL;
}

/* client_call() to -H's host: *reply takes the reply's bytes. */
static int remote_call(const char *method, const char *path, json_t *body, long *ret_status,
                       char **raw, size_t *raw_len, char *err, size_t err_len)
{
    struct fan_node *node = &remote.nodes[0];
    int r;

    fanout_set_all(&remote, method, path, body);
    r = fanout_run(&remote);
    if (r < 0) {
        snprintf(err, err_len, "%s: %s", node->host, strerror(-r));
        return r;
    }
    if (node->rc < 0) {
        snprintf(err, err_len, "%s", node->err);
        return node->rc == -EPROTO ? -EPROTO : -EHOSTUNREACH;
    }
    *ret_status = node->status;
    *raw = node->raw.data; /* taken */
    *raw_len = node->raw.len;
    node->raw = (struct client_reply){0};
    return 0;
}

const char *client_socket_path(const char *option)
{
    const char *env = getenv("PROBED_SOCKET");

    return option ? option : env && *env ? env : PROBED_DEFAULT_SOCKET;
}

const char *client_error_text(json_t *body)
{
    const char *s = json_string_value(json_object_get(body, "error"));
    return s ? s : "the daemon returned an error";
}

/* Why connect() to @path fails, which libcurl does not say: "Permission denied" is the one a
 * user can act on (join the socket's group). 0 when it connects. */
static int connect_errno(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r = 0;

    if (fd < 0)
        return errno;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        r = errno;
    close(fd);
    return r;
}

int client_call(const char *socket_path, const char *method, const char *path, json_t *body,
                long *ret_status, json_t **ret_body, char **ret_raw, size_t *ret_raw_len, char *err,
                size_t err_len)
{
    struct curl_slist *headers = NULL;
    struct client_reply reply = {0};
    char url[1024], *payload = NULL;
    struct stat st;
    CURLcode rc;
    CURL *curl;

    *ret_body = NULL;
    snprintf(url, sizeof(url), "http://probed%s", path);
    if (remote.n) {
        int r;

        pthread_mutex_lock(&remote_lock);
        r = remote_call(method, path, body, ret_status, &reply.data, &reply.len, err, err_len);
        pthread_mutex_unlock(&remote_lock);
        if (r < 0)
            return r;
        goto parse;
    }
    if (stat(socket_path, &st) < 0) {
        snprintf(err, err_len, "no daemon socket at %s: %s", socket_path, strerror(errno));
        return -ENOENT;
    }
    curl = curl_easy_init();
    if (!curl) {
        snprintf(err, err_len, "libcurl could not start");
        return -ENOMEM;
    }
    curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, client_on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload ? payload : "");
    }
    /* a full backlog (EAGAIN: others' connections flooding the socket) is waited out a while,
     * as a blocking connect() would */
    for (int tries = 0;; tries++) {
        rc = curl_easy_perform(curl);
        if (rc != CURLE_COULDNT_CONNECT || tries == 250 || connect_errno(socket_path) != EAGAIN)
            break;
        free(reply.data);
        reply = (struct client_reply){0};
        usleep(20000);
    }
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, ret_status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    free(payload);
    if (rc == CURLE_COULDNT_CONNECT && (errno = connect_errno(socket_path)) == EACCES) {
        struct group *g = getgrgid(st.st_gid);
        snprintf(err, err_len,
                 "talking to the daemon at %s: Permission denied (members of its group '%s' may"
                 " use it; root may add you: usermod -aG %s $USER)",
                 socket_path, g ? g->gr_name : "?", g ? g->gr_name : "<group>");
        free(reply.data);
        return -EACCES;
    }
    if (rc != CURLE_OK) {
        free(reply.data);
        snprintf(err, err_len, "talking to the daemon at %s: %s", socket_path,
                 curl_easy_strerror(rc));
        return rc == CURLE_COULDNT_CONNECT ? -ECONNREFUSED : -EIO;
    }
parse:
    *ret_body = reply.data ? json_loadb(reply.data, reply.len, 0, NULL) : NULL;
    if (ret_raw) {
        *ret_raw = reply.data;
        *ret_raw_len = reply.len;
        return 0;
    }
    free(reply.data);
    return 0;
}

/* One call; returns the reply (caller owns) or NULL after printing why. */
int client_call_when_free(const char *socket_path, const char *method, const char *path,
                          json_t *body, const char *busy, long *ret_status, json_t **ret_body,
                          char *err, size_t err_len)
{
    for (int tries = 0;; tries++) {
        int r = client_call(socket_path, method, path, body, ret_status, ret_body, NULL, NULL, err,
                            err_len);
        if (r < 0 || !busy || *ret_status != 409 || tries == 200 ||
            !strstr(client_error_text(*ret_body), busy))
            return r;
        json_decref(*ret_body);
        *ret_body = NULL;
        usleep(50 * 1000);
    }
}

json_t *client_request_when_free(const char *socket, const char *method, const char *path,
                                 json_t *body, const char *busy)
{
    char err[512];
    json_t *reply = NULL;
    long status = 0;
    int r = client_call_when_free(client_socket_path(socket), method, path, body, busy, &status,
                                  &reply, err, sizeof(err));

    if (r < 0) {
        fprintf(stderr, "probectl: %s%s\n", err,
                r == -ENOENT || r == -ECONNREFUSED ? " (is probed running?)" : "");
        return NULL;
    }
    if (status < 200 || status > 299 || !reply) {
        fprintf(stderr, "probectl: %s\n", client_error_text(reply));
        json_decref(reply);
        return NULL;
    }
    return reply;
}

json_t *client_request(const char *socket, const char *method, const char *path, json_t *body)
{
    return client_request_when_free(socket, method, path, body, NULL);
}

int client_parse_pid(const char *s, const char *cmd)
{
    char *end;
    long v;

    if (!s || !*s) {
        fprintf(stderr, "probectl %s: which process? give its pid (probectl %s PID)\n", cmd, cmd);
        return -1;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > 0x7fffffff) {
        fprintf(stderr, "probectl %s: '%s' is not a pid\n", cmd, s);
        return -1;
    }
    return (int)v;
}

int client_parse_duration(const char *s, const char *cmd, const char *opt, double min_s,
                          double max_s, int64_t *ret_ns)
{
    int64_t ns = units_duration_ns(s);

    if (ns < 0) {
        fprintf(stderr,
                "probectl %s: %s takes a duration like 30s, 5m, 1h30m or 90 (seconds), not '%s'\n",
                cmd, opt, s ? s : "");
        return -1;
    }
    if (ns < min_s * 1e9 || ns > max_s * 1e9) {
        fprintf(stderr, "probectl %s: %s must be from %gs to %gs, not %s\n", cmd, opt, min_s, max_s,
                s);
        return -1;
    }
    *ret_ns = ns;
    return 0;
}

int client_parse_time(const char *s, const char *cmd, const char *opt, int64_t *ret_ns)
{
    static const char *const forms[] = {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M",
                                        "%Y-%m-%d %H:%M",    "%H:%M:%S",          "%H:%M"};
    int64_t now = (int64_t)time(NULL) * 1000000000LL, ago = units_duration_ns(s);

    if (ago >= 0) { /* 5m: five minutes ago */
        *ret_ns = now - ago;
        return 0;
    }
    for (size_t i = 0; s && i < sizeof(forms) / sizeof(forms[0]); i++) {
        struct tm tm = {0};
        time_t t = time(NULL);
        bool utc;
        const char *end;

        localtime_r(&t, &tm); /* a time alone is of today */
        tm.tm_sec = 0;
        if (!(end = strptime(s, forms[i], &tm)))
            continue;
        utc = *end == 'Z';
        if (*end && !(utc && end[1] == '\0'))
            continue;
        tm.tm_isdst = -1;
        t = utc ? timegm(&tm) : mktime(&tm);
        if (t == (time_t)-1)
            continue;
        *ret_ns = (int64_t)t * 1000000000LL;
        return 0;
    }
    fprintf(stderr,
            "probectl %s: %s takes a duration like 30s, 5m, 1h30m (that long ago) or a time"
            " (14:05[:30] today, 2026-11-29 14:05[:30]; local, Z for UTC), not '%s'\n",
            cmd, opt, s ? s : "");
    return -1;
}

json_t *client_rows(const char *socket, int pid, const char *sql, json_t **keep)
{
    json_t *body = json_pack("{s:s, s:i}", "sql", sql, "pid", pid);

    *keep = client_request(socket, "POST", "/v1/query", body);
    json_decref(body);
    return *keep ? json_object_get(*keep, "rows") : NULL;
}

double client_num(json_t *row, size_t i)
{
    json_t *v = json_array_get(row, i);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

long long client_int(json_t *row, size_t i)
{
    return (long long)json_integer_value(json_array_get(row, i));
}

int client_ensure_attached(const char *socket, int pid)
{
    json_t *body = json_pack("{s:i}", "pid", pid), *reply;

    reply = client_request(socket, "POST", "/v1/targets", body);
    json_decref(body);
    if (!reply)
        return -1;
    printf("attached to pid %d (Python %s) at %lld Hz\n", pid,
           json_string_value(json_object_get(reply, "python_version")),
           (long long)json_integer_value(json_object_get(reply, "rate_hz")));
    json_decref(reply);
    return 0;
}

void client_detach_quietly(const char *socket, int pid)
{
    char path[64];
    json_t *reply;

    snprintf(path, sizeof(path), "/v1/targets/%d", pid);
    reply = client_request(socket, "DELETE", path, NULL);
    if (reply)
        printf("detached from pid %d again\n", pid);
    json_decref(reply);
}

json_t *client_post(const char *socket, const char *path, json_t *body, const char *busy,
                    const char *cmd, bool quiet_404, long *status)
{
    char err[512];
    json_t *reply = NULL;
    int r = client_call_when_free(client_socket_path(socket), "POST", path, body, busy, status,
                                  &reply, err, sizeof(err));

    if (r < 0) {
        fprintf(stderr, "probectl: %s%s\n", err,
                r == -ENOENT || r == -ECONNREFUSED ? " (is probed running?)" : "");
        *status = 0;
        return NULL;
    }
    if (*status < 200 || *status > 299) {
        if (!quiet_404 || *status != 404)
            fprintf(stderr, "probectl %s: %s\n", cmd, client_error_text(reply));
        json_decref(reply);
        return NULL;
    }
    return reply;
}
