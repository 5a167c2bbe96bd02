/*
 * debug.h - `probectl pause`, `probectl debug`: a debugger in a live target, through the stub.
 *
 * `pause` loads debug.py into the target (as the module _probed_debug) and opens its one
 * session: a pdb that runs in the paused thread itself, which stops at its next Python line.
 * The session's input and output go through the daemon (`io`: a line in, what pdb wrote out,
 * waiting up to a few seconds for pdb to want the next line), with the same rules as eval:
 * root or the process's owner, every line audited in evals (mode 'debug'). Only with
 * `listen` does the target open a TCP port of its own for it. `dap` starts debugpy's Debug
 * Adapter Protocol server instead (VS Code's "attach"), the main thread waiting there for the
 * client. `detach` (or Ctrl-D, quit) clears every breakpoint and trace function.
 *
 * Threads: a job worker per call. Memory: the reply is the caller's. Failure: eval_run()'s
 * errors, -EBUSY a session is open already, -ENOPKG debugpy cannot be imported by the target,
 * -EINVAL the thread asked for is not there or cannot be paused on this version.
 */
#ifndef PROBED_DEBUG_H
#define PROBED_DEBUG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"

#include "intarget/stubctl.h"

#define DEBUG_WAIT_MAX_MS 10000 /* the longest `io` waits for pdb */

/* KEEPALIVE: the client still holds the session (takes no output, unlike an IO that reads). */
enum debug_action {
    DEBUG_PAUSE,
    DEBUG_IO,
    DEBUG_INTERRUPT,
    DEBUG_DETACH,
    DEBUG_KEEPALIVE,
    DEBUG_LOAD
};

struct debug_request {
    pid_t pid;
    struct proc_grant grant; /* the process, as authorised: checked at each step (procfs.h) */
    uid_t uid;               /* who asks (the evals audit row) */
    enum debug_action action;
    pid_t thread;       /* PAUSE: the thread's id (0: the main thread) */
    const char *listen; /* PAUSE: "host:port" to serve the session (or DAP) on, or NULL; only
                         * connections of uid (who paused) are taken there (debug.py) */
    bool dap;           /* PAUSE: debugpy's DAP server rather than pdb */
    const char *input;  /* IO: one line for pdb, or NULL to only read */
    int wait_ms;        /* IO: how long to wait for pdb (<= DEBUG_WAIT_MAX_MS) */
};

/* Checks "host:port" (a literal address: 127.0.0.1, [::1]; port 0 picks one): a loopback
 * address unless @insecure (--insecure-listen: another machine's users reach it, and only the
 * uid check of debug.py, which sees this machine's sockets only, refuses them); 0 or -EINVAL. */
int debug_parse_listen(const char *listen, bool insecure, struct errbuf *err);

/* *ret_body: the session's state ("state": armed|paused|running|ended|none, "output", "how",
 * "listen", "ident"). */
int debug_run(struct stubctl *sc, const char *db_path, const struct debug_request *rq,
              json_t **ret_body, struct errbuf *err);

#endif
