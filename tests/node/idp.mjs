// An independent OpenID provider (panva/oidc-provider) for the gateway's end-to-end tests.
//
// FLAVOUR=authentik : issuer http://127.0.0.1:PORT/application/o/<SLUG>/, JWKS <issuer>jwks/,
//                     no DCR, aud = client id (like provider B).
// FLAVOUR=keycloak  : issuer http://127.0.0.1:PORT/realms/master, Keycloak paths, DCR enabled,
//                     aud = the MCP resource URL (RESOURCE) (like provider A).
// KEY_FILE: a JSON private JWK (RS256) shared with the tests so they can mint edge-case tokens.
// Users: alice (GROUPS_ALICE, comma separated) and bob (no groups). Any password is accepted.
// CALLBACK_PATHS (comma separated): more loopback callback paths the client may use, e.g. the
// Broker callbacks of routes at other paths than /mcp (any port, as for every loopback one).
// REFRESH_ALWAYS=1: a refresh token with every code exchange, offline_access or not, as
// Keycloak issues one for every session (oidc-provider's default asks for offline_access).
import express from 'express';
import Provider from 'oidc-provider';
import { lastingAdapter } from './lasting_adapter.mjs';
import { readFileSync } from 'node:fs';

const PORT = Number(process.env.IDP_PORT);
const FLAVOUR = process.env.FLAVOUR ?? 'authentik';
const SLUG = process.env.SLUG ?? 'mcp';
const CLIENT_ID = process.env.CLIENT_ID ?? 'mcp-public';
const RESOURCE = process.env.RESOURCE ?? 'http://127.0.0.1/mcp';
const GROUPS = {
  alice: (process.env.GROUPS_ALICE ?? 'mcp-agent,users').split(',').filter(Boolean),
  bob: [],
};
const jwk = JSON.parse(readFileSync(process.env.KEY_FILE, 'utf8'));
// Scopes beyond OpenID's that the resource grants when asked (EXTRA_SCOPES, space separated),
// e.g. `mcp:tools mcp:admin` for step-up tests; they appear in the access token's `scope`.
const EXTRA_SCOPES = (process.env.EXTRA_SCOPES ?? '').split(' ').filter(Boolean);

const keycloak = FLAVOUR === 'keycloak';
const PREFIX = keycloak ? '/realms/master' : `/application/o/${SLUG}`;
const ISSUER = `http://127.0.0.1:${PORT}${PREFIX}${keycloak ? '' : '/'}`;
const routes = keycloak
  ? { jwks: '/protocol/openid-connect/certs', authorization: '/protocol/openid-connect/auth',
      token: '/protocol/openid-connect/token', userinfo: '/protocol/openid-connect/userinfo',
      registration: '/clients-registrations/openid-connect',
      revocation: '/protocol/openid-connect/revoke' }
  : { jwks: '/jwks/', authorization: '/authorize/', token: '/token/', userinfo: '/userinfo/',
      revocation: '/revoke/' };

const provider = new Provider(ISSUER, {
  adapter: lastingAdapter(),
  jwks: { keys: [jwk] },
  clients: [{
    client_id: CLIENT_ID, application_type: 'native', token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code', 'refresh_token', 'client_credentials'], response_types: ['code'],
    redirect_uris: ['http://127.0.0.1/callback', 'http://localhost/callback',
                    'http://127.0.0.1/mcp/oauth/callback',
                    ...(process.env.CALLBACK_PATHS ?? '').split(',').filter(Boolean)
                      .map((path) => `http://127.0.0.1${path}`)],
  }],
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, email: `${id}@example.com`, groups: GROUPS[id] ?? [] }),
  }),
  claims: { openid: ['sub'], email: ['email'], profile: ['groups'] },
  scopes: ['openid', 'profile', 'email', 'offline_access', ...EXTRA_SCOPES],
  routes,
  pkce: { required: () => true },
  ...(process.env.REFRESH_ALWAYS === '1'
    ? { issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token') }
    : {}),
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    revocation: { enabled: true },
    registration: { enabled: keycloak },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => (oneOf ? oneOf[0] : RESOURCE),
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resource, client) => ({
        scope: ['openid profile email offline_access', ...EXTRA_SCOPES].join(' '),
        audience: keycloak ? RESOURCE : CLIENT_ID,
        accessTokenTTL: 3600, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  extraTokenClaims: async (ctx, token) => (token.accountId
    ? { groups: GROUPS[token.accountId] ?? [], email: `${token.accountId}@example.com` }
    : { sub: token.clientId, azp: token.clientId }),
});
provider.use(async (ctx, next) => {
  // Clients that send no scope would end in access_denied ("no scope was granted").
  if (ctx.method === 'GET' && ctx.path.startsWith(routes.authorization) && !ctx.query.scope) {
    ctx.query = { ...ctx.query, scope: 'openid profile' };
  }
  // Keycloak and authentik grant offline_access without prompt=consent; oidc-provider drops it
  // unless asked for consent, so ask on the client's behalf.
  if (ctx.method === 'GET' && ctx.path.startsWith(routes.authorization)
      && (ctx.query.scope ?? '').split(' ').includes('offline_access') && !ctx.query.prompt) {
    ctx.query = { ...ctx.query, prompt: 'consent' };
  }
  await next();
});
const app = express();
if (EXTRA_SCOPES.length && routes.registration) {
  // oidc-provider refuses a later request for a scope outside a registered client's `scope`,
  // and clients register with the scopes of their first sign-in: a step-up could never be
  // granted. Stand in for a realm whose every client may ask for every scope it offers.
  app.post(PREFIX + routes.registration, express.json(), (req, res, next) => {
    delete req.body.scope;
    next();
  });
}
app.use(PREFIX, provider.callback());
// Why a grant was refused, in the test log (the HTTP answer only says "grant request is invalid").
provider.on('grant.error', (ctx, error) => console.error(
  `grant.error ${error.error}: ${error.error_description} (${error.error_detail ?? ''})`));
// What was revoked, in the test log: tests observe revocation at the provider through it.
provider.on('grant.revoked', (ctx, grantId) => console.log(`revoked grant ${grantId}`));
provider.on('revocation.error', (ctx, error) => console.error(`revocation.error ${error.error}`));
app.listen(PORT, '127.0.0.1', () => console.log(`idp ${FLAVOUR} listening ${ISSUER}`));
