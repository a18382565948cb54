"""The `idp keycloak` and `idp authentik` command lines, apart from the tools they run, so that
building the gateway's parser (every `serve` does) loads neither httpx nor the providers' code."""

from __future__ import annotations

import argparse

from ..authorization_server_modes import FACADE_CLIENTS, AuthorizationServerMode
from ..provider_kinds import ProviderKind

KEYCLOAK_ADMIN_PASSWORD = "KEYCLOAK_ADMIN_PASSWORD"
KEYCLOAK_USER_PASSWORD = "KEYCLOAK_USER_PASSWORD"
AUTHENTIK_TOKEN = "AUTHENTIK_TOKEN"


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `idp keycloak` and `idp authentik`."""
    idp = commands.add_parser("idp", help="provision an identity provider for the gateway")
    tools = idp.add_subparsers(dest="idp", required=True)
    _add_keycloak_parser(tools)
    _add_authentik_parser(tools)


def _add_keycloak_parser(tools: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kc = tools.add_parser(
        ProviderKind.KEYCLOAK.flavour,
        help="set up Keycloak (provider A) through its admin REST API",
        description="Creates the client scope with the audience and group mappers, makes it a "
        "default scope, creates the group and users, adds them to the group, reads "
        "issuer and JWKS path, and writes ready-to-apply gateway resources. "
        f"Secrets: admin password from ${KEYCLOAK_ADMIN_PASSWORD} or stdin "
        f"(--password-stdin); user password from ${KEYCLOAK_USER_PASSWORD}.",
    )
    kc.add_argument("--url", required=True, help="Keycloak base URL, e.g. http://127.0.0.1:8180")
    kc.add_argument("--admin-user", default="admin")
    kc.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the admin password from the first line of stdin",
    )
    kc.add_argument(
        "--resource",
        required=True,
        help="the MCP resource URL clients connect to (the token audience)",
    )
    kc.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        metavar="NAME[:EMAIL]",
        help="a user to create (if missing) and add to the group (repeatable)",
    )
    kc.add_argument(
        "--realm",
        default="master",
        help="the realm to set up (default master, the spec's layout); created if missing. "
        "The admin signs in to master either way",
    )
    kc.add_argument("--group", default="users")
    kc.add_argument("--scope", default="mcp", help="name of the client scope (default mcp)")
    kc.add_argument(
        "--gateway-client-id",
        default="mcp-gateway",
        help="Broker mode: the public client the gateway signs users in with",
    )
    _exchange_flags(
        kc,
        "create this confidential client for standard token exchange (Keycloak >= 26.2)",
        "the backend's client id (the exchanged tokens' aud; created if missing)",
    )
    kc.add_argument(
        "--allow-anonymous-dcr",
        action="store_true",
        help="with --mode Facade, for local tests only: delete the trusted-hosts and "
        "anonymous allowed-client-templates registration policies so MCP clients can "
        "register at Keycloak without a token",
    )
    _common(kc)


def _add_authentik_parser(tools: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ak = tools.add_parser(
        ProviderKind.AUTHENTIK.flavour,
        help="set up authentik (provider B) through its API v3",
        description="Waits for the API, resolves flows, signing key and the openid/profile/"
        "email scope mappings, creates the public OAuth2 provider, the application "
        "and the group, adds the users, and writes ready-to-apply gateway "
        f"resources. Secret: API token from ${AUTHENTIK_TOKEN} or stdin "
        "(--token-stdin).",
    )
    ak.add_argument("--url", required=True, help="authentik base URL, e.g. http://127.0.0.1:9000")
    ak.add_argument(
        "--token-stdin", action="store_true", help="read the API token from the first line of stdin"
    )
    ak.add_argument("--slug", default="mcp", help="application slug (part of the issuer)")
    ak.add_argument("--name", default=None, help="provider and application name (default: slug)")
    ak.add_argument("--group", default="mcp-agent")
    ak.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        metavar="NAME",
        help="an existing user to add to the group (repeatable)",
    )
    ak.add_argument(
        "--redirect-uri",
        dest="redirect_uris",
        action="append",
        default=[],
        metavar="MODE:URL",
        help="allowed callback, MODE strict or regex (repeatable; default: any "
        "loopback callback, as native MCP clients use)",
    )
    ak.add_argument(
        "--resource",
        default="http://127.0.0.1:8080/mcp",
        help="the MCP resource URL clients connect to",
    )
    _exchange_flags(
        ak,
        "create this confidential provider and application (slug) for token exchange "
        "(authentik >= 2026.8)",
        "the client id of the provider issuing the backend's tokens (their aud; created "
        "with that client id and application slug if missing)",
    )
    ak.add_argument(
        "--wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for start-up and blueprints (default 300)",
    )
    _common(ak)


def _exchange_flags(parser: argparse.ArgumentParser, client: str, audience: str) -> None:
    parser.add_argument(
        "--token-exchange-client",
        metavar="NAME",
        help=f"{client}; its secret is written beside the resources (mode 600) and the "
        "policy exchanges users' tokens for the --token-exchange-audience backend",
    )
    parser.add_argument(
        "--token-exchange-audience",
        metavar="CLIENT_ID",
        help=f"with --token-exchange-client: {audience}",
    )


def _mode(word: str) -> AuthorizationServerMode | str:
    """The mode `--mode` names; another word stays as it is, for `choices` to refuse in
    argparse's own words."""
    try:
        return AuthorizationServerMode(word)
    except ValueError:
        return word


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode",
        type=_mode,
        choices=[AuthorizationServerMode.BROKER.value, AuthorizationServerMode.FACADE.value],
        default="Broker",
        help="authorizationServerMode of the generated policy (default Broker: the gateway "
        "is the authorization server MCP clients see; Facade, the spec's layout, serves "
        f"only {FACADE_CLIENTS})",
    )
    parser.add_argument(
        "--backend",
        default="http://127.0.0.1:8000/mcp",
        help="the MCP server behind the gateway (for the GatewayBackend)",
    )
    parser.add_argument(
        "--output-dir",
        required=True,
        metavar="DIR",
        help="where to write the gateway resources (gateway.yaml)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="time limit of each HTTP request (default 30)",
    )
