/*
 * client.h - probectl's side of the daemon's API: JSON over HTTP on a Unix socket (libcurl).
 *
 * The socket is --socket, else $PROBED_SOCKET, else /run/probed/probed.sock.
 * Failure: client_call() returns -errno: -ENOENT/-ECONNREFUSED when no daemon listens (the
 * caller may fall back), -EIO for any other transport error, with the reason in @err. An HTTP
 * error status is not a failure here: the caller reads *ret_status and the body's "error".
 */
#ifndef PROBECTL_CLIENT_H
#define PROBECTL_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROBED_DEFAULT_SOCKET "/run/probed/probed.sock"
#define CLIENT_REMOTE_TIMEOUT_MS (10 * 60 * 1000L) /* -H: one call's bound (a long query) */

const char *client_socket_path(const char *option);

/* A reply's bytes as libcurl hands them over: client_on_data() is a CURLOPT_WRITEFUNCTION
 * whose data is a struct client_reply (data NUL-terminated; the caller frees it). */
struct client_reply {
    char *data;
    size_t len;
};
size_t client_on_data(char *p, size_t size, size_t n, void *ctx);

/* Every call from now on goes to @host's daemon through the transport @template (see
 * transport.h; neither copied). A failure of the transport is -EHOSTUNREACH, a daemon of
 * another API version -EPROTO, each with the reason in @err. */
void client_use_remote(const char *host, const char *template);
/* The -H host, or NULL when calls go to the local socket; its transport template (as given:
 * NULL for the default). */
const char *client_remote_host(void);
const char *client_remote_template(void);

/* @method "GET"/"POST"/"DELETE"; @body may be NULL. *ret_body: the reply parsed as JSON
 * (caller owns), or NULL when it is not JSON. With @ret_raw, *ret_raw (malloc'd, caller frees)
 * also holds the reply's bytes as they came. */
int client_call(const char *socket_path, const char *method, const char *path, json_t *body,
                long *ret_status, json_t **ret_body, char **ret_raw, size_t *ret_raw_len, char *err,
                size_t err_len);

/* The "error" string of an error reply, or a generic text. */
const char *client_error_text(json_t *body);

/* One call that must succeed: the reply (caller owns), or NULL after printing why to stderr. */
json_t *client_request(const char *socket, const char *method, const char *path, json_t *body);

/* client_call() / client_request(), made again (every 50 ms, for up to 10 s) while the daemon
 * answers 409 with @busy in its message: work of its own on the process (a drain, a snapshot),
 * over in milliseconds. @busy NULL: no retry. */
int client_call_when_free(const char *socket_path, const char *method, const char *path,
                          json_t *body, const char *busy, long *ret_status, json_t **ret_body,
                          char *err, size_t err_len);
json_t *client_request_when_free(const char *socket, const char *method, const char *path,
                                 json_t *body, const char *busy);

/* The rows of one query (POST /v1/query, scoped to @pid), or NULL after printing why; they
 * live in *keep, which the caller frees. */
json_t *client_rows(const char *socket, int pid, const char *sql, json_t **keep);

/* Cell @i of a row: a number (0 when it is not one), an integer exactly (a timestamp in ns
 * does not fit a double's 53 bits). */
double client_num(json_t *row, size_t i);
long long client_int(json_t *row, size_t i);

/* @s as a pid, or -1 after printing "probectl @cmd: '@s' is not a pid". */
int client_parse_pid(const char *s, const char *cmd);
/* Option @opt of command @cmd as a duration (common/units.h: 30s, 5m, 1h30m, 90), from @min_s
 * to @max_s seconds, into *@ret_ns; -1 after saying why on stderr (the caller exits 2). */
int client_parse_duration(const char *s, const char *cmd, const char *opt, double min_s,
                          double max_s, int64_t *ret_ns);
/* The unix time @s names for option @opt of @cmd: a duration is that long ago ("5m"), else
 * "YYYY-MM-DD HH:MM[:SS]" (or with a T) or "HH:MM[:SS]" today, in local time (a trailing Z:
 * UTC). -1 after saying what was expected (exit 2). */
int client_parse_time(const char *s, const char *cmd, const char *opt, int64_t *ret_ns);

/* POST @body to @path: the reply, or NULL with its status in *status (0: no daemon) after
 * printing why, prefixed "probectl @cmd: " (an error reply of status 404 is left unprinted
 * with @quiet_404: the caller attaches and asks again). @busy: client_call_when_free()'s. */
json_t *client_post(const char *socket, const char *path, json_t *body, const char *busy,
                    const char *cmd, bool quiet_404, long *status);

/* What lives with an attach (the torch trace, catch): attaches @pid, saying so; 0, or -1 after
 * printing why. client_detach_quietly undoes it when what it was for failed. */
int client_ensure_attached(const char *socket, int pid);
void client_detach_quietly(const char *socket, int pid);

#endif
