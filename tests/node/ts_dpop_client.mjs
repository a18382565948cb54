// The TypeScript SDK client 2.x (`@modelcontextprotocol/client`) signing in with DPoP (RFC 9449,
// SEP-1932) and calling tools through the gateway: its OAuthClientProvider implements `dpop()`,
// so it sends a proof with the token request (the authorization server binds the token to its
// key and answers `token_type: DPoP`) and `Authorization: DPoP` with a fresh proof on every call,
// retrying once with the server's nonce when asked (`use_dpop_nonce`).
// Usage: node ts_dpop_client.mjs <mcp url> <username> <client id> [alg] [--refresh]. Prints JSON.
// The client is pre-registered at the provider (a public client, PKCE, a loopback redirect URI:
// any port); with client id `-` it registers itself (the gateway in Broker mode: its consent
// page is allowed as a person would). With `--refresh` its access token is then spoiled, so the
// next call is refused and the SDK refreshes (with a proof) and calls again. Its key pair is
// made extractable so that the test can play the key holder too (`privateJwk`): this client's
// own proofs are the SDK's.
// `requests` lists what went to the MCP URL: method, scheme, whether a proof and which nonce it
// carried, and the answer's status and DPoP-Nonce; `usedProof` is a proof of a POST the gateway
// accepted.
import { Client, DpopSession, StreamableHTTPClientTransport, UnauthorizedError, generateDpopKeyPair }
  from '@modelcontextprotocol/client';
import { decodeJwt, exportJWK } from 'jose';

const [url, username, clientId, alg = 'ES256', refresh] = process.argv.slice(2);
const registers = clientId === '-';
const REDIRECT = 'http://127.0.0.1:53682/callback';
const keyPair = await generateDpopKeyPair({ alg, extractable: true });
const session = await DpopSession.create({ keyPair });

class Provider {
  constructor() { this.store = {}; this.authorizationUrl = null; }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return { client_name: 'gateway-e2e-dpop', redirect_uris: [REDIRECT],
             grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
             token_endpoint_auth_method: 'none' };
  }
  clientInformation() { return this.store.client ?? (registers ? undefined : { client_id: clientId }); }
  // The SDK stamps the issuer on it; a registration would change the client id (and fail).
  saveClientInformation(info) {
    if (!registers && info.client_id !== clientId) throw new Error('the client is pre-registered: no registration');
    this.store.client = info;
  }
  tokens() { return this.store.tokens; }
  saveTokens(tokens) { this.store.tokens = tokens; }
  redirectToAuthorization(authorizationUrl) { this.authorizationUrl = authorizationUrl.toString(); }
  saveCodeVerifier(v) { this.store.verifier = v; }
  codeVerifier() { return this.store.verifier; }
  dpop() { return session; }
}

const requests = [];
let usedProof;
// Sees each request as it leaves (after the SDK put the token and the proof on it).
async function recording(input, init) {
  const headers = new Headers(init?.headers);
  const proof = headers.get('dpop');
  const response = await fetch(input, init);
  if (String(input).startsWith(url)) {
    const authorization = headers.get('authorization') ?? '';
    const body = init?.body;
    const form = body instanceof URLSearchParams ? body
      : typeof body === 'string' && !body.startsWith('{') ? new URLSearchParams(body) : null;
    requests.push({
      method: init?.method ?? 'GET',
      path: new URL(String(input)).pathname,
      grant: form?.get('grant_type') ?? null,
      scheme: authorization.split(' ')[0] || null,
      proof: Boolean(proof),
      nonce: proof ? decodeJwt(proof).nonce ?? null : null,
      status: response.status,
      dpopNonce: response.headers.get('dpop-nonce'),
    });
    if (proof && response.status < 300 && init?.method === 'POST') usedProof = proof;
  }
  return response;
}

// The provider's login and consent pages filled in as a person would (oidc-provider's
// development pages: one form each), cookies kept.
async function signIn(start) {
  const cookies = new Map();
  const cookieHeader = () => [...cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  const keep = (res) => {
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const at = pair.indexOf('=');
      cookies.set(pair.slice(0, at), pair.slice(at + 1));
    }
  };
  let next = start;
  for (let step = 0; step < 20; step += 1) {
    if (next.startsWith(REDIRECT)) return new URL(next).searchParams;
    const page = await fetch(next, { redirect: 'manual', headers: { cookie: cookieHeader() } });
    keep(page);
    if (page.status >= 300 && page.status < 400) {
      next = new URL(page.headers.get('location'), next).toString();
      continue;
    }
    const html = await page.text();
    const form = html.match(/<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/i);
    if (!form) throw new Error(`a page without a form (HTTP ${page.status}): ${html.slice(0, 200)}`);
    const fields = new URLSearchParams();
    for (const [input] of form[2].matchAll(/<input\b[^>]*>/gi)) {
      const name = input.match(/name="([^"]*)"/i)?.[1];
      if (!name) continue;
      const value = input.match(/value="([^"]*)"/i)?.[1] ?? '';
      fields.set(name, name === 'login' ? username : name === 'password' ? 'any' : value);
    }
    if (fields.has('request')) fields.set('decision', 'allow');  // the gateway's consent page
    const target = new URL(form[1].replaceAll('&amp;', '&'), next);
    // What a browser sends with a same-origin form post (the gateway's consent page checks it).
    const origin = target.origin === new URL(next).origin ? { origin: target.origin } : {};
    const posted = await fetch(target, {
      method: 'POST', redirect: 'manual', body: fields,
      headers: { cookie: cookieHeader(), 'content-type': 'application/x-www-form-urlencoded', ...origin },
    });
    keep(posted);
    const location = posted.headers.get('location');
    if (!location) throw new Error(`a form answered HTTP ${posted.status} without a redirect`);
    next = new URL(location, target).toString();
  }
  throw new Error('the sign-in never came back to the redirect URI');
}

const provider = new Provider();
const connect = async () => {
  const transport = new StreamableHTTPClientTransport(new URL(url),
    { authProvider: provider, fetch: recording });
  const client = new Client({ name: 'gateway-e2e-dpop', version: '1.0.0' });
  await client.connect(transport);
  return { transport, client };
};
const out = { requests };
try {
  try {
    await connect();
    throw new Error('connected without signing in: the gateway did not ask for a token');
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  const callback = await signIn(provider.authorizationUrl);
  const transport = new StreamableHTTPClientTransport(new URL(url),
    { authProvider: provider, fetch: recording });
  await transport.finishAuth(callback);
  out.tokenType = provider.store.tokens?.token_type;
  out.accessToken = provider.store.tokens?.access_token;
  const { transport: connected, client } = await connect();
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  out.add = (await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } })).content[0].text;
  const progress = [];
  out.count = (await client.callTool({ name: 'count', arguments: { n: 2 } }, {
    onprogress: (p) => progress.push(p.progress),
  })).content[0].text;
  out.progress = progress;
  if (refresh === '--refresh') {
    // A token the server refuses (as an expired one): the SDK refreshes and calls again.
    const tokens = provider.store.tokens;
    provider.store.tokens = { ...tokens, access_token: `${tokens.access_token.slice(0, -8)}AAAAAAAA` };
    out.afterRefresh = (await client.callTool({ name: 'add', arguments: { a: 4, b: 5 } })).content[0].text;
    out.refreshed = provider.store.tokens;
  }
  out.clientId = provider.store.client?.client_id;
  await connected.terminateSession();
  await client.close();
  out.thumbprint = session.thumbprint;
  out.privateJwk = await exportJWK(keyPair.privateKey);
  out.usedProof = usedProof;
  out.ok = true;
} catch (error) {
  out.ok = false;
  out.error = `${error?.name}: ${error?.message}`;
}
console.log(JSON.stringify(out));
process.exit(0);
