/*
 * http.h - the API's edge: the Unix socket, who is asking, request bodies and replies.
 *
 * Everything that speaks HTTP is here or in routes.c; below the API, failures are a negative
 * errno with a message (struct pyf_err), and http_status() says what status each one is.
 * Threads: the loop thread (a worker's reply is sent from job_done, on the loop).
 * Failure: the reply_* functions send what they can and return the status sent, so that a
 * handler ends with `return reply_error(...)`.
 */
#ifndef PROBED_API_HTTP_H
#define PROBED_API_HTTP_H

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "pyframes.h"

/* Who is asking, from the socket's SO_PEERCRED. */
struct peer {
    bool root;
    uid_t uid;
    gid_t gid;
    pid_t pid;
};

#define API_PID_MAX 4194304 /* the kernel's PID_MAX_LIMIT: no pid is larger */

int peer_of(struct evhttp_request *req, struct peer *p);

/* Takes @body. */
int reply_json(struct evhttp_request *req, int status, json_t *body);
int reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Borrows @data. */
void reply_raw(struct evhttp_request *req, const char *type, const char *data, size_t len);
/* {"error": msg, "status": status}, the body of every error reply. */
json_t *error_body(int status, const char *msg);

/* The HTTP status of a failure: -errno @r, and @e where libpyframes said why (may be NULL).
 * 404 gone (-ESRCH, -ENOENT), 403 denied (-EPERM, -EACCES), 422 not a CPython we read or no
 * torch in it (-ENOEXEC, -ENOPKG), 409 exists or already so (-EEXIST, -EALREADY), 413 too big
 * (-E2BIG), 502 the target's stub failed us (-EPROTO), 503 full or busy (-ENOSPC, -EBUSY,
 * -EAGAIN), 429 a user's share used (-EUSERS), 408 timed out (-ETIMEDOUT), 400 invalid
 * (-EINVAL), else 500. */
int http_status(int r, const struct pyf_err *e);

/* The request body as a JSON object, or NULL (400 already sent). */
json_t *body_json(struct evhttp_request *req);
/* Every integer of a request is read once, strictly, into its real type: decimal digits only
 * (no sign, space, "0x", leading zero or fraction), at most @max; -EINVAL otherwise. */
int parse_uint(const char *s, uint64_t max, uint64_t *ret);
/* The query parameter @name into @ret (left as it is, the default, when absent); 0, or -EINVAL
 * after replying 400 naming it and its range. */
int param_uint(struct evhttp_request *req, const struct evkeyvalq *q, const char *name,
               uint64_t max, uint64_t *ret);
/* The body's integer @name, from @min to @max, into @ret (the default left when absent); 0, or
 * -EINVAL after replying 400. A JSON number that is not an integer is refused. */
int body_int(struct evhttp_request *req, json_t *body, const char *name, int64_t min, int64_t max,
             int64_t *ret);
/* May @p act on @pid (root, or a caller the process admits by the kernel's ptrace rule: see
 * procfs_owner_admits)? 0 with the grant that every later step checks again (procfs.h), or
 * -errno after replying 404 or 403. */
int authorise_pid(struct evhttp_request *req, const struct peer *p, pid_t pid,
                  struct proc_grant *ret);
/* A request whose length is said twice (two Content-Length, or one beside a Transfer-Encoding)
 * is read differently by different parsers (request smuggling). */
bool ambiguous_length(struct evhttp_request *req);

/* Listens on the Unix socket @path (mode 0660; @gid owns it when >= 0), removing a socket file
 * a dead daemon left; one that answers is another daemon's (-EADDRINUSE). Logs why it failed. */
int listen_unix(const char *path, int gid, int *ret_fd);

#endif
