/* http.c - see http.h. */
#define _GNU_SOURCE
#include "api/http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/jsontext.h"
#include "log.h"

int reply_json(struct evhttp_request *req, int status, json_t *body)
{
    struct evbuffer *out = evbuffer_new();
    char *text = jsontext_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII);

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    /* probectl -H checks it: a node's daemon of another API version is named, not misread */
    evhttp_add_header(evhttp_request_get_output_headers(req), "X-Probed-Version", PROBED_VERSION);
    if (out && text)
        evbuffer_add_printf(out, "%s\n", text);
    evhttp_send_reply(req, status, NULL, out);
    if (out)
        evbuffer_free(out);
    free(text);
    json_decref(body);
    return status;
}

json_t *error_body(int status, const char *msg)
{
    char clean[3 * 768 + 1]; /* a message may quote what a client sent: any bytes */

    pyf_utf8_clean(clean, sizeof(clean), msg, strnlen(msg, 768));
    return json_pack("{s:s, s:i}", "error", clean, "status", status);
}

int reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return reply_json(req, status, error_body(status, msg));
}

void reply_raw(struct evhttp_request *req, const char *type, const char *data, size_t len)
{
    struct evbuffer *out = evbuffer_new();

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evhttp_add_header(evhttp_request_get_output_headers(req), "X-Probed-Version", PROBED_VERSION);
    if (out)
        evbuffer_add(out, data, len);
    evhttp_send_reply(req, 200, NULL, out);
    if (out)
        evbuffer_free(out);
}

int http_status(int r, const struct pyf_err *e)
{
    switch (e ? e->kind : PYF_OK) {
    case PYF_GONE:
        return 404;
    case PYF_DENIED:
        return 403;
    case PYF_NOT_PYTHON:
    case PYF_UNSUPPORTED:
        return 422;
    default:
        break;
    }
    switch (-r) {
    case ENOENT:
    case ESRCH:
        return 404;
    case EPERM:
    case EACCES:
        return 403;
    case EEXIST:
    case EALREADY:
        return 409;
    case ENOEXEC:
    case ENOPKG:
        return 422;
    case E2BIG:
        return 413;
    case EPROTO:
        return 502;
    case ENOSPC:
    case EBUSY:
    case EAGAIN:
        return 503;
    case EUSERS:
        return 429;
    case ETIMEDOUT:
        return 408;
    case EINVAL:
        return 400;
    default:
        return 500;
    }
}

int peer_of(struct evhttp_request *req, struct peer *p)
{
    struct evhttp_connection *con = evhttp_request_get_connection(req);
    struct bufferevent *bev = con ? evhttp_connection_get_bufferevent(con) : NULL;
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (!bev || getsockopt(bufferevent_getfd(bev), SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    *p = (struct peer){.root = cred.uid == 0, .uid = cred.uid, .gid = cred.gid, .pid = cred.pid};
    return 0;
}

json_t *body_json(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_error_t jerr;
    json_t *j;

    j = json_loadb((const char *)evbuffer_pullup(in, -1), len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        reply_error(req, 400, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line,
                    jerr.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        reply_error(req, 400, "the JSON body must be an object");
        return NULL;
    }
    return j;
}

int parse_uint(const char *s, uint64_t max, uint64_t *ret)
{
    uint64_t v = 0;

    if (!s || !*s || (s[0] == '0' && s[1]))
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > max)
        return -EINVAL;
    *ret = v;
    return 0;
}

int param_uint(struct evhttp_request *req, const struct evkeyvalq *q, const char *name,
               uint64_t max, uint64_t *ret)
{
    const char *v = evhttp_find_header(q, name);

    if (!v)
        return 0;
    if (parse_uint(v, max, ret) < 0) {
        reply_error(req, 400, "?%s= must be a decimal integer from 0 to %llu", name,
                    (unsigned long long)max);
        return -EINVAL;
    }
    return 0;
}

int body_int(struct evhttp_request *req, json_t *body, const char *name, int64_t min, int64_t max,
             int64_t *ret)
{
    json_t *j = json_object_get(body, name);

    if (!j)
        return 0;
    if (!json_is_integer(j) || json_integer_value(j) < min || json_integer_value(j) > max) {
        reply_error(req, 400, "\"%s\" must be an integer from %lld to %lld", name, (long long)min,
                    (long long)max);
        return -EINVAL;
    }
    *ret = json_integer_value(j);
    return 0;
}

int authorise_pid(struct evhttp_request *req, const struct peer *p, pid_t pid,
                  struct proc_grant *ret)
{
    struct proc_owner o;
    char why[256];
    int r = procfs_owner(pid, &o);

    if (r < 0) {
        reply_error(req, r == -ESRCH ? 404 : 500, "pid %d: %s", (int)pid,
                    r == -ESRCH ? "no such process" : strerror(-r));
        return r;
    }
    *ret = (struct proc_grant){
        .pid = pid, .start_time = o.start_time, .root = p->root, .uid = p->uid, .gid = p->gid};
    if (!procfs_owner_admits(&o, p->root, p->uid, p->gid)) {
        procfs_grant_check(ret, why, sizeof(why)); /* says why, in the same words as later */
        reply_error(req, 403, "%s", why);
        return -EPERM;
    }
    return 0;
}

bool ambiguous_length(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    struct evkeyval *kv;
    int lengths = 0, encodings = 0;

    TAILQ_FOREACH(kv, h, next)
    {
        lengths += strcasecmp(kv->key, "Content-Length") == 0;
        encodings += strcasecmp(kv->key, "Transfer-Encoding") == 0;
    }
    return lengths > 1 || (lengths && encodings);
}

/* A socket file left by a daemon that died is removed; one that answers is in use. */
static int clear_stale_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, r;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    if (r == 0)
        return -EADDRINUSE;
    return unlink(path) < 0 ? -errno : 0;
}

int listen_unix(const char *path, int gid, int *ret_fd)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return log_errno(LOG_ERR, -ENAMETOOLONG, "socket path %s", path);
    r = clear_stale_socket(path);
    if (r < 0)
        return log_errno(LOG_ERR, r, "socket %s (another probed running, or not a socket?)", path);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return log_errno(LOG_ERR, -errno, "socket()");
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0660) < 0 ||
        (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0) || listen(fd, SOMAXCONN) < 0) {
        r = log_errno(LOG_ERR, -errno, "listening on %s", path);
        close(fd);
        return r;
    }
    *ret_fd = fd;
    return 0;
}
