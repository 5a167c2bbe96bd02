/* debug.c - see debug.h. */
#define _GNU_SOURCE
#include "intarget/debug.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intarget/eval.h"

#define DEBUG_TIMEOUT_MS 10000 /* beyond an io's own wait */

extern const char debug_py[]; /* debug.py, embedded at build time */

int debug_parse_listen(const char *listen, bool insecure, struct errbuf *err)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    char host[64], *end;
    unsigned char buf[16];
    long port;
    size_t n;

    if (!colon)
        goto bad;
    n = (size_t)(colon - listen);
    if (n >= 2 && listen[0] == '[' && listen[n - 1] == ']')
        listen++, n -= 2;
    if (n == 0 || n >= sizeof(host))
        goto bad;
    memcpy(host, listen, n);
    host[n] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (*end || colon[1] == '\0' || port < 0 || port > 65535 ||
        (inet_pton(AF_INET, host, buf) != 1 && inet_pton(AF_INET6, host, buf) != 1))
        goto bad;
    if (!insecure && !(inet_pton(AF_INET, host, buf) == 1 && buf[0] == 127) &&
        strcmp(host, "::1") != 0)
        return errbuf_set(err, -EINVAL,
                          "listen address '%.100s' is not loopback: whoever reaches it runs code"
                          " as the process (use 127.0.0.1 and ssh -L; --insecure-listen to"
                          " insist)",
                          listen);
    return 0;
bad:
    return errbuf_set(err, -EINVAL,
                      "bad listen address '%.100s': expected HOST:PORT with a literal address"
                      " (127.0.0.1:5678, [::1]:0; port 0 picks a free one)",
                      listen ? listen : "");
}

/* The Python run in the target: loads debug.py as _probed_debug when it is missing (on pause
 * and load only: an io finds it there or says there is no session), then prints what its
 * command() returns for the request, passed as hex JSON (a safe literal). */
static char *script(const struct debug_request *rq)
{
    static const char *const actions[] = {"pause",  "io",        "interrupt",
                                          "detach", "keepalive", "load"};
    bool loads = rq->action == DEBUG_PAUSE || rq->action == DEBUG_LOAD;
    json_t *args =
        json_pack("{s:s, s:i, s:s?, s:b, s:s?, s:f, s:I}", "action", actions[rq->action], "thread",
                  (int)rq->thread, "listen", rq->listen, "dap", rq->dap, "input", rq->input, "wait",
                  rq->wait_ms / 1000.0, "uid", (json_int_t)rq->uid);
    char *text = args ? json_dumps(args, JSON_COMPACT) : NULL, *args_hex = NULL, *src_hex = NULL;
    char *code = NULL;

    args_hex = text ? eval_hex(text) : NULL;
    src_hex = eval_hex(loads ? debug_py : "");
    if (args_hex && src_hex &&
        asprintf(&code,
                 "import sys as _sys, json as _json\n"
                 "_mod = _sys.modules.get('_probed_debug')\n"
                 "if _mod is None and %d:\n"
                 "    import types as _types\n"
                 "    _mod = _types.ModuleType('_probed_debug')\n"
                 "    exec(compile(bytes.fromhex('%s').decode(), '<probed debug>', 'exec'),"
                 " _mod.__dict__)\n"
                 "    _sys.modules['_probed_debug'] = _mod\n"
                 "print(_mod.command(_json.loads(bytes.fromhex('%s').decode())) if _mod else"
                 " '{\"state\": \"none\"}')\n",
                 loads, src_hex, args_hex) < 0)
        code = NULL;
    json_decref(args);
    free(text);
    free(args_hex);
    free(src_hex);
    return code;
}

/* What the evals row says was run: each line given to pdb is code run in the target. */
static char *audit_text(const struct debug_request *rq)
{
    char *text = NULL;
    int r = -1;

    switch (rq->action) {
    case DEBUG_PAUSE:
        r = asprintf(&text, "pause%s --thread %d%s%s", rq->dap ? " --dap" : "", (int)rq->thread,
                     rq->listen ? " --listen " : "", rq->listen ? rq->listen : "");
        break;
    case DEBUG_IO:
        r = asprintf(&text, "%s", rq->input ? rq->input : "");
        break;
    case DEBUG_INTERRUPT:
        r = asprintf(&text, "interrupt");
        break;
    case DEBUG_DETACH:
        r = asprintf(&text, "detach");
        break;
    case DEBUG_KEEPALIVE:
        r = asprintf(&text, "keepalive");
        break;
    case DEBUG_LOAD:
        r = asprintf(&text, "catch --postmortem");
        break;
    }
    return r < 0 ? NULL : text;
}

int debug_run(struct stubctl *sc, const char *db_path, const struct debug_request *rq,
              json_t **ret_body, struct errbuf *err)
{
    struct eval_request ev = {
        .pid = rq->pid,
        .grant = rq->grant,
        .uid = rq->uid,
        .kind = STUB_RUN,
        .timeout_ms = DEBUG_TIMEOUT_MS + (rq->action == DEBUG_IO ? rq->wait_ms : 0),
        .mode = "debug",
        /* a read of the session's output runs only probed's code */
        .unaudited = (rq->action == DEBUG_IO && !rq->input) || rq->action == DEBUG_INTERRUPT ||
                     rq->action == DEBUG_KEEPALIVE,
    };
    char *code = script(rq), *audit = audit_text(rq);
    json_t *body = NULL, *error;
    int r;

    if (!code || !audit) {
        free(code);
        free(audit);
        return errbuf_set(err, -ENOMEM, "out of memory");
    }
    ev.code = code;
    ev.audit_code = audit;
    r = eval_json(sc, db_path, &ev, "the debugger", &body, err);
    free(code);
    free(audit);
    if (r < 0)
        return r;
    error = json_object_get(body, "error");
    if (json_is_string(error)) {
        r = errbuf_set(err,
                       json_is_true(json_object_get(body, "busy"))         ? -EBUSY
                       : json_is_true(json_object_get(body, "no_debugpy")) ? -ENOPKG
                                                                           : -EINVAL,
                       "pid %d: %s", (int)rq->pid, json_string_value(error));
        json_decref(body);
        return r;
    }
    *ret_body = body;
    return 0;
}
