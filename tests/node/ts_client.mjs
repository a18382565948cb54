// Drives the whole MCP OAuth flow through the gateway with a TypeScript client: the SDK 1.x
// (`@modelcontextprotocol/sdk`, default) or the 2.x client (`@modelcontextprotocol/client`):
// discovery → registration → login (headless) → token → initialize → tools/list → tools/call
// (incl. SSE progress) → DELETE session.
// Usage: node ts_client.mjs <mcp url> <username> [password] [sdk1|client2]. Prints JSON.
// With a fifth argument, a tool that needs a scope the first sign-in did not ask for: the SDK
// steps up on the gateway's 403 (it asks to authorize again with the union of scopes). With
// `--again` instead, it then forgets its tokens (not its registration) and signs in once more in
// the same browser, as after a restart. `met` lists, per sign-in, the pages whose form it filled
// in ("consent" for the gateway's consent page, the host of each other one).
const [url, username = 'alice', password = 'x', flavour = 'sdk1', fifth] = process.argv.slice(2);
const again = fifth === '--again';
const stepUp = again ? undefined : fifth;
const v2 = flavour === 'client2';
const { Client, StreamableHTTPClientTransport, UnauthorizedError } = v2
  ? await import('@modelcontextprotocol/client')
  : {
    ...(await import('@modelcontextprotocol/sdk/client/index.js')),
    ...(await import('@modelcontextprotocol/sdk/client/streamableHttp.js')),
    ...(await import('@modelcontextprotocol/sdk/client/auth.js')),
  };
const REDIRECT = 'http://127.0.0.1:53682/callback';
const trace = [];

class MemoryProvider {
  constructor() { this.store = {}; this.authorizationUrl = null; }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return { client_name: 'gateway-e2e-ts', redirect_uris: [REDIRECT],
             grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
             token_endpoint_auth_method: 'none' };
  }
  clientInformation() { return this.store.client; }
  saveClientInformation(info) { this.store.client = info; trace.push(['registered', info.client_id]); }
  tokens() { return this.store.tokens; }
  saveTokens(tokens) { this.store.tokens = tokens; trace.push(['tokens']); }
  redirectToAuthorization(authorizationUrl) { this.authorizationUrl = authorizationUrl.toString(); }
  saveCodeVerifier(v) { this.store.verifier = v; }
  codeVerifier() { return this.store.verifier; }
  saveDiscoveryState(state) { this.store.discovery = state; }
  discoveryState() { return this.store.discovery; }
}

const ENTITIES = { amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#x27': "'" };
const unescapeHtml = (text) => text.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, e) => ENTITIES[e]);
const attribute = (tag, name) => {
  const found = tag.match(new RegExp(`\\s${name}\\s*=\\s*"([^"]*)"`, 'i'));
  return found ? unescapeHtml(found[1]) : undefined;
};

// The first form of a page as a person would submit it: hidden fields as they are, the user
// name in its text field (oidc-provider's and the dev IdP's `login`, Keycloak's `username`),
// the password, and the button that says yes (Keycloak's consent page: accept=Yes).
function submission(html, user) {
  const form = html.match(/<form\b[^>]*>[\s\S]*?<\/form>/i)?.[0];
  if (!form) return null;
  const fields = [...form.matchAll(/<(?:input|button)\b[^>]*>/gi)].map(([tag]) => ({
    type: (attribute(tag, 'type') ?? 'text').toLowerCase(),
    name: attribute(tag, 'name'),
    value: attribute(tag, 'value') ?? '',
  }));
  const body = {};
  for (const field of fields) {
    if (!field.name) continue;
    if (field.type === 'hidden') body[field.name] = field.value;
    else if (field.type === 'password') body[field.name] = password;
    else if (field.type === 'text' || field.type === 'email') body[field.name] = user;
    else if (field.name === 'accept') body.accept = field.value;
  }
  if ('request' in body) body.decision = 'allow';  // the gateway's consent page (Broker)
  return { action: attribute(form.match(/<form\b[^>]*>/i)[0], 'action'), body };
}

// One browser for every sign-in: its cookies by host (every cookie is sent back: Keycloak marks
// its cookies Secure even on http://127.0.0.1).
const browser = new Map();
const met = [];

// Complete the gateway's consent page and the provider's login and consent pages with plain
// HTTP, keeping cookies.
async function login(start, user) {
  const pages = [];
  met.push(pages);
  const jar = (at) => {
    const host = new URL(at).host;
    if (!browser.has(host)) browser.set(host, new Map());
    return browser.get(host);
  };
  const cookieHeader = (at) => [...jar(at)].map(([k, v]) => `${k}=${v}`).join('; ');
  const remember = (res, at) => {
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';'); const i = pair.indexOf('=');
      jar(at).set(pair.slice(0, i), pair.slice(i + 1));
    }
  };
  let next = start;
  for (let i = 0; i < 20; i += 1) {
    if (next.startsWith(REDIRECT.split('/callback')[0])) {
      return Object.fromEntries(new URL(next).searchParams);
    }
    let res = await fetch(next, { redirect: 'manual', headers: { cookie: cookieHeader(next) } });
    remember(res, next);
    if (res.status >= 300 && res.status < 400) { next = new URL(res.headers.get('location'), next).toString(); continue; }
    const html = await res.text();
    const form = submission(html, user);
    if (!form?.action) throw new Error(`login page without form (HTTP ${res.status}): ${html.slice(0, 300)}`);
    pages.push('request' in form.body ? 'consent' : new URL(next).host);
    const target = new URL(form.action, next);
    // What a browser sends with a same-origin form post.
    const sameOrigin = target.origin === new URL(next).origin ? { origin: target.origin } : {};
    res = await fetch(target, {
      method: 'POST', redirect: 'manual', body: new URLSearchParams(form.body),
      headers: { cookie: cookieHeader(target), 'content-type': 'application/x-www-form-urlencoded',
                 ...sameOrigin },
    });
    remember(res, target);
    const location = res.headers.get('location');
    if (!location) {
      const text = await res.text();
      throw new Error(`form at ${target} answered HTTP ${res.status} without a redirect: ${text.slice(0, 300)}`);
    }
    next = new URL(location, next).toString();
  }
  throw new Error('login did not reach the redirect URI');
}

// The SDK meets 403 insufficient_scope, computes the scopes to ask for and sends the user to
// authorize (recorded by the provider); the user signs in, and the call is made again.
async function stepUpCall(tool) {
  const before = provider.authorizationUrl;
  try {
    await client.callTool({ name: tool, arguments: { n: 1 } });
    return { stepped: false };
  } catch (error) {
    if (provider.authorizationUrl === before) {
      throw new Error(`the call failed without a new sign-in: ${error?.name}: ${error?.message}`);
    }
  }
  const scope = new URL(provider.authorizationUrl).searchParams.get('scope');
  const callback = await login(provider.authorizationUrl, username);
  await transport.finishAuth(new URLSearchParams(callback));
  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  client = new Client({ name: 'gateway-e2e-ts', version: '1.0.0' });
  await client.connect(transport);
  const result = await client.callTool({ name: tool, arguments: { n: 1 } });
  return { stepped: true, scope, result: result.content[0].text };
}

// Sign in (the SDK sends the user to authorize on the 401), then connect with the tokens.
async function signIn() {
  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  client = new Client({ name: 'gateway-e2e-ts', version: '1.0.0' });
  try {
    await client.connect(transport);
    throw new Error('connected without signing in: the gateway did not ask for a token');
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  const callback = await login(provider.authorizationUrl, username);
  if (v2) await transport.finishAuth(new URLSearchParams(callback));
  else await transport.finishAuth(callback.code);
  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  client = new Client({ name: 'gateway-e2e-ts', version: '1.0.0' });
  await client.connect(transport);
}

const provider = new MemoryProvider();
let transport;
let client;
const out = { trace, met };
try {
  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  client = new Client({ name: 'gateway-e2e-ts', version: '1.0.0' });
  try {
    await client.connect(transport);
    throw new Error('connected without signing in: the gateway did not ask for a token');
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  out.authorizationUrl = provider.authorizationUrl;
  out.scope = new URL(provider.authorizationUrl).searchParams.get('scope');
  const callback = await login(provider.authorizationUrl, username);
  out.sdk = v2 ? '@modelcontextprotocol/client 2' : '@modelcontextprotocol/sdk 1';
  out.callback = { state: callback.state, iss: callback.iss, hasCode: Boolean(callback.code) };
  if (v2) await transport.finishAuth(new URLSearchParams(callback));
  else await transport.finishAuth(callback.code);
  out.clientId = provider.store.client?.client_id;
  out.accessToken = provider.store.tokens?.access_token;

  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  client = new Client({ name: 'gateway-e2e-ts', version: '1.0.0' });
  await client.connect(transport);
  out.sessionId = transport.sessionId;
  out.serverName = client.getServerVersion()?.name;
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  out.add = await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
  if (stepUp) {
    out.stepUp = await stepUpCall(stepUp);
  } else {
    const progress = [];
    out.count = await client.callTool({ name: 'count', arguments: { n: 3 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    });
    out.progress = progress;
  }
  await transport.terminateSession();
  out.terminated = transport.sessionId === undefined;
  await client.close();
  out.clientIds = [provider.store.client?.client_id];
  if (again) {  // as after a restart that kept the registration but not the tokens
    provider.store.tokens = undefined;
    await signIn();
    out.againAdd = await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
    out.clientIds.push(provider.store.client?.client_id);
    await client.close();
  }
  out.ok = true;
} catch (error) {
  out.ok = false;
  out.error = `${error?.name}: ${error?.message}`;
  out.status = error?.code;
}
console.log(JSON.stringify(out));
// A transport left open after a failure must not keep the process (and the test) waiting.
process.exit(0);
