// A third-party OAuth authorization server (panva/oidc-provider) for the tests of users' own
// sign-in to MCP servers that enforce their own OAuth: the AS such a server trusts, apart from
// the route's identity provider.
//
// CONFIG names a JSON file:
//   { "port": 0, "issuerPath": "",                       issuer http://127.0.0.1:PORT<issuerPath>
//     "accessTokenTtl": 3600,                            seconds (POST /admin/ttl changes it)
//     "resources": { "<MCP URL>": { "scope": "mcp:read mcp:write", "format": "jwt"|"opaque" } },
//     "clients": [ { "client_id": "…", "client_secret": "…" (absent: public, PKCE),
//                    "auth_method": "client_secret_basic"|"client_secret_post",
//                    "redirect_uris": ["…"], "refresh": true, "introspection_only": false } ],
//     "users": { "alice": "password", … },
//     "adminToken": "…" }
// What it does, as such servers do: PKCE (S256) required, RFC 8707 resource indicators (a token
// per resource, `aud` = the resource; a resource it does not serve is refused), RFC 9207 `iss` in
// every authorization response, refresh tokens rotated on every use (a used one presented again
// revokes the whole grant), RFC 7009 revocation, RFC 7662 introspection (opaque tokens: JWTs
// cannot be introspected nor revoked there, as the library says), a login form that checks the
// password and a consent page.
// The admin API (Authorization: Bearer <adminToken>) lets tests act as the service's operator
// or user: POST /admin/ttl {"seconds"}, POST /admin/revoke {"sub"} (every grant of a user),
// GET /admin/grants (live grants), GET /admin/events (what happened, oldest first); and lets
// them see what a client did: POST /admin/hold {"refresh": true} keeps every refresh answer
// (made, not yet sent) until POST /admin/hold {"refresh": false}, GET /admin/held counts those
// kept (so that every concurrent caller arrives while one refresh is under way), GET
// /admin/issued lists every token it issued (to look for in what a client wrote; never logged).
import express from 'express';
import Provider, { errors } from 'oidc-provider';
import { lastingAdapter } from './lasting_adapter.mjs';
import { exportJWK, generateKeyPair } from 'jose';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';

const config = JSON.parse(readFileSync(process.env.CONFIG, 'utf8'));
const ISSUER = `http://127.0.0.1:${config.port}${config.issuerPath ?? ''}`;
const PREFIX = config.issuerPath ?? '';
const RESOURCES = config.resources;
const DEFAULT_RESOURCE = Object.keys(RESOURCES)[0];
let accessTokenTtl = config.accessTokenTtl ?? 3600;

const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: 'upstream-as-1', alg: 'RS256', use: 'sig' };

const events = [];
const note = (event) => {
  events.push({ at: Date.now() / 1000, ...event });
  console.log(JSON.stringify(event));
};
// Grant id -> {accountId, clientId}, for the admin API (the memory adapter cannot be listed).
const grants = new Map();
// Refresh answers kept until released (POST /admin/hold), and every token issued.
let holdRefresh = false;
const held = [];
const issued = [];

const clients = config.clients.map((c) => {
  if (c.introspection_only) {
    return { client_id: c.client_id, client_secret: c.client_secret,
             token_endpoint_auth_method: c.auth_method ?? 'client_secret_basic',
             grant_types: [], response_types: [], redirect_uris: [] };
  }
  const confidential = Boolean(c.client_secret);
  return {
    client_id: c.client_id,
    ...(confidential ? { client_secret: c.client_secret } : {}),
    application_type: confidential ? 'web' : 'native',
    token_endpoint_auth_method: confidential ? (c.auth_method ?? 'client_secret_basic') : 'none',
    grant_types: ['authorization_code', ...(c.refresh === false ? [] : ['refresh_token'])],
    response_types: ['code'],
    redirect_uris: c.redirect_uris,
  };
});
const allScopes = new Set(Object.values(RESOURCES).flatMap((r) => r.scope.split(' ')));

const provider = new Provider(ISSUER, {
  adapter: lastingAdapter(),
  jwks: { keys: [jwk] },
  clients,
  findAccount: async (ctx, id) => (id in config.users
    ? { accountId: id, claims: async () => ({ sub: id, email: `${id}@example.com` }) }
    : undefined),
  claims: { openid: ['sub'], email: ['email'] },
  scopes: ['openid', 'email', 'offline_access', ...allScopes],
  pkce: { required: () => true },
  // Third-party services issue refresh tokens without offline_access.
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: () => true,
  interactions: { url: async (ctx, interaction) => `${PREFIX}/interaction/${interaction.uid}` },
  // Browsers keep cookies by host, not port: names of its own, so that the route's identity
  // provider (oidc-provider too, on another port of 127.0.0.1) keeps its session.
  cookies: {
    names: { session: '_upstream_session', interaction: '_upstream_interaction',
             resume: '_upstream_interaction_resume' },
    keys: [randomBytes(32).toString('base64url')],
  },
  features: {
    devInteractions: { enabled: false },
    revocation: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => (oneOf ? oneOf[0] : DEFAULT_RESOURCE),
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resource) => {
        const server = RESOURCES[resource];
        if (!server) throw new errors.InvalidTarget();
        return {
          scope: server.scope, audience: resource, accessTokenTTL: accessTokenTtl,
          accessTokenFormat: server.format ?? 'jwt',
          ...(server.format === 'opaque' ? {} : { jwt: { sign: { alg: 'RS256' } } }),
        };
      },
    },
  },
});
provider.use(async (ctx, next) => {
  // A client that asks for no scope gets the resource's (a token with no scope is useless).
  if (ctx.method === 'GET' && ctx.path === '/auth' && !ctx.query.scope) {
    const resource = RESOURCES[ctx.query.resource] ?? RESOURCES[DEFAULT_RESOURCE];
    ctx.query = { ...ctx.query, scope: resource.scope };
  }
  await next();
  if (ctx.path === '/token' && ctx.method === 'POST') {
    const grantType = ctx.oidc?.params?.grant_type;
    note({ event: 'token', grant_type: grantType, status: ctx.status,
           client_id: ctx.oidc?.client?.clientId, error: ctx.body?.error });
    for (const name of ['access_token', 'refresh_token', 'id_token']) {
      if (ctx.status === 200 && ctx.body?.[name]) issued.push(ctx.body[name]);
    }
    if (holdRefresh && grantType === 'refresh_token') {
      await new Promise((resolve) => { held.push(resolve); });
    }
  }
});
provider.on('grant.saved', (grant) => {
  grants.set(grant.jti, { accountId: grant.accountId, clientId: grant.clientId });
});
provider.on('grant.revoked', (ctx, grantId) => {
  grants.delete(grantId);
  note({ event: 'grant.revoked', grant: grantId });
});
provider.on('refresh_token.consumed', (token) => note({ event: 'refresh_token.consumed',
  grant: token.grantId, sub: token.accountId }));
provider.on('grant.error', (ctx, error) => note({ event: 'grant.error', error: error.error,
  description: error.error_description }));
provider.on('revocation.success', (ctx) => note({ event: 'revocation.success' }));
provider.on('revocation.error', (ctx, error) => note({ event: 'revocation.error',
  error: error.error }));

const page = (title, body) => `<!doctype html><html><head><title>${title}</title></head>`
  + `<body><h1>${title}</h1>${body}</body></html>`;
const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const loginForm = (uid, error) => page('Sign in to the upstream service',
  `${error ? `<p class="error">${escape(error)}</p>` : ''}`
  + `<form method="post" action="${PREFIX}/interaction/${uid}/login">`
  + '<input type="text" name="username"><input type="password" name="password">'
  + '<button type="submit">Sign in</button></form>');
const consentForm = (uid, client, scopes) => page('Authorize access',
  `<p>${escape(client)} asks for: ${escape(scopes.join(' '))}</p>`
  + `<form method="post" action="${PREFIX}/interaction/${uid}/confirm">`
  + '<button type="submit" name="accept" value="yes">Allow</button>'
  + '<button type="submit" name="cancel" value="no">Deny</button></form>');

const app = express();
const form = express.urlencoded({ extended: false });
app.get(`${PREFIX}/interaction/:uid`, async (req, res, next) => {
  try {
    const { uid, prompt, params } = await provider.interactionDetails(req, res);
    if (prompt.name === 'login') return res.type('html').send(loginForm(uid));
    const missing = [...(prompt.details.missingOIDCScope ?? []),
      ...Object.values(prompt.details.missingResourceScopes ?? {}).flat()];
    return res.type('html').send(consentForm(uid, params.client_id, missing));
  } catch (error) {
    return next(error);
  }
});
app.post(`${PREFIX}/interaction/:uid/login`, form, async (req, res, next) => {
  try {
    const { uid, prompt } = await provider.interactionDetails(req, res);
    if (prompt.name !== 'login') return res.status(400).send('not a login prompt');
    const { username, password } = req.body;
    if (!(username in config.users) || config.users[username] !== password) {
      note({ event: 'login.failed', username });
      return res.status(200).type('html').send(loginForm(uid, 'Invalid username or password.'));
    }
    note({ event: 'login', username });
    return provider.interactionFinished(req, res, { login: { accountId: username } },
      { mergeWithLastSubmission: false });
  } catch (error) {
    return next(error);
  }
});
app.post(`${PREFIX}/interaction/:uid/confirm`, form, async (req, res, next) => {
  try {
    const details = await provider.interactionDetails(req, res);
    const { prompt, grantId, session, params } = details;
    if (prompt.name !== 'consent') return res.status(400).send('not a consent prompt');
    if (req.body.accept === undefined) {
      return provider.interactionFinished(req, res, { error: 'access_denied',
        error_description: 'the user denied access' }, { mergeWithLastSubmission: false });
    }
    const grant = grantId ? await provider.Grant.find(grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    const saved = await grant.save();
    note({ event: 'consent', sub: session.accountId, client_id: params.client_id });
    return provider.interactionFinished(req, res, { consent: { grantId: saved } },
      { mergeWithLastSubmission: true });
  } catch (error) {
    return next(error);
  }
});

const admin = express.Router();
admin.use((req, res, next) => (req.headers.authorization === `Bearer ${config.adminToken}`
  ? next() : res.status(401).json({ error: 'admin token required' })));
admin.use(express.json());
admin.post('/ttl', (req, res) => {
  accessTokenTtl = Number(req.body.seconds);
  note({ event: 'admin.ttl', seconds: accessTokenTtl });
  res.json({ seconds: accessTokenTtl });
});
admin.post('/revoke', async (req, res) => {
  const revoked = [];
  for (const [grantId, grant] of grants) {
    if (grant.accountId !== req.body.sub) continue;
    await Promise.all([provider.AccessToken, provider.RefreshToken, provider.AuthorizationCode]
      .map((model) => model.revokeByGrantId(grantId)));
    await provider.Grant.adapter.destroy(grantId);
    grants.delete(grantId);
    revoked.push(grantId);
  }
  note({ event: 'admin.revoke', sub: req.body.sub, grants: revoked });
  res.json({ revoked });
});
admin.get('/grants', async (req, res) => {
  const live = [];
  for (const [grantId, grant] of grants) {
    if (await provider.Grant.find(grantId)) live.push({ grant: grantId, ...grant });
  }
  res.json(live);
});
admin.get('/events', (req, res) => res.json(events));
admin.post('/hold', (req, res) => {
  holdRefresh = Boolean(req.body.refresh);
  note({ event: 'admin.hold', refresh: holdRefresh });
  if (!holdRefresh) held.splice(0).forEach((release) => release());
  res.json({ refresh: holdRefresh });
});
admin.get('/held', (req, res) => res.json({ held: held.length }));
admin.get('/issued', (req, res) => res.json(issued));
app.use('/admin', admin);
app.use(PREFIX || '/', provider.callback());
app.listen(config.port, '127.0.0.1', () => console.log(`upstream AS listening ${ISSUER}`));
