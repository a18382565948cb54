"""`mcp-oauth-gateway idp keycloak|authentik`: arguments, secrets, output."""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from ..authorization_server_modes import FACADE_CLIENTS, AuthorizationServerMode
from ..provider_kinds import ProviderKind
from ..urls import shown_url
from . import authentik, exchange, keycloak, resources
from .flags import AUTHENTIK_TOKEN, KEYCLOAK_ADMIN_PASSWORD, KEYCLOAK_USER_PASSWORD
from .steps import Progress, StepError

EXIT_USAGE = 2


def _secret(env: str, from_stdin: bool, flag: str) -> str | None:
    if from_stdin:
        line = sys.stdin.readline().rstrip("\n")
        return line or None
    return os.environ.get(env) or None


Tool = Callable[[httpx.Client], resources.GatewayValues]


class _Usage(Exception):
    """A usage error: the message is printed and the exit code is 2."""


def _keycloak(args: argparse.Namespace) -> tuple[Tool, Progress]:
    password = _secret(KEYCLOAK_ADMIN_PASSWORD, args.password_stdin, "--password-stdin")
    if not password:
        raise _Usage(
            f"no admin password: set {KEYCLOAK_ADMIN_PASSWORD} or pass "
            "--password-stdin and write it to stdin"
        )
    if args.allow_anonymous_dcr and args.mode is AuthorizationServerMode.BROKER:
        raise _Usage(
            "--allow-anonymous-dcr opens Keycloak's registration to MCP clients, which only "
            "Facade mode uses: in Broker mode (the default) they register with the gateway. "
            "Drop the flag, or pass --mode Facade with it"
        )
    users = [(u.split(":", 1)[0], u.split(":", 1)[1] if ":" in u else None) for u in args.users]
    options = keycloak.KeycloakOptions(
        url=args.url,
        admin_user=args.admin_user,
        admin_password=password,
        resource=args.resource,
        users=users,
        user_password=os.environ.get(KEYCLOAK_USER_PASSWORD) or None,
        scope=args.scope,
        group=args.group,
        allow_anonymous_dcr=args.allow_anonymous_dcr,
        backend=args.backend,
        mode=args.mode,
        gateway_client_id=args.gateway_client_id,
        exchange=_exchange_options(args),
        realm=_realm_name(args.realm),
    )
    progress = Progress(ProviderKind.KEYCLOAK.flavour, len(keycloak.STEPS))
    return functools.partial(keycloak.provision, options, progress=progress), progress


def _realm_name(realm: str) -> str:
    # It becomes a path segment of every admin URL: nothing that could change the path.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", realm):
        raise _Usage(
            f"--realm {realm[:60]!r}: use letters, digits, '.', '_' and '-' (starting with a "
            "letter or digit, at most 100 characters)"
        )
    return realm


def _exchange_options(args: argparse.Namespace) -> exchange.ExchangeOptions | None:
    client, audience = args.token_exchange_client, args.token_exchange_audience
    if client is None and audience is None:
        return None
    if client is None or audience is None:
        raise _Usage(
            "--token-exchange-client and --token-exchange-audience go together: the client "
            "that exchanges users' tokens, and the backend's client id it exchanges them for"
        )
    return exchange.ExchangeOptions(client, audience, Path(args.output_dir) / exchange.SECRET_FILE)


def _authentik(args: argparse.Namespace) -> tuple[Tool, Progress]:
    token = _secret(AUTHENTIK_TOKEN, args.token_stdin, "--token-stdin")
    if not token:
        raise _Usage(
            f"no API token: set {AUTHENTIK_TOKEN} or pass --token-stdin and write it to stdin"
        )
    redirects = []
    for item in args.redirect_uris:
        mode, _, url = item.partition(":")
        if mode not in ("strict", "regex") or not url:
            raise _Usage(
                f"--redirect-uri {item!r}: write MODE:URL with MODE strict or "
                "regex, e.g. strict:http://127.0.0.1:33418/callback"
            )
        redirects.append((mode, url))
    options = authentik.AuthentikOptions(
        url=args.url,
        token=token,
        slug=args.slug,
        name=args.name or args.slug,
        group=args.group,
        exchange=_exchange_options(args),
        users=args.users,
        resource=args.resource,
        backend=args.backend,
        wait=args.wait,
        mode=args.mode,
        redirect_uris=_authentik_redirects(args, redirects),
    )
    progress = Progress(ProviderKind.AUTHENTIK.flavour, len(authentik.STEPS))
    return functools.partial(authentik.provision, options, progress=progress), progress


def _authentik_redirects(
    args: argparse.Namespace, given: list[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    if args.mode is not AuthorizationServerMode.BROKER:
        return tuple(given) or authentik.DEFAULT_REDIRECTS
    (callback,) = (url for _, url in authentik.broker_redirects(args.resource))
    if given and not any(_allows_callback(mode, url, callback) for mode, url in given):
        raise _Usage(
            f"--redirect-uri: in Broker mode (the default) authentik sends users back to the "
            f"gateway's callback {callback}, which none of the given URIs allows; add "
            f"--redirect-uri strict:{callback}, or pass --mode Facade"
        )
    return tuple(given) or authentik.broker_redirects(args.resource)


def _allows_callback(mode: str, url: str, callback: str) -> bool:
    # authentik compares strict URIs exactly and matches regex ones in full (Python `re`).
    if mode == "strict":
        return url == callback
    try:
        return re.fullmatch(url, callback) is not None
    except re.error as exc:
        raise _Usage(f"--redirect-uri regex:{url}: not a regular expression: {exc}") from None


_TOOLS: dict[ProviderKind, Callable[[argparse.Namespace], tuple[Tool, Progress]]] = {
    ProviderKind.KEYCLOAK: _keycloak,
    ProviderKind.AUTHENTIK: _authentik,
}


def run(args: argparse.Namespace) -> int:
    """Run the chosen provisioning tool."""
    try:
        tool, progress = _TOOLS[ProviderKind.from_flavour(args.idp)](args)
    except _Usage as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with httpx.Client(timeout=args.timeout, follow_redirects=False) as http:
            values = tool(http)
    except StepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:
        print(
            f"error: {progress.tool} step {progress.current}/{progress.total} "
            f"({progress.step}) failed: {type(exc).__name__}: {exc}{progress.left_behind()}",
            file=sys.stderr,
        )
        return 1
    target = resources.write(values, Path(args.output_dir))
    print(f"issuer: {shown_url(values.issuer)}")
    print(f"jwks_path: {values.jwks_path}")
    print(f"client_id: {values.client_id or '(registered by each MCP client through DCR)'}")
    print(f"resources: {target}")
    print(f"mode: {args.mode}")
    if args.mode is AuthorizationServerMode.FACADE:
        print(f"hint: Facade mode serves only {FACADE_CLIENTS}; --mode Broker serves them all")
    return 0
