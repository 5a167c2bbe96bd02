/*
 * remote.h - probectl's side of remote access: `probectl proxy` joins its stdin and stdout to
 * the local daemon's socket, so that a transport the site already trusts (`ssh -T HOST probectl
 * proxy`, `kubectl exec -i ...`) reaches a node's daemon with no port of ours open; the daemon
 * authorises the proxy's user with SO_PEERCRED, as any local client.
 */
#ifndef PROBECTL_REMOTE_H
#define PROBECTL_REMOTE_H

int proxy_main(int argc, char **argv);

#endif
