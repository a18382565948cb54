"""`mcp-oauth-gateway idp authentik`: set up provider B (spec 4.3) through the API v3.

Why a thin httpx client rather than the generated `authentik-client`: that package is 19 MB of
generated code pinned to one server release, sync-only, and its strict enums fail against newer
servers (2026.8 renamed `GrantTypesEnum`). We need a dozen calls and exact control over the
start-up behaviour (503 + `Retry-After` while migrating, empty lookups until the worker has run,
400 field errors), which a plain client shows as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .resources import GatewayValues
from .steps import Progress, describe

SCOPES = ("openid", "profile", "email")
MANAGED = "goauthentik.io/providers/oauth2/scope-"
DEFAULT_REDIRECTS = (("regex", r"http://(127\.0\.0\.1|localhost)(:[0-9]+)?/.*"),)


def broker_redirects(resource: str) -> tuple[tuple[str, str], ...]:
    """In Broker mode only the gateway's callback talks to authentik."""
    return (("strict", resource.rstrip("/") + "/oauth/callback"),)
# A token authentik rejects right after start-up may just not be applied yet (the worker applies
# the bootstrap blueprint): keep trying for this long before calling it wrong.
TOKEN_GRACE = 30.0


@dataclass
class AuthentikOptions:
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
    mode: str = "Facade"


class AuthentikApi:
    """API v3 calls that wait out start-up within one bounded budget."""

    def __init__(self, http: httpx.Client, options: AuthentikOptions, progress: Progress,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
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
        headers = {"Authorization": f"Bearer {self.options.token}",
                   "Accept": "application/json"}
        while True:
            try:
                response = self.http.request(method, url, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                self.wait(f"{self.base} is not answering ({type(exc).__name__})", 2.0)
                continue
            if response.status_code == 503:
                retry = float(response.headers.get("Retry-After", "5") or 5)
                self.wait("authentik is starting (HTTP 503, migrations running)", retry)
                continue
            if response.status_code == 403 and "Token invalid" in response.text and \
                    self.clock() - self.started < TOKEN_GRACE:
                self.wait("the API token is rejected (403 Token invalid/expired); waiting in "
                          "case the worker has not applied the bootstrap blueprint yet (check "
                          "AUTHENTIK_TOKEN if this persists)", 2.0)
                continue
            if response.status_code == 403:
                raise self.progress.fail(f"{method} {path} was refused: {describe(response)}; "
                                         "check AUTHENTIK_TOKEN (an API token of an admin)")
            return response

    def wait(self, why: str, seconds: float) -> None:
        left = self.deadline - self.clock()
        if left <= 0:
            raise self.progress.fail(f"gave up after {self.options.wait:g}s: {why}")
        pause = max(0.2, min(seconds, left))
        self.progress.say(f"waiting {pause:.1f}s: {why} ({left:.0f}s left)")
        self.sleep(pause)

    def expect(self, response: httpx.Response, *ok: int) -> Any:
        """The JSON body when the status is one of `ok` (None for 204), else fail the step."""
        if response.status_code not in ok:
            raise self.progress.fail(f"{response.request.method} {response.request.url.path} "
                                     f"answered {describe(response)}")
        return None if response.status_code == 204 else response.json()

    def create(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        """POST a new object; a 400 stops the run with authentik's field errors."""
        response = self.call("POST", path, json=body)
        if response.status_code == 400:
            raise self.progress.fail(f"authentik rejected the {what}: {describe(response)}")
        return self.expect(response, 201)

    def results(self, path: str, **params: str) -> list[dict[str, Any]]:
        """The `results` of a paginated list."""
        return self.expect(self.call("GET", path, params=params), 200)["results"]


STEPS = ["API ready", "flows, key and scope mappings", "OAuth2 provider", "application", "group",
         "users"]


def _lookups(api: AuthentikApi) -> tuple[str, str, str, list[str]]:
    options = api.options
    while True:
        auth = api.results("/flows/instances/", slug=options.authorization_flow)
        invalidation = api.results("/flows/instances/", slug=options.invalidation_flow)
        keys = api.results("/crypto/certificatekeypairs/", has_key="true")
        mappings = [m for m in api.results("/propertymappings/provider/scope/", page_size="100")
                    if m.get("scope_name") in SCOPES and
                    str(m.get("managed") or "").startswith(MANAGED)]
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
            return auth[0]["pk"], invalidation[0]["pk"], keys[0]["pk"], \
                [m["pk"] for m in mappings]
        api.wait("the worker has not created " + ", ".join(missing) + " yet", 2.0)


def provision(options: AuthentikOptions, http: httpx.Client, progress: Progress,
              api: AuthentikApi | None = None) -> GatewayValues:
    """Run spec 4.3 in order, idempotently; returns what the gateway needs."""
    api = api or AuthentikApi(http, options, progress)

    progress.begin("API ready")
    progress.say(f"waiting for {api.base}/api/v3 to answer (up to {options.wait:g}s)")
    api.results("/flows/instances/", slug=options.authorization_flow)
    progress.say("ok")

    progress.begin("flows, key and scope mappings")
    auth_flow, invalidation_flow, key, mappings = _lookups(api)
    progress.say(f"authorization flow {auth_flow}, invalidation flow {invalidation_flow}, "
                 f"signing key {key}, scope mappings {len(mappings)}")

    progress.begin("OAuth2 provider")
    existing = api.results("/providers/oauth2/", name=options.name)
    if existing:
        provider = existing[0]
        have = [(u.get("matching_mode"), u.get("url")) for u in provider.get("redirect_uris", [])]
        missing = [pair for pair in options.redirect_uris if pair not in have]
        if missing:
            entries = provider.get("redirect_uris", []) + [
                {"matching_mode": mode, "url": url} for mode, url in missing]
            response = api.call("PATCH", f"/providers/oauth2/{provider['pk']}/",
                                json={"redirect_uris": entries})
            if response.status_code == 400:
                raise progress.fail(f"authentik rejected the redirect URIs: "
                                    f"{describe(response)}")
            provider = api.expect(response, 200)
            progress.say(f"{options.name!r} exists (pk {provider['pk']}); added redirect URIs "
                         f"{[url for _, url in missing]}")
        else:
            progress.say(f"{options.name!r} exists (pk {provider['pk']}); unchanged")
    else:
        body = {"name": options.name, "authorization_flow": auth_flow,
                "invalidation_flow": invalidation_flow, "client_type": "public",
                "grant_types": ["authorization_code", "refresh_token", "client_credentials"],
                "redirect_uris": [{"matching_mode": mode, "url": url}
                                  for mode, url in options.redirect_uris],
                "sub_mode": "user_username", "include_claims_in_id_token": True,
                "signing_key": key, "property_mappings": mappings}
        provider = api.create("/providers/oauth2/", body, "provider")
        progress.say(f"created {options.name!r} (pk {provider['pk']})")
    client_id = provider.get("client_id")
    if not client_id:
        raise progress.fail(f"provider {options.name!r} has no client_id: "
                            f"{sorted(provider)}")

    progress.begin("application")
    apps = api.results("/core/applications/", slug=options.slug)
    if apps:
        if apps[0].get("provider") != provider["pk"]:
            raise progress.fail(f"application {options.slug!r} exists but uses provider "
                                f"{apps[0].get('provider')}, not {provider['pk']}")
        progress.say(f"{options.slug!r} exists; unchanged")
    else:
        api.create("/core/applications/", {"name": options.name, "slug": options.slug,
                                           "provider": provider["pk"]}, "application")
        progress.say(f"created {options.slug!r}")

    progress.begin("group")
    groups = api.results("/core/groups/", name=options.group)
    if groups:
        group = groups[0]
        progress.say(f"{options.group!r} exists; unchanged")
    else:
        group = api.create("/core/groups/", {"name": options.group}, "group")
        progress.say(f"created {options.group!r}")

    progress.begin("users")
    members = set(group.get("users", []))
    for username in options.users:
        found = api.results("/core/users/", username=username)
        if not found:
            raise progress.fail(f"user {username!r} does not exist in authentik; create it "
                                "first (Directory → Users) or drop --user")
        pk = found[0]["pk"]
        if pk in members:
            progress.say(f"{username!r} is already in {options.group!r}; unchanged")
            continue
        api.expect(api.call("POST", f"/core/groups/{group['pk']}/add_user/", json={"pk": pk}),
                   204)
        progress.say(f"added {username!r} to {options.group!r}")
    if not options.users:
        progress.say("no --user given; nothing to do")

    issuer = f"{api.base}/application/o/{options.slug}/"
    return GatewayValues(provider="ProviderB", idp_url=api.base, issuer=issuer,
                         jwks_path=f"/application/o/{options.slug}/jwks/",
                         audiences=(client_id,), client_id=client_id,
                         resource=options.resource, backend=options.backend,
                         group=options.group, mode=options.mode)
