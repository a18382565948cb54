// A TypeScript SDK 1.x client with a bearer token it already has (no sign-in): initialize,
// tools/list (every page), one tools/call, then DELETE the session. Prints JSON.
// Usage: node ts_bearer_client.mjs <mcp url> <token> <tool to call>
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token, tool] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'gateway-e2e-ts-bearer', version: '1.0.0' });
await client.connect(transport);
const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  tools.push(...page.tools.map((t) => t.name));
  cursor = page.nextCursor;
} while (cursor);
const called = await client.callTool({ name: tool, arguments: {} });
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ server: client.getServerVersion(), tools, called: called.content }));
