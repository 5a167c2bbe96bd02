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
 * Threads: one, the event loop; a forwarded call blocks it until the daemon answers (the
 * daemon bounds every request's time). Memory: a request body at most WEB_BODY_MAX.
 * Failure: a daemon that does not answer is a 502 with the reason.
 */
#ifndef PROBECTL_WEB_H
#define PROBECTL_WEB_H

#define WEB_DEFAULT_PORT 7450
#define WEB_BODY_MAX (1 << 20)

int web_main(int argc, char **argv);

#endif
