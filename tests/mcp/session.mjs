// A scripted MCP session with the official SDK's client (tests/functional/test_mcp.py).
// usage: node session.mjs PROBECTL SOCKET PLAN_JSON [--allow-actions]
//        MCP_URL=http://127.0.0.1:PORT/mcp MCP_TOKEN=T node session.mjs - - PLAN_JSON
//        (over probectl web's streamable HTTP transport instead of stdio)
// PLAN_JSON: {"calls": [{"tool": NAME, "args": {...}}, ...], "resources": [URI, ...]}
// Prints one JSON object: the server's info and instructions, the tools listed, each call's
// result (or the error the client raised), each resource read.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [probectl, socket, planText, ...rest] = process.argv.slice(2);
const plan = JSON.parse(planText);
const transport = process.env.MCP_URL
  ? new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: 'Bearer ' + process.env.MCP_TOKEN } },
  })
  : new StdioClientTransport({
    command: probectl,
    args: ['mcp', '--socket', socket, ...rest],
    env: { ...process.env },
    stderr: 'inherit',
  });
const client = new Client({ name: 'probed-test', version: '1.0.0' });
await client.connect(transport);
const out = {
  server: client.getServerVersion(),
  instructions: client.getInstructions(),
  capabilities: client.getServerCapabilities(),
  tools: (await client.listTools()).tools,
  calls: [],
  resources: (await client.listResources()).resources,
  read: {},
};
for (const call of plan.calls) {
  try {
    out.calls.push({ tool: call.tool, result: await client.callTool({ name: call.tool, arguments: call.args }) });
  } catch (e) {
    out.calls.push({ tool: call.tool, error: String(e.message || e) });
  }
}
for (const uri of plan.resources || []) {
  try {
    out.read[uri] = (await client.readResource({ uri })).contents;
  } catch (e) {
    out.read[uri] = { error: String(e.message || e) };
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
