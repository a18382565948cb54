"""`mcp-oauth-gateway idp authentik`: set up provider B (spec 4.3) through the API v3.

Why a thin httpx client rather than the generated `authentik-client`: that package is 19 MB of
generated code pinned to one server release, sync-only, and its strict enums fail against newer
servers (2026.8 renamed `GrantTypesEnum`). We need a dozen calls and exact control over the
start-up behaviour (503 + `Retry-After` while migrating, empty lookups until the worker has run,
400 field errors), which a plain client shows as it is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..authorization_server_modes import AuthorizationServerMode
from ..provider_kinds import ProviderKind
from ..urls import shown_url
from . import authentik_exchange
from .exchange import ExchangeOptions, ExchangeValues, for_policy
from .resources import GatewayValues
from .steps import Progress, Step, describe, names, run_steps

SCOPES = ("openid", "profile", "email")
MANAGED = "goauthentik.io/providers/oauth2/scope-"
DEFAULT_REDIRECTS = (("regex", r"http://(127\.0\.0\.1|localhost)(:[0-9]+)?/.*"),)
# What authentik accepts as an application slug (`Application.slug`, `reserved_slugs`); checked
# before anything is created so a slug it would refuse cannot leave a provider without its
# application.
SLUG = re.compile(r"[-a-zA-Z0-9_]+")
RESERVED_SLUGS = frozenset({"authorize", "token", "device", "userinfo", "introspect", "revoke"})


def broker_redirects(resource: str) -> tuple[tuple[str, str], ...]:
    """In Broker mode only the gateway's callback talks to authentik."""
    return (("strict", resource.rstrip("/") + "/oauth/callback"),)


# A token authentik rejects right after start-up may just not be applied yet (the worker applies
# the bootstrap blueprint): keep trying for this long before calling it wrong.
TOKEN_GRACE = 30.0


@dataclass
class AuthentikOptions:
    """What to provision in authentik, and where (the API token included)."""

    url: str
    token: str
    slug: str = "mcp"
    name: str = "mcp"
    group: str = "mcp-agent"
    users: list[str] = field(default_factory=list)
    authorization_flow: str = "default-provider-authorization-implicit-consent"
    invalidation_flow: str = "default-invalidation-flow"
    redirect_uris: tuple[tuple[str, str], ...] = DEFAULT_REDIRECTS
    resource: str = "http://127.0.0.1:8080/mcp"
    backend: str = "http://127.0.0.1:8000/mcp"
    wait: float = 300.0
    mode: AuthorizationServerMode = AuthorizationServerMode.FACADE
    # --token-exchange-client / --token-exchange-audience (docs/token-exchange.md §2.5)
    exchange: ExchangeOptions | None = None


class AuthentikApi:
    """API v3 calls that wait out start-up within one bounded budget."""

    def __init__(
        self,
        http: httpx.Client,
        options: AuthentikOptions,
        progress: Progress,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.http = http
        self.options = options
        self.progress = progress
        self.base = options.url.rstrip("/")
        self.clock = clock
        self.sleep = sleep
        self.deadline = clock() + options.wait
        self.started = clock()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; 503 (starting), connection failures and early 403s are waited out."""
        url = f"{self.base}/api/v3{path}"
        headers = {"Authorization": f"Bearer {self.options.token}", "Accept": "application/json"}
        while True:
            try:
                response = self.http.request(method, url, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                self.wait(f"{shown_url(self.base)} is not answering ({type(exc).__name__})", 2.0)
                continue
            if response.status_code == 503:
                retry = float(response.headers.get("Retry-After", "5") or 5)
                self.wait("authentik is starting (HTTP 503, migrations running)", retry)
                continue
            if (
                response.status_code == 403
                and "Token invalid" in response.text
                and self.clock() - self.started < TOKEN_GRACE
            ):
                self.wait(
                    "the API token is rejected (403 Token invalid/expired); waiting in "
                    "case the worker has not applied the bootstrap blueprint yet (check "
                    "AUTHENTIK_TOKEN if this persists)",
                    2.0,
                )
                continue
            if response.status_code == 403:
                raise self.progress.fail(
                    f"{method} {path} was refused: {describe(response)}; "
                    "check AUTHENTIK_TOKEN (an API token of an admin)"
                )
            return response

    def wait(self, why: str, seconds: float) -> None:
        """Pause within the run's time budget, saying why; fail once the budget is spent."""
        left = self.deadline - self.clock()
        if left <= 0:
            raise self.progress.fail(f"gave up after {self.options.wait:g}s: {why}")
        pause = max(0.2, min(seconds, left))
        self.progress.say(f"waiting {pause:.1f}s: {why} ({left:.0f}s left)")
        self.sleep(pause)

    def expect(self, response: httpx.Response, *ok: int) -> Any:
        """The JSON body when the status is one of `ok` (None for 204), else fail the step."""
        if response.status_code not in ok:
            raise self.progress.fail(
                f"{response.request.method} {response.request.url.path} "
                f"answered {describe(response)}"
            )
        return None if response.status_code == 204 else response.json()

    def create(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        """POST a new object; a 400 stops the run with authentik's field errors."""
        response = self.call("POST", path, json=body)
        if response.status_code == 400:
            raise self.progress.fail(f"authentik rejected the {what}: {describe(response)}")
        created: dict[str, Any] = self.expect(response, 201)
        return created

    def results(self, path: str, **params: str) -> list[dict[str, Any]]:
        """The `results` of a paginated list (first page)."""
        found: list[dict[str, Any]] = self.expect(self.call("GET", path, params=params), 200)[
            "results"
        ]
        return found

    def matching(self, path: str, field: str, value: str, **params: str) -> list[dict[str, Any]]:
        """The listed objects whose `field` is `value`, filtered by authentik with `field=value`
        and checked again here: a list that ignored its filter must not yield another object."""
        return [o for o in self.results(path, **{field: value}, **params) if o.get(field) == value]

    def every(self, path: str, **params: str) -> list[dict[str, Any]]:
        """The `results` of every page of a paginated list."""
        found: list[dict[str, Any]] = []
        page = 1
        while page:
            query = {**params, "page": str(page)} if page > 1 else params
            body = self.expect(self.call("GET", path, params=query), 200)
            found.extend(body["results"])
            page = body.get("pagination", {}).get("next") or 0
        return found

    def detail(self, path: str) -> dict[str, Any] | None:
        """One object by its detail URL; None when authentik answers 404."""
        response = self.call("GET", path)
        return None if response.status_code == 404 else self.expect(response, 200)


@dataclass
class _Run:
    """What one provisioning run has found or made so far, step by step."""

    api: AuthentikApi
    options: AuthentikOptions
    progress: Progress
    auth_flow: str = ""
    invalidation_flow: str = ""
    signing_key: str = ""
    mappings: list[str] = field(default_factory=list)
    provider: dict[str, Any] = field(default_factory=dict)
    application: dict[str, Any] | None = None
    group: dict[str, Any] = field(default_factory=dict)
    exchange: ExchangeValues | None = None


def _api_ready(run: _Run) -> None:
    api = shown_url(f"{run.api.base}/api/v3")
    run.progress.say(f"waiting for {api} to answer (up to {run.options.wait:g}s)")
    run.api.matching("/flows/instances/", "slug", run.options.authorization_flow)
    run.progress.say("ok")


def _missing_prerequisites(run: _Run) -> list[str]:
    """Look up flows, key and mappings; name what the worker has not created yet."""
    api, options = run.api, run.options
    auth = api.matching("/flows/instances/", "slug", options.authorization_flow)
    invalidation = api.matching("/flows/instances/", "slug", options.invalidation_flow)
    keys = [
        k
        for k in api.results("/crypto/certificatekeypairs/", has_key="true")
        if k.get("private_key_available", True)
    ]
    # The `managed` filter is no use here: authentik validates its values against the mappings
    # that exist, so it answers 400 until the worker has made them. Read them all instead.
    mappings = [
        m
        for m in api.every("/propertymappings/provider/scope/", page_size="100")
        if m.get("scope_name") in SCOPES and str(m.get("managed") or "").startswith(MANAGED)
    ]
    missing = []
    if not auth:
        missing.append(f"flow {options.authorization_flow}")
    if not invalidation:
        missing.append(f"flow {options.invalidation_flow}")
    if not keys:
        missing.append("a certificate key pair with a private key")
    if len(mappings) != len(SCOPES):
        found = sorted(m["scope_name"] for m in mappings)
        missing.append(f"exactly 3 scope mappings {list(SCOPES)} (found {found})")
    if not missing:
        run.auth_flow, run.invalidation_flow = auth[0]["pk"], invalidation[0]["pk"]
        run.signing_key, run.mappings = keys[0]["pk"], [m["pk"] for m in mappings]
    return missing


def _prerequisites(run: _Run) -> None:
    while missing := _missing_prerequisites(run):
        run.api.wait("the worker has not created " + ", ".join(missing) + " yet", 2.0)
    run.progress.say(
        f"authorization flow {run.auth_flow}, invalidation flow "
        f"{run.invalidation_flow}, signing key {run.signing_key}, "
        f"scope mappings {len(run.mappings)}"
    )


def _check_slugs(run: _Run) -> None:
    """The application slugs this run may create: each one authentik accepts, all distinct."""
    nothing = "nothing was created"
    exchange = run.options.exchange
    slugs = [("slug", run.options.slug)]
    if exchange is not None:
        slugs += [
            ("--token-exchange-client", exchange.client),
            ("--token-exchange-audience", exchange.audience),
        ]
    for what, slug in slugs:
        if not SLUG.fullmatch(slug):
            raise run.progress.fail(
                f"the {what} {slug!r} is not one authentik accepts as an application slug "
                f"(letters, digits, '-' and '_'); {nothing}"
            )
        if slug in RESERVED_SLUGS:
            raise run.progress.fail(f"the {what} {slug!r} is reserved by authentik; {nothing}")
    if len({slug for _, slug in slugs}) < len(slugs):
        raise run.progress.fail(
            "--slug, --token-exchange-client and --token-exchange-audience must differ "
            f"(each becomes an application); {nothing}"
        )


def _check_before_writing(run: _Run, provider: dict[str, Any] | None) -> None:
    """Refuse, before anything is created, what would stop the application step later."""
    options, slug = run.options, run.options.slug
    nothing = "nothing was created"
    _check_slugs(run)
    app = run.application
    if app is not None and (provider is None or app.get("provider") != provider["pk"]):
        ours = f"{provider['pk']}" if provider else f"a provider named {options.name!r}"
        raise run.progress.fail(
            f"application {slug!r} exists but uses provider "
            f"{app.get('provider')}, not {ours}; {nothing}: pass the "
            "--name of its provider or another --slug"
        )
    bound = (provider or {}).get("assigned_application_slug")
    if provider is not None and bound not in (None, slug):
        raise run.progress.fail(
            f"provider {options.name!r} (pk {provider['pk']}) is already "
            f"used by application {bound!r}; {nothing}: pass another "
            "--name or --slug"
        )


def _new_provider(run: _Run) -> dict[str, Any]:
    options = run.options
    body = {
        "name": options.name,
        "authorization_flow": run.auth_flow,
        "invalidation_flow": run.invalidation_flow,
        "client_type": "public",
        "grant_types": ["authorization_code", "refresh_token", "client_credentials"],
        "redirect_uris": [
            {"matching_mode": mode, "url": url} for mode, url in options.redirect_uris
        ],
        "sub_mode": "user_username",
        "include_claims_in_id_token": True,
        "signing_key": run.signing_key,
        "property_mappings": run.mappings,
    }
    provider = run.api.create("/providers/oauth2/", body, "provider")
    run.progress.record(f"created provider {provider['pk']} ({options.name!r})")
    run.progress.say(f"created {options.name!r} (pk {provider['pk']})")
    return provider


def _with_redirects(run: _Run, provider: dict[str, Any]) -> dict[str, Any]:
    """The existing provider, with the redirect URIs it lacks added (kept: the ones it has)."""
    options = run.options
    have = [(u.get("matching_mode"), u.get("url")) for u in provider.get("redirect_uris", [])]
    missing = [pair for pair in options.redirect_uris if pair not in have]
    if not missing:
        run.progress.say(f"{options.name!r} exists (pk {provider['pk']}); unchanged")
        return provider
    entries = provider.get("redirect_uris", []) + [
        {"matching_mode": mode, "url": url} for mode, url in missing
    ]
    response = run.api.call(
        "PATCH", f"/providers/oauth2/{provider['pk']}/", json={"redirect_uris": entries}
    )
    if response.status_code == 400:
        raise run.progress.fail(f"authentik rejected the redirect URIs: {describe(response)}")
    changed: dict[str, Any] = run.api.expect(response, 200)
    urls = [url for _, url in missing]
    run.progress.record(f"added redirect URIs {urls} to provider {changed['pk']}")
    run.progress.say(f"{options.name!r} exists (pk {changed['pk']}); added redirect URIs {urls}")
    return changed


def _provider(run: _Run) -> None:
    options = run.options
    existing = run.api.matching("/providers/oauth2/", "name", options.name)
    # By its detail URL, not `?slug=`: authentik's application list answers from a per-user
    # cache of whole pages that ignores filters (real-authentik.md), so a filtered list can
    # return another application. The detail view answers 200 or 404 from the database.
    run.application = (
        run.api.detail(f"/core/applications/{options.slug}/")
        if SLUG.fullmatch(options.slug)
        else None
    )  # (a slug it refuses is refused below)
    _check_before_writing(run, existing[0] if existing else None)
    run.provider = _with_redirects(run, existing[0]) if existing else _new_provider(run)
    if not run.provider.get("client_id"):
        raise run.progress.fail(
            f"provider {options.name!r} has no client_id: {sorted(run.provider)}"
        )


def _application(run: _Run) -> None:
    options = run.options
    if run.application is not None:
        run.progress.say(f"{options.slug!r} exists; unchanged")
        return
    run.api.create(
        "/core/applications/",
        {"name": options.name, "slug": options.slug, "provider": run.provider["pk"]},
        "application",
    )
    run.progress.record(f"created application {options.slug!r}")
    run.progress.say(f"created {options.slug!r}")


def _group(run: _Run) -> None:
    options = run.options
    groups = run.api.matching("/core/groups/", "name", options.group)
    if groups:
        run.group = groups[0]
        run.progress.say(f"{options.group!r} exists; unchanged")
        return
    run.group = run.api.create("/core/groups/", {"name": options.group}, "group")
    run.progress.record(f"created group {options.group!r}")
    run.progress.say(f"created {options.group!r}")


def _users(run: _Run) -> None:
    api, options, progress = run.api, run.options, run.progress
    members = set(run.group.get("users", []))
    for username in options.users:
        found = api.matching("/core/users/", "username", username)
        if not found:
            raise progress.fail(
                f"user {username!r} does not exist in authentik; create it "
                "first (Directory → Users) or drop --user"
            )
        pk = found[0]["pk"]
        if pk in members:
            progress.say(f"{username!r} is already in {options.group!r}; unchanged")
            continue
        api.expect(
            api.call("POST", f"/core/groups/{run.group['pk']}/add_user/", json={"pk": pk}), 204
        )
        progress.record(f"added {username!r} to {options.group!r}")
        progress.say(f"added {username!r} to {options.group!r}")
    if not options.users:
        progress.say("no --user given; nothing to do")


def _token_exchange(run: _Run) -> None:
    options = run.options.exchange
    if options is None:
        run.progress.say("not asked for (--token-exchange-client)")
        return
    template = authentik_exchange.Template(
        run.provider, run.auth_flow, run.invalidation_flow, run.signing_key, run.mappings
    )
    run.exchange = authentik_exchange.provision(
        run.api, run.api.base, options, template, run.progress
    )


_STEPS: tuple[Step[_Run], ...] = (
    Step("API ready", _api_ready),
    Step("flows, key and scope mappings", _prerequisites),
    Step("OAuth2 provider", _provider),
    Step("application", _application),
    Step("group", _group),
    Step("users", _users),
    Step("token exchange", _token_exchange),
)
STEPS = names(_STEPS)


def provision(
    options: AuthentikOptions,
    http: httpx.Client,
    progress: Progress,
    api: AuthentikApi | None = None,
) -> GatewayValues:
    """Run spec 4.3 in order, idempotently; returns what the gateway needs."""
    run = _Run(api or AuthentikApi(http, options, progress), options, progress)
    run_steps(_STEPS, run, progress)
    client_id = run.provider["client_id"]
    base = run.api.base
    return GatewayValues(
        provider=ProviderKind.AUTHENTIK,
        idp_url=base,
        issuer=f"{base}/application/o/{options.slug}/",
        jwks_path=f"/application/o/{options.slug}/jwks/",
        audiences=(client_id,),
        client_id=client_id,
        resource=options.resource,
        backend=options.backend,
        group=options.group,
        mode=options.mode,
        exchange=for_policy(run.exchange),
    )


__all__ = ["STEPS", "AuthentikApi", "AuthentikOptions", "broker_redirects", "provision"]
