/*
 * mcp.h - `probectl mcp`: a Model Context Protocol server on stdio, so an AI assistant can
 * diagnose a job through the daemon.
 *
 * JSON-RPC 2.0, one message a line on stdin and stdout (MCP's stdio transport). It runs as the
 * user who starts it and reaches the daemon through its socket like every probectl command, so
 * the daemon's rules hold unchanged: a user sees their own processes, queries are read-only
 * and bounded. Its tools read (targets, backtrace, query, hottest functions, flame graph,
 * memory, torch summary, collectives, hang, crashes); those that change a process (attach,
 * detach, eval) are listed and run only when started with --allow-actions, and the daemon
 * records each eval as it records any. Resources: the query surface's tables, views and
 * columns, and docs/query.md.
 * Threads: one. Memory: a message at most MCP_LINE_MAX bytes, a tool's output at most
 * MCP_OUTPUT_MAX. Failure: a bad message gets a JSON-RPC error, a failing tool a result with
 * isError and the reason; only the end of stdin ends the server.
 */
#ifndef PROBECTL_MCP_H
#define PROBECTL_MCP_H

#define MCP_LINE_MAX (4 << 20)   /* bytes of one message read */
#define MCP_OUTPUT_MAX (1 << 20) /* bytes of one tool's output kept */

int mcp_main(int argc, char **argv);

#endif
