"""The gateway as each user's own OAuth client at a third-party MCP server's authorization
server (a policy's `backend.credentials.userOAuth`): the server is found the way an MCP client
finds it (the backend's 401 `WWW-Authenticate`, its RFC 9728 protected resource metadata, then
RFC 8414 or OpenID Connect discovery of the issuer it names), or named by the operator (an
`issuer`, or explicit endpoints for servers without discovery); each user is sent there with
PKCE S256, `state` and the RFC 8707 `resource`; and the gateway redeems, refreshes and revokes
that user's tokens at the server's token and revocation endpoints. Tokens and client secrets
never reach a log line or an error message."""
