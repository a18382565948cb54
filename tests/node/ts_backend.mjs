// A real MCP server from the TypeScript SDK 1.x (`createMcpExpressApp()`: Express with
// body-parser, which inflates gzip and deflate, replaces invalid UTF-8 and reads big numbers)
// used as the gateway's backend in the tests that try to make a denied tool run.
// Every tool call that really ran is written to a ledger (`GET /debug/ran`), and every request's
// headers to another (`GET /debug/requests`): tests assert on what the backend did, not only on
// what the gateway answered.
// Usage: PORT=<port> node ts_backend.mjs
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { z } from 'zod';

const ran = [];
const requests = [];

function server() {
  const mcp = new McpServer({ name: 'ts-ledger-backend', version: '1.0.0' });
  const tool = (name, description) =>
    mcp.registerTool(name, { description, inputSchema: { a: z.any().optional() } }, async (args) => {
      ran.push({ tool: name, args });
      return { content: [{ type: 'text', text: `${name} ran` }] };
    });
  tool('add', 'Adds numbers.');
  // A description cut in the middle of an emoji: JSON.stringify writes a lone surrogate.
  tool('delete_all', 'Deletes everything \ud83d');
  tool('admin', 'Needs mcp:admin.');
  return mcp;
}

const app = createMcpExpressApp();
app.get('/debug/ran', (req, res) => res.json(ran));
app.get('/debug/requests', (req, res) => res.json(requests));
app.all('/mcp', async (req, res) => {
  requests.push({ method: req.method, headers: req.rawHeaders });
  requests.splice(0, Math.max(0, requests.length - 200));
  // Stateless: a server and transport per request, as the SDK's stateless example does.
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  const mcp = server();
  res.on('close', () => { transport.close(); mcp.close(); });
  await mcp.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
const listener = app.listen(Number(process.env.PORT), '127.0.0.1', () => {
  console.log(`ts backend listening on ${listener.address().port}`);
});
