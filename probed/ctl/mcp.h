/*
 * mcp.h - `probectl mcp`: a Model Context Protocol server, so an AI assistant can diagnose a
 * job through the daemon; on stdio here, and over HTTP in `probectl web` (web.c: POST /mcp,
 * MCP's streamable HTTP transport, behind that server's token).
 *
 * JSON-RPC 2.0; on stdio, one message a line on stdin and stdout. It runs as the user who
 * starts it and reaches the daemon through its socket like every probectl command, so the
 * daemon's rules hold unchanged: a user sees their own processes, queries are read-only and
 * bounded. Its tools read (targets, backtrace, query, hottest functions, flame graph, memory,
 * torch summary, collectives, hang, crashes); those that change a process (attach, detach,
 * eval) are listed and run only when started with --allow-actions, and the daemon records
 * each eval as it records any. Resources: the query surface's tables, views and columns, and
 * docs/query.md.
 * Threads: mcp_handle() may run on several threads at once (web.c's workers): a server's
 * settings are read-only once made. Memory: a message at most MCP_LINE_MAX bytes, a tool's
 * output at most MCP_OUTPUT_MAX. Failure: a bad message gets a JSON-RPC error, a failing tool
 * a result with isError and the reason; only the end of stdin ends the stdio server.
 */
#ifndef PROBECTL_MCP_H
#define PROBECTL_MCP_H

#include <jansson.h>
#include <stdbool.h>

#define MCP_LINE_MAX (4 << 20)   /* bytes of one message read */
#define MCP_OUTPUT_MAX (1 << 20) /* bytes of one tool's output kept */

struct mcp;

/* A server reaching the daemon at @socket (NULL: the default), its action tools allowed with
 * @allow_actions. NULL when /proc/self/exe cannot be read (the tools run this probectl) or
 * out of memory, the reason in @err. */
struct mcp *mcp_new(const char *socket, bool allow_actions, char *err, size_t err_len);
void mcp_free(struct mcp *m);

/* The reply to the JSON-RPC message @msg (the caller owns it), or NULL when none is due (a
 * notification, a response). A batch (an array) gets an error. */
json_t *mcp_handle(struct mcp *m, json_t *msg);

/* Whether @version is a protocol version this server speaks. */
bool mcp_speaks(const char *version);

int mcp_main(int argc, char **argv);

#endif
