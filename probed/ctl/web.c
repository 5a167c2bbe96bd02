/* web.c - see web.h. */
#define _GNU_SOURCE
#include "ctl/web.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/connlimit.h"
#include "ctl/client.h"
#include "ctl/mcp.h"

/* The page, built in (CMakeLists.txt: web/), and its libraries (scripts/web-libs.sh). */
extern const char web_index_html[], web_app_js[], web_flame_js[], web_pages_js[], web_app_css[],
    web_libs_js[], web_libs_css[];

#define JS "text/javascript; charset=utf-8"
#define CSS "text/css; charset=utf-8"
static const struct page_file {
    const char *path, *type, *text;
} page_files[] = {
    {"/", "text/html; charset=utf-8", web_index_html},
    {"/index.html", "text/html; charset=utf-8", web_index_html},
    {"/app.js", JS, web_app_js},     /* the shell, targets, target, SQL */
    {"/flame.js", JS, web_flame_js}, /* the flame graph page */
    {"/pages.js", JS, web_pages_js}, /* torch, memory and GPUs, cluster */
    {"/app.css", CSS, web_app_css},
    {"/libs.js", JS, web_libs_js}, /* d3-flame-graph, d3-selection, uPlot */
    {"/libs.css", CSS, web_libs_css},
};

#define TOKEN_BYTES 24
#define COOKIE "probed_token"

struct web {
    const char *socket;
    char token[TOKEN_BYTES * 2 + 1];
    char bind[64];
    int port;
    struct event_base *base;
    struct mcp *mcp;         /* /mcp's server */
    struct connlimit *conns; /* its connections, bounded */
    atomic_int working;      /* workers running */
};

/* One /v1 call or MCP message, answered by a worker thread and sent by the loop. */
struct work {
    struct web *w;
    struct evhttp_request *req; /* the loop's alone; NULL once its client has gone */
    bool mcp;
    char method[8];
    char path[2048];
    json_t *body;     /* the request's JSON, or NULL */
    pthread_t thread; /* its worker, joined as its answer is delivered */
    /* the answer, filled by the worker */
    int status;
    const char *type;
    char *raw;
    size_t raw_len;
};

/* Equal strings, in a time that does not say how much of them matched. */
static bool same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = la != lb;

    for (size_t i = 0; i < la && i < lb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* Whether @host (a Host header, or an Origin's host:port) names this server: its address, or
 * a loopback name, at its port. */
static bool our_host(const struct web *w, const char *host)
{
    static const char *const loopback[] = {"127.0.0.1", "localhost", "[::1]"};
    char want[96];

    for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]) + 1; i++) {
        const char *name = i < sizeof(loopback) / sizeof(loopback[0]) ? loopback[i] : w->bind;

        snprintf(want, sizeof(want), "%s:%d", name, w->port);
        if (strcasecmp(host, want) == 0)
            return true;
    }
    return false;
}

/* Why @req may not be served (NULL: it may): another host name, another origin, no token. */
static const char *refusal(const struct web *w, struct evhttp_request *req, bool *ret_via_query)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *host = evhttp_find_header(h, "Host"), *origin = evhttp_find_header(h, "Origin");
    const char *site = evhttp_find_header(h, "Sec-Fetch-Site");
    const char *auth = evhttp_find_header(h, "Authorization");
    const char *cookie = evhttp_find_header(h, "Cookie"), *c;
    struct evkeyvalq q;
    const char *given;
    bool ok = false;

    *ret_via_query = false;
    if (!host || !our_host(w, host))
        return "this server answers for its own address only";
    if (origin && (strncmp(origin, "http://", 7) != 0 || !our_host(w, origin + 7)))
        return "requests from another origin are refused";
    if (site && strcmp(site, "cross-site") == 0)
        return "requests from another site are refused";
    if (auth && strncmp(auth, "Bearer ", 7) == 0 && same_secret(auth + 7, w->token))
        return NULL;
    for (c = cookie; c && (c = strstr(c, COOKIE "=")) != NULL; c += strlen(COOKIE) + 1) {
        char value[sizeof(w->token) + 1];
        size_t n = strcspn(c + strlen(COOKIE) + 1, "; ");

        if ((c == cookie || c[-1] == ' ' || c[-1] == ';') && n < sizeof(value)) {
            memcpy(value, c + strlen(COOKIE) + 1, n);
            value[n] = '\0';
            ok = ok || same_secret(value, w->token);
        }
    }
    if (ok)
        return NULL;
    TAILQ_INIT(&q);
    if (evhttp_parse_query(evhttp_request_get_uri(req), &q) == 0 &&
        (given = evhttp_find_header(&q, "token")) && same_secret(given, w->token))
        *ret_via_query = true;
    evhttp_clear_headers(&q);
    return *ret_via_query ? NULL : "no token: open the URL probectl web printed";
}

static void reply_text(struct evhttp_request *req, int status, const char *type, const char *text,
                       size_t len)
{
    struct evbuffer *b = evbuffer_new();
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);

    evhttp_add_header(out, "Content-Type", type);
    evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(out, "Cache-Control", "no-store");
    /* the page: its own files only; a flame graph's SVG (shown in the page's <object>) runs
     * its own inline script, which the daemon writes (the frames' names in it are escaped) */
    evhttp_add_header(out, "Content-Security-Policy",
                      strncmp(type, "image/svg", 9) == 0
                          ? "default-src 'none'; script-src 'unsafe-inline'; style-src"
                            " 'unsafe-inline'; frame-ancestors 'self'"
                          : "default-src 'self'; img-src 'self' data:; style-src 'self'"
                            " 'unsafe-inline'; frame-ancestors 'self'");
    evbuffer_add(b, text, len);
    evhttp_send_reply(req, status, status == 200 ? "OK" : "Error", b);
    evbuffer_free(b);
}

static void say_warning(const char *msg)
{
    fprintf(stderr, "probectl web: %s\n", msg);
}

static void reply_error(struct evhttp_request *req, int status, const char *why)
{
    json_t *j = json_pack("{s:s}", "error", why);
    char *text = json_dumps(j, JSON_COMPACT);

    reply_text(req, status, "application/json", text ? text : "{}", text ? strlen(text) : 2);
    free(text);
    json_decref(j);
}

/* What the daemon answered, typed by its first byte (JSON, an SVG, folded text, pprof). */
static const char *type_of(const char *raw, size_t len)
{
    if (len && (raw[0] == '{' || raw[0] == '['))
        return "application/json";
    if (len && raw[0] == '<')
        return "image/svg+xml";
    if (len >= 2 && (unsigned char)raw[0] == 0x1f && (unsigned char)raw[1] == 0x8b)
        return "application/octet-stream"; /* pprof: gzip */
    return "text/plain; charset=utf-8";
}

/* The request's body as JSON (NULL: none), or -1 after replying why not. */
static int body_json(struct evhttp_request *req, json_t **ret)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    json_error_t jerr;
    char *text;

    *ret = NULL;
    if (n > WEB_BODY_MAX) {
        reply_error(req, 413, "request body too large");
        return -1;
    }
    if (!n)
        return 0;
    if (!(text = malloc(n + 1))) {
        reply_error(req, 500, "out of memory");
        return -1;
    }
    evbuffer_copyout(in, text, n);
    text[n] = '\0';
    *ret = json_loads(text, 0, &jerr);
    free(text);
    if (!*ret) {
        reply_error(req, 400, "the body is not JSON");
        return -1;
    }
    return 0;
}

/* A worker's answer as an error body. */
static void work_error(struct work *k, int status, const char *why)
{
    json_t *j = json_pack("{s:s}", "error", why);

    k->status = status;
    k->type = "application/json";
    k->raw = json_dumps(j, JSON_COMPACT);
    k->raw_len = k->raw ? strlen(k->raw) : 0;
    json_decref(j);
}

/* Back on the loop: the answer sent, unless its client has gone. */
static void deliver(evutil_socket_t fd, short what, void *arg)
{
    struct work *k = arg;

    (void)fd, (void)what;
    /* the worker ends right after handing this over: joined, so no thread of ours is still
       ending (freeing its libraries' thread state: libcurl's OpenSSL) when the loop stops
       with none working; a detached one ending then was taken by LeakSanitizer for a leak */
    pthread_join(k->thread, NULL);
    if (k->req) {
        evhttp_connection_set_closecb(evhttp_request_get_connection(k->req), NULL, NULL);
        if (k->status == 202) {
            evhttp_send_reply(k->req, 202, "Accepted", NULL);
        } else {
            reply_text(k->req, k->status, k->type, k->raw ? k->raw : "", k->raw_len);
        }
    }
    atomic_fetch_sub(&k->w->working, 1);
    json_decref(k->body);
    free(k->raw);
    free(k);
}

/* The connection of @arg's request closed before its answer: the request is freed with it. */
static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    ((struct work *)arg)->req = NULL;
}

/* A worker: the daemon asked (/v1: as this user, its answer as it came) or the MCP message
 * answered, then the answer handed to the loop. */
static void *work_run(void *arg)
{
    struct work *k = arg;
    struct timeval now = {0, 0};

    if (k->mcp) {
        json_t *reply = mcp_handle(k->w->mcp, k->body);

        k->status = reply ? 200 : 202; /* 202: a notification or a response, nothing due */
        k->type = "application/json";
        k->raw = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
        k->raw_len = k->raw ? strlen(k->raw) : 0;
        if (reply && !k->raw)
            work_error(k, 500, "out of memory");
        json_decref(reply);
    } else {
        char err[512];
        json_t *reply = NULL;
        long status = 0;

        if (client_call(client_socket_path(k->w->socket), k->method, k->path, k->body, &status,
                        &reply, &k->raw, &k->raw_len, err, sizeof(err)) < 0) {
            work_error(k, 502, err);
        } else {
            k->status = (int)status;
            k->type = type_of(k->raw, k->raw_len);
        }
        json_decref(reply);
    }
    if (event_base_once(k->w->base, -1, EV_TIMEOUT, deliver, k, &now) < 0)
        abort(); /* the loop cannot take it: nothing sane is left to do */
    return NULL;
}

/* @req handed to a worker; 503 past WEB_WORKERS at once. */
static void dispatch(struct web *w, struct evhttp_request *req, bool mcp, const char *method,
                     const char *path)
{
    struct work *k;
    json_t *body;

    if (body_json(req, &body) < 0)
        return;
    if (mcp && !body) {
        reply_error(req, 400, "POST a JSON-RPC message");
        return;
    }
    if (atomic_fetch_add(&w->working, 1) >= WEB_WORKERS) {
        atomic_fetch_sub(&w->working, 1);
        json_decref(body);
        reply_error(req, 503, "busy: too many calls at once");
        return;
    }
    if (!(k = calloc(1, sizeof(*k)))) {
        atomic_fetch_sub(&w->working, 1);
        json_decref(body);
        reply_error(req, 500, "out of memory");
        return;
    }
    *k = (struct work){.w = w, .req = req, .mcp = mcp, .body = body};
    snprintf(k->method, sizeof(k->method), "%s", method);
    snprintf(k->path, sizeof(k->path), "%s", path);
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, k);
    if (pthread_create(&k->thread, NULL, work_run, k) != 0) {
        evhttp_connection_set_closecb(evhttp_request_get_connection(req), NULL, NULL);
        atomic_fetch_sub(&w->working, 1);
        json_decref(body);
        free(k);
        reply_error(req, 503, "no thread to answer with");
    }
}

/* /mcp: MCP's streamable HTTP transport, without its optional event streams and sessions. */
static void serve_mcp(struct web *w, struct evhttp_request *req, const char *method)
{
    const char *version =
        evhttp_find_header(evhttp_request_get_input_headers(req), "MCP-Protocol-Version");

    if (strcmp(method, "POST") != 0) { /* GET: no stream of our own to offer; DELETE: no session */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
        reply_error(req, 405, "MCP here takes a POSTed message (no event stream, no session)");
        return;
    }
    if (version && !mcp_speaks(version)) {
        reply_error(req, 400, "unsupported MCP-Protocol-Version");
        return;
    }
    dispatch(w, req, true, method, "/mcp");
}

static void handle(struct evhttp_request *req, void *arg)
{
    struct web *w = arg;
    const char *uri = evhttp_request_get_uri(req), *why, *method;
    char path[2048];
    bool via_query;
    size_t plen;

    switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_GET:
        method = "GET";
        break;
    case EVHTTP_REQ_POST:
        method = "POST";
        break;
    case EVHTTP_REQ_DELETE:
        method = "DELETE";
        break;
    default:
        reply_error(req, 405, "GET, POST or DELETE");
        return;
    }
    if (!connlimit__request(w->conns, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(req, 503, "too many connections; try again");
        return;
    }
    if (!uri || strlen(uri) >= sizeof(path)) {
        reply_error(req, 414, "URI too long");
        return;
    }
    if ((why = refusal(w, req, &via_query)) != NULL) {
        reply_error(req, 403, why);
        return;
    }
    plen = strcspn(uri, "?");
    if (via_query) { /* the printed URL: the token becomes a cookie, and leaves the address */
        char cookie[160];

        snprintf(cookie, sizeof(cookie), COOKIE "=%s; HttpOnly; SameSite=Strict; Path=/", w->token);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Set-Cookie", cookie);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location", "/");
        evhttp_send_reply(req, 303, "See Other", NULL);
        return;
    }
    snprintf(path, sizeof(path), "%s", uri);
    if (strncmp(path, "/v1/", 4) == 0) {
        dispatch(w, req, false, method, path);
        return;
    }
    path[plen] = '\0';
    if (strcmp(path, "/mcp") == 0) {
        serve_mcp(w, req, method);
        return;
    }
    if (strcmp(method, "GET") != 0) {
        reply_error(req, 405, "the page's files are read with GET");
        return;
    }
    for (size_t i = 0; i < sizeof(page_files) / sizeof(page_files[0]); i++)
        if (strcmp(path, page_files[i].path) == 0) {
            reply_text(req, 200, page_files[i].type, page_files[i].text,
                       strlen(page_files[i].text));
            return;
        }
    reply_error(req, 404, "no such page");
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    event_base_loopexit(arg, NULL);
}

int web_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"port", required_argument, NULL, 'p'},   {"bind", required_argument, NULL, 'b'},
        {"socket", required_argument, NULL, 'S'}, {"allow-actions", no_argument, NULL, 'A'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    struct web w = {.port = WEB_DEFAULT_PORT};
    bool allow_actions = false;
    char err[512];
    unsigned char raw[TOKEN_BYTES];
    char port_text[16];
    int fd = -1, r;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct event_base *base;
    struct event *sigint, *sigterm;
    struct evhttp *http;
    char *end;
    long port;
    int c;

    snprintf(w.bind, sizeof(w.bind), "127.0.0.1");
    while ((c = getopt_long(argc, argv, "p:b:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            port = strtol(optarg, &end, 10);
            if (*end || port < 0 || port > 65535) {
                fprintf(stderr, "probectl web: --port takes 0 to 65535 (0: any free port)\n");
                return 2;
            }
            w.port = (int)port;
            break;
        case 'b': {
            struct in6_addr a6;
            struct in_addr a4;

            if (strlen(optarg) >= sizeof(w.bind) ||
                (inet_pton(AF_INET, optarg, &a4) != 1 && inet_pton(AF_INET6, optarg, &a6) != 1)) {
                fprintf(stderr, "probectl web: --bind takes an IP address, not '%s'\n", optarg);
                return 2;
            }
            snprintf(w.bind, sizeof(w.bind), "%s", optarg);
            break;
        }
        case 'S':
            w.socket = optarg;
            break;
        case 'A':
            allow_actions = true;
            break;
        case 'h':
            printf(
                "usage: probectl web [--port N] [--bind ADDR] [--socket PATH] [--allow-actions]\n"
                "  The web view, served by you on 127.0.0.1:%d (--port 0: any free port):\n"
                "  open the URL it prints (it holds a token; without it every request is\n"
                "  refused). It asks the daemon as you, so it shows what you may see.\n"
                "  From another machine: ssh -L %d:127.0.0.1:%d HOST, then open the URL.\n"
                "  -H HOST before `web` shows that node's daemon.\n"
                "  MCP for AI assistants at /mcp (streamable HTTP, the same token as a\n"
                "  Bearer header); its attach, detach and eval only with --allow-actions.\n",
                WEB_DEFAULT_PORT, WEB_DEFAULT_PORT, WEB_DEFAULT_PORT);
            return 0;
        default:
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "probectl web: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        fprintf(stderr, "probectl web: no random token: %s\n", strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(w.token + 2 * i, 3, "%02x", raw[i]);
    signal(SIGPIPE, SIG_IGN);
    if (!(w.mcp = mcp_new(w.socket, allow_actions, err, sizeof(err)))) {
        fprintf(stderr, "probectl web: %s\n", err);
        return 1;
    }
    evthread_use_pthreads(); /* the workers hand their answers to the loop */
    base = w.base = event_base_new();
    http = base ? evhttp_new(base) : NULL;
    if (!http) {
        fprintf(stderr, "probectl web: libevent could not start\n");
        return 1;
    }
    evhttp_set_max_body_size(http, WEB_BODY_MAX + 1);
    evhttp_set_max_headers_size(http, 64 * 1024);
    evhttp_set_timeout(http, 60);
    evhttp_set_gencb(http, handle, &w);
    snprintf(port_text, sizeof(port_text), "%d", w.port);
    /* its connections bounded (connlimit.h): any local user can connect to the port, and
     * 1,100 idle ones took every descriptor, a request with the token then never answered */
    if ((r = connlimit_listen_tcp(w.bind, port_text, &fd)) < 0 ||
        (r = connlimit_serve(base, http, fd,
                             &(struct connlimit_config){.what = "probectl web",
                                                        .max_conns = WEB_CONNS_MAX,
                                                        .request_s = 10,
                                                        .warn = say_warning},
                             &w.conns)) < 0) {
        fprintf(stderr, "probectl web: cannot listen on %s:%d: %s (another --port?)\n", w.bind,
                w.port, strerror(-r));
        return 1;
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        w.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    printf("probed web: http://%s%s%s:%d/?token=%s\n", strchr(w.bind, ':') ? "[" : "", w.bind,
           strchr(w.bind, ':') ? "]" : "", w.port, w.token);
    fflush(stdout);
    if (strchr(w.bind, ':')) { /* the Host header of an IPv6 address carries its brackets */
        char addr[sizeof(w.bind)];

        snprintf(addr, sizeof(addr), "%s", w.bind);
        snprintf(w.bind, sizeof(w.bind), "[%.*s]", (int)sizeof(w.bind) - 3, addr);
    }
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    event_base_dispatch(base);
    if (atomic_load(&w.working) > 0) {
        /* workers still asking the daemon would hand their answers to a freed loop: end
         * here, with them */
        fflush(stdout);
        _exit(0);
    }
    event_free(sigint);
    event_free(sigterm);
    evhttp_free(http);
    connlimit_free(w.conns);
    event_base_free(base);
    mcp_free(w.mcp);
    return 0;
}
