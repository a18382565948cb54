// A TypeScript MCP client with a bearer token it already has, driven by a test one command at a
// time, for users' own sign-in at third-party servers (URL-mode elicitation). The SDK 1.x
// (`@modelcontextprotocol/sdk`, `v1`: the 2025-11-25 wire) or the 2.x client
// (`@modelcontextprotocol/client`, `v2`: versionNegotiation `auto`, the 2026-07-28 wire).
// Both declare `elicitation: {url: {}}` and handle `elicitation/create` and
// `notifications/elicitation/complete`.
//
// Usage: node ts_user_oauth_client.mjs <mcp url> <token> <v1|v2>
// stdin, one JSON object a line: {"op":"connect"} (a new client and transport each time),
// {"op":"call","tool":…,"arguments":{…}}, {"op":"answer","action":"accept"} (the answer of the
// oldest elicitation/create waiting), {"op":"close"}.
// stdout, one JSON object a line: each command's outcome {"op", "ok", …} (an error as its class
// name, code, message and elicitations), and events as they come: {"event":"elicitation",
// "params"} when the SDK hands an elicitation/create to the handler, {"event":
// "elicitation-complete","params"} when the server tells the client one is done.
import { createInterface } from 'node:readline';

const [url, token, flavour] = process.argv.slice(2);
const v2 = flavour === 'v2';
const sdk = v2
  ? await import('@modelcontextprotocol/client')
  : {
    ...(await import('@modelcontextprotocol/sdk/client/index.js')),
    ...(await import('@modelcontextprotocol/sdk/client/streamableHttp.js')),
    ...(await import('@modelcontextprotocol/sdk/types.js')),
  };

const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const waiting = []; // resolvers of elicitation/create handlers, oldest first
let client;
let transport;

function report(op, error) {
  return {
    op,
    ok: false,
    name: error?.constructor?.name,
    code: error?.code,
    message: String(error?.message ?? error),
    elicitations: error?.elicitations ?? error?.data?.elicitations ?? null,
  };
}

function onElicitation(request) {
  say({ event: 'elicitation', params: request.params });
  return new Promise((resolve) => waiting.push(resolve));
}

function onComplete(notification) {
  say({ event: 'elicitation-complete', params: notification.params });
}

function newClient() {
  const options = { capabilities: { elicitation: { url: {} } } };
  if (v2) options.versionNegotiation = { mode: 'auto' };
  const made = new sdk.Client({ name: 'gateway-e2e-user-oauth', version: '1.0.0' }, options);
  if (v2) {
    made.setRequestHandler('elicitation/create', onElicitation);
    made.setNotificationHandler('notifications/elicitation/complete', onComplete);
  } else {
    made.setRequestHandler(sdk.ElicitRequestSchema, onElicitation);
    made.setNotificationHandler(sdk.ElicitationCompleteNotificationSchema, onComplete);
  }
  return made;
}

async function connect() {
  if (client) await client.close().catch(() => {});
  transport = new sdk.StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  client = newClient();
  await client.connect(transport);
  return { protocolVersion: transport.protocolVersion ?? null, sessionId: transport.sessionId ?? null };
}

async function call(command) {
  const result = await client.callTool({ name: command.tool, arguments: command.arguments ?? {} });
  return { text: result.content?.[0]?.text ?? null };
}

async function close() {
  if (transport?.sessionId && !v2) await transport.terminateSession().catch(() => {});
  if (client) await client.close();
  return {};
}

const commands = { connect, call, close };

async function run(command) {
  if (command.op === 'answer') {
    const resolve = waiting.shift();
    if (!resolve) return say({ op: 'answer', ok: false, message: 'no elicitation is waiting' });
    resolve({ action: command.action });
    return say({ op: 'answer', ok: true });
  }
  try {
    say({ op: command.op, ok: true, ...(await commands[command.op](command)) });
  } catch (error) {
    say(report(command.op, error));
  }
  if (command.op === 'close') process.exit(0);
}

// Commands run as they come: a call waits on its elicitation's answer, the next line.
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim()) run(JSON.parse(line));
}
