"""Configurations that between them turn on every stage a route's pipeline can have (the
provider-B layout of `resources_fixture`, edited), for tests that hold for any configuration.
The secrets they name are read from the environment variables in `SECRETS`."""

from __future__ import annotations

from pathlib import Path

from mcp_oauth_gateway.controlplane import Deployment
from mcp_oauth_gateway.serving.process_state import ProcessState, UserTokenSettings
from mcp_oauth_gateway.usertokens.keys import TokenKeys
from unit.broker.workload_support import policy_yaml as workload_policy
from unit.resources_fixture import BASE, policy

SECRETS = {"VARIANT_SECRET": "s3cret", "VARIANT_KEY": "k-1"}
# userOAuth is served only by a gateway with a user-token key and store.
DEPLOYMENT = Deployment(user_token_store="sqlite")


def process_state_in(directory: Path) -> ProcessState:
    """A process's shared state, its user-token store a SQLite file in `directory`."""
    process_state = ProcessState()
    process_state.user_tokens = UserTokenSettings(
        f"sqlite://{directory / 'tokens.db'}", TokenKeys.of([b"k" * 32])
    )
    return process_state


# Broker mode with every traffic stage, tool rules, a backend secret and DPoP with nonces.
EVERY_STAGE = (
    policy()
    .replace(
        "        provider: ProviderB\n",
        "        provider: ProviderB\n        authorizationServerMode: Broker\n",
    )
    .replace(
        "          jwks:\n",
        "          dpop: Required\n          dpopProofs: {requireNonce: true}\n          jwks:\n",
    )
    .replace(
        "    authorization:\n",
        "    scopes: {required: [mcp:tools], implies: {'mcp:admin': [mcp:tools]}}\n"
        "    rateLimit: {key: 'jwt.sub', requests: 5, window: 1m}\n"
        "    transformation:\n      request:\n"
        "        set: [{name: X-User, value: 'jwt.sub'}]\n        remove: [X-Debug]\n"
        "    authorization:\n",
    )
    + "  backend:\n"
    "    mcp:\n"
    "      authorization: {action: Allow, policy: {matchExpressions: ['true']}}\n"
    "      scopes: [{match: 'mcp.tool.name == \"x\"', required: [mcp:admin]}]\n"
    "    credentials:\n"
    "      secretHeader: {header: X-Api-Key, value: {env: VARIANT_KEY}}\n"
)

# A backend of three targets (federated), each with its own credential.
FEDERATED = (
    BASE.replace(
        "    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]",
        "    targets: [{name: search, static: {host: 127.0.0.1, port: 9001}},"
        " {name: tickets, static: {host: 127.0.0.1, port: 9002}},"
        " {name: notes, static: {host: 127.0.0.1, port: 9003}}]",
    )
    + policy(provider="Keycloak")
    + (
        "  backend:\n"
        "    credentials:\n"
        "      targets:\n"
        "        - name: search\n"
        "          tokenExchange:\n"
        "            {clientId: gw, clientSecret: {env: VARIANT_SECRET}, audience: a}\n"
        "        - name: tickets\n"
        "          secretHeader: {header: X-Api-Key, value: {env: VARIANT_KEY}}\n"
        "        - name: notes\n"
        "          userOAuth:\n"
        "            {clientId: c, clientSecret: {env: VARIANT_SECRET}, scopes: [notes]}\n"
    )
)

# Two protected resources on one host: neither answers the root metadata paths.
OTHER_ROUTE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: other}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /other}}]
      backendRefs: [{name: backend}]
"""
SHARED_HOST = (
    BASE
    + OTHER_ROUTE
    + policy()
    + policy(name="other", target="other").replace("gw.example/mcp", "gw.example/other")
)

VARIANTS = {
    "provider-b": BASE + policy(),
    "keycloak": BASE + policy(provider="Keycloak", client_id=None),
    "every-stage": BASE + EVERY_STAGE,
    "workload-identity": BASE + workload_policy(),
    "federated": FEDERATED,
    "shared-host": SHARED_HOST,
    "no-policy": BASE,
    "invalid-policy": BASE + policy(client_id=None),
}
