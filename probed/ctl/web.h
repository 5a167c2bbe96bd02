/*
 * web.h - `probectl web`: the web view, served by the user, not by the daemon.
 *
 * A small HTTP server (libevent) on 127.0.0.1 by default that serves the page (built into
 * probectl: web/index.html, app.js, app.css) and forwards the page's API calls (/v1/...) to the
 * daemon's socket as this user, so the daemon sees the user's credentials and every rule of
 * its stays as it is; the root daemon opens no port for it. With -H HOST the calls go to that
 * node's daemon through the transport, as every command's do.
 *
 * Who may use it: the holder of a random token printed in the URL (as Jupyter does). The first
 * visit with ?token= sets it as an HttpOnly, SameSite=Strict cookie and drops it from the
 * address bar; scripts send "Authorization: Bearer TOKEN". A request without it is 403, and
 * so is one from another origin (an Origin or Sec-Fetch-Site saying so) or for another host
 * name (a Host header not this server's: DNS rebinding).
 * It also serves MCP (mcp.h) at /mcp, as MCP's streamable HTTP transport: a JSON-RPC message
 * POSTed, its reply as application/json (202 for a notification), behind the same token; the
 * tools that change a process only with `web --allow-actions`.
 * Threads: the event loop serves the page and hands each /v1 call and MCP message to a worker
 * thread of its own (at most WEB_WORKERS at once; past them 503), which asks the daemon and
 * passes the answer back to the loop to send: a slow query does not hold up the page.
 * Memory: a request body at most WEB_BODY_MAX. Failure: a daemon that does not answer is a 502
 * with the reason; a client gone before its answer is simply not answered.
 */
#ifndef PROBECTL_WEB_H
#define PROBECTL_WEB_H

#define WEB_DEFAULT_PORT 7450
#define WEB_BODY_MAX (1 << 20)
#define WEB_WORKERS 16 /* /v1 calls and MCP messages being answered at once */
#define WEB_CONNS_MAX                                                                              \
    128 /* connections open (connlimit.h): past it 503, at twice it none taken                     \
         */

int web_main(int argc, char **argv);

#endif
