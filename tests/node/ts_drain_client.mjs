// A TypeScript MCP client, the SDK 1.x (`@modelcontextprotocol/sdk`, default) or the 2.x client
// (`@modelcontextprotocol/client`), kept open while a test drains the gateway it reaches: it connects
// (initialize; the SDK then opens its GET stream), prints one JSON line per event, and takes
// commands from stdin, one a line, each run without waiting for the ones before:
//   call <id> <tool> <JSON arguments>  -> {"called": id, "text": ...} or {"called": id, "error": ...}
//   quit                               -> DELETE the session, close, {"done": true}
// Log messages the server sends print as {"heard": data}; the transport's errors as {"error": ...}.
// Usage: node ts_drain_client.mjs <mcp url> [sdk1|client2]
import { createInterface } from 'node:readline';

const [url, flavour = 'sdk1'] = process.argv.slice(2);
const v2 = flavour === 'client2';
const { Client, StreamableHTTPClientTransport } = v2
  ? await import('@modelcontextprotocol/client')
  : {
    ...(await import('@modelcontextprotocol/sdk/client/index.js')),
    ...(await import('@modelcontextprotocol/sdk/client/streamableHttp.js')),
  };
const say = (line) => console.log(JSON.stringify(line));
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: 'gateway-e2e-ts-drain', version: '1.0.0' });
const hear = (note) => say({ heard: note.params.data });
if (v2) {
  client.setNotificationHandler('notifications/message', hear);
} else {
  const { LoggingMessageNotificationSchema } = await import('@modelcontextprotocol/sdk/types.js');
  client.setNotificationHandler(LoggingMessageNotificationSchema, hear);
}
transport.onerror = (error) => say({ error: String(error) });
await client.connect(transport);
say({ ready: true, session: transport.sessionId });

async function call(id, tool, args) {
  try {
    const result = await client.callTool({ name: tool, arguments: args });
    say({ called: id, text: result.content[0].text });
  } catch (error) {
    say({ called: id, error: String(error) });
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  const [command, id, tool, ...rest] = line.split(' ');
  if (command === 'call') {
    call(id, tool, JSON.parse(rest.join(' ') || '{}'));
  } else if (command === 'quit') {
    await transport.terminateSession();
    await client.close();
    say({ done: true });
    process.exit(0); // stdin stays open: nothing else would end the process
  }
}
