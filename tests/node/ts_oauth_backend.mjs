// A third-party MCP server from the TypeScript SDK 1.x that enforces its own OAuth, as such
// servers do: the SDK's `requireBearerAuth` (401 with `WWW-Authenticate: Bearer …
// resource_metadata=…`, 403 for a missing scope, the RFC 8707 resource checked) and
// `mcpAuthMetadataRouter` (RFC 9728 metadata naming its authorization server, and the AS's
// metadata copied at its own origin, as the SDK does), over a verifier that checks
//   - `jwt`: the JWT with jose against the AS's JWKS (`iss`, `aud` = this server's URL, `exp`);
//   - `introspection`: RFC 7662 at the AS (active, `aud`), so a revoked grant is refused at once;
//   - `jwt+introspection`: both (for an AS that introspects its JWTs, like Keycloak).
// Stateful Streamable HTTP sessions (2025-11-25) at /mcp; tools `whoami` and `echo`.
// `GET /debug/tokens` lists every bearer token that reached /mcp.
// CONFIG names a JSON file: port, issuer, jwks_uri, scopes (required), verify, and for
// introspection: introspection_url, client_id, client_secret.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import {
  getOAuthProtectedResourceMetadataUrl, mcpAuthMetadataRouter,
} from '@modelcontextprotocol/sdk/server/auth/router.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const config = JSON.parse(readFileSync(process.env.CONFIG, 'utf8'));
const RESOURCE = new URL(`http://127.0.0.1:${config.port}/mcp`);
const SCOPES = config.scopes ?? [];
const KINDS = config.verify.split('+');
const JWKS = KINDS.includes('jwt') ? createRemoteJWKSet(new URL(config.jwks_uri)) : undefined;
const ledger = [];

const audiences = (aud) => (Array.isArray(aud) ? aud : aud ? [aud] : []);

async function introspect(token) {
  const basic = Buffer.from(`${encodeURIComponent(config.client_id)}:`
    + `${encodeURIComponent(config.client_secret)}`).toString('base64');
  const answer = await fetch(config.introspection_url, {
    method: 'POST',
    headers: { authorization: `Basic ${basic}`, accept: 'application/json' },
    body: new URLSearchParams({ token, token_type_hint: 'access_token' }),
  });
  const info = answer.ok ? await answer.json() : {};
  if (info.active !== true) throw new InvalidTokenError('The token is not active');
  return info;
}

const verifier = {
  async verifyAccessToken(token) {
    let claims = {};
    if (JWKS) {
      try {
        ({ payload: claims } = await jwtVerify(token, JWKS, { issuer: config.issuer }));
      } catch (error) {
        throw new InvalidTokenError(`The token was refused: ${error.code ?? error.message}`);
      }
    }
    if (KINDS.includes('introspection')) claims = { ...(await introspect(token)), ...claims };
    if (!audiences(claims.aud).includes(RESOURCE.href)) {
      throw new InvalidTokenError('The token was not issued for this server');
    }
    return {
      token,
      clientId: claims.client_id ?? claims.azp,
      scopes: (claims.scope ?? '').split(' ').filter(Boolean),
      expiresAt: claims.exp,
      resource: RESOURCE,
      extra: { claims },
    };
  },
};

function mcpServer() {
  const mcp = new McpServer({ name: 'upstream-ts', version: '1.0.0' });
  mcp.registerTool('whoami', { description: 'Who the access token of this call names.' },
    async (extra) => {
      const claims = extra.authInfo?.extra?.claims ?? {};
      const text = JSON.stringify({
        sub: claims.sub,
        username: claims.preferred_username ?? claims.username ?? claims.sub,
        client_id: extra.authInfo?.clientId,
        scopes: extra.authInfo?.scopes ?? [],
        aud: claims.aud,
      });
      return { content: [{ type: 'text', text }] };
    });
  mcp.registerTool('echo', { description: 'The text it was given.',
    inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: 'text', text }] }));
  return mcp;
}

const discovery = await fetch(`${config.issuer}/.well-known/openid-configuration`);
if (!discovery.ok) throw new Error(`no metadata at ${config.issuer}: HTTP ${discovery.status}`);
const oauthMetadata = await discovery.json();

const app = createMcpExpressApp();
app.get('/debug/tokens', (req, res) => res.json(ledger));
app.use(mcpAuthMetadataRouter({
  oauthMetadata, resourceServerUrl: RESOURCE, scopesSupported: SCOPES,
  resourceName: 'Upstream TypeScript server',
}));
app.use('/mcp', (req, res, next) => {
  const header = req.headers.authorization;
  if (header) ledger.push(header.replace(/^Bearer /, ''));
  next();
});
const auth = requireBearerAuth({
  verifier, requiredScopes: SCOPES, expectedResource: RESOURCE,
  resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(RESOURCE),
});

const transports = new Map();
app.post('/mcp', auth, async (req, res) => {
  const id = req.headers['mcp-session-id'];
  let transport = id ? transports.get(id) : undefined;
  if (id && !transport) {
    return res.status(404).json({ jsonrpc: '2.0', id: null,
      error: { code: -32001, message: 'Session not found' } });
  }
  if (!transport) {
    if (!isInitializeRequest(req.body)) {
      return res.status(400).json({ jsonrpc: '2.0', id: null,
        error: { code: -32000, message: 'Bad Request: no session' } });
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sessionId) => transports.set(sessionId, transport),
    });
    transport.onclose = () => transports.delete(transport.sessionId);
    await mcpServer().connect(transport);
  }
  return transport.handleRequest(req, res, req.body);
});
const inSession = async (req, res) => {
  const transport = transports.get(req.headers['mcp-session-id']);
  if (!transport) return res.status(404).send('Session not found');
  return transport.handleRequest(req, res);
};
app.get('/mcp', auth, inSession);
app.delete('/mcp', auth, inSession);

const listener = app.listen(config.port, '127.0.0.1', () => {
  console.log(`upstream TS server listening on ${listener.address().port}`);
});
