"""`idp authentik --token-exchange-client NAME --token-exchange-audience BACKEND`: what token
exchange (authentik ≥ 2026.8) needs, as docs/token-exchange.md §2.5 records it.

- NAME is a confidential OAuth2 provider, bound to an application of that slug, with the
  token-exchange grant in `grant_types` and the users' provider in `jwt_federation_providers`
  (authentik only exchanges tokens issued by a provider the requester trusts); its secret is
  generated here and written to a file beside the resources (never printed);
- BACKEND is the client id of the provider that issues the exchanged tokens (their `iss`, key
  and `aud`): found by client id, or created with that client id and an application of that
  slug; it lists NAME in its `jwt_federation_providers` (the target trusting the requester);
- the backend's provider gets the users' `sub_mode`, so the exchanged token names the same
  `sub` as the caller's."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from ..urls import shown_url
from .exchange import ExchangeOptions, ExchangeValues, write_secret
from .steps import Progress, describe

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
# authentik intersects the requested scopes with the issuing provider's mappings and grants
# none when `scope` is omitted (docs/token-exchange.md §2.2).
SCOPE = "openid profile"


class Api(Protocol):
    """The API v3 calls this needs (`authentik.AuthentikApi`)."""

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call."""
        ...

    def expect(self, response: Any, *ok: int) -> Any:
        """The JSON body when the status is one of `ok`."""
        ...

    def create(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        """POST a new object."""
        ...

    def matching(self, path: str, field: str, value: str, **params: str) -> list[dict[str, Any]]:
        """Listed objects whose `field` is `value`."""
        ...


@dataclass(frozen=True)
class Template:
    """What the users' provider was made with, reused for the new providers."""

    users_provider: dict[str, Any]
    authorization_flow: str
    invalidation_flow: str
    signing_key: str
    mappings: list[str]


def _new(template: Template, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "authorization_flow": template.authorization_flow,
        "invalidation_flow": template.invalidation_flow,
        "signing_key": template.signing_key,
        "property_mappings": template.mappings,
        "redirect_uris": [],
        "sub_mode": template.users_provider.get("sub_mode", "user_username"),
        "client_type": "confidential",
        **fields,
    }


def _bind(api: Api, provider: dict[str, Any], slug: str, progress: Progress) -> None:
    """Bind the provider to an application of `slug` unless it has one (authentik refuses to
    exchange for or by a provider without an application)."""
    if provider.get("assigned_application_slug"):
        return
    api.create(
        "/core/applications/",
        {"name": provider["name"], "slug": slug, "provider": provider["pk"]},
        "application",
    )
    progress.record(f"created application {slug!r}")
    progress.say(f"created application {slug!r} for provider {provider['name']!r}")


def _add(
    api: Api, provider: dict[str, Any], wanted: dict[str, list[Any]], progress: Progress
) -> dict[str, Any]:
    """PATCH list fields to include `wanted`, keeping what they hold; unchanged if they do."""
    changes: dict[str, list[Any]] = {}
    for field, values in wanted.items():
        have = list(provider.get(field) or [])
        missing = [v for v in values if v not in have]
        if missing:
            changes[field] = have + missing
    if not changes:
        progress.say(f"provider {provider['name']!r} already set up for exchange; unchanged")
        return provider
    response = api.call("PATCH", f"/providers/oauth2/{provider['pk']}/", json=changes)
    if response.status_code == 400:
        raise progress.fail(f"authentik rejected {sorted(changes)}: {describe(response)}")
    changed: dict[str, Any] = api.expect(response, 200)
    progress.record(f"added {sorted(changes)} to provider {changed['pk']}")
    progress.say(f"provider {changed['name']!r}: added {', '.join(sorted(changes))}")
    return changed


def _exchange_provider(
    api: Api, options: ExchangeOptions, template: Template, progress: Progress
) -> dict[str, Any]:
    trusts = {
        "grant_types": [GRANT],
        "jwt_federation_providers": [template.users_provider["pk"]],
    }
    found = api.matching("/providers/oauth2/", "name", options.client)
    if found:
        provider = found[0]
        if provider.get("client_type") != "confidential":
            raise progress.fail(
                f"provider {options.client!r} exists but is public; the gateway authenticates "
                "with a secret: make it confidential, or choose another --token-exchange-client"
            )
        if not options.secret_file.exists():
            raise progress.fail(
                f"provider {options.client!r} exists but its client secret is not in "
                f"{options.secret_file}; write it there, or choose another "
                "--token-exchange-client"
            )
        return _add(api, provider, trusts, progress)
    secret = secrets.token_urlsafe(48)
    provider = api.create(
        "/providers/oauth2/",
        _new(template, options.client, client_secret=secret, **trusts),
        "token exchange provider",
    )
    write_secret(options.secret_file, secret)
    progress.record(f"created provider {provider['pk']} ({options.client!r})")
    progress.say(
        f"created confidential provider {options.client!r} (client id "
        f"{provider['client_id']}) with token exchange; secret written to "
        f"{options.secret_file} (mode 600)"
    )
    return provider


def _backend_provider(
    api: Api, options: ExchangeOptions, template: Template, requester: int, progress: Progress
) -> dict[str, Any]:
    found = api.matching("/providers/oauth2/", "client_id", options.audience)
    if found:
        return _add(api, found[0], {"jwt_federation_providers": [requester]}, progress)
    provider = api.create(
        "/providers/oauth2/",
        _new(
            template,
            options.audience,
            client_id=options.audience,
            jwt_federation_providers=[requester],
        ),
        "backend provider",
    )
    progress.record(f"created provider {provider['pk']} ({options.audience!r})")
    progress.say(f"created provider {options.audience!r} issuing the backend's tokens")
    return provider


def provision(
    api: Api, base: str, options: ExchangeOptions, template: Template, progress: Progress
) -> ExchangeValues:
    """Make token exchange from users' tokens to the backend's provider possible."""
    requester = _exchange_provider(api, options, template, progress)
    _bind(api, requester, options.client, progress)
    backend = _backend_provider(api, options, template, requester["pk"], progress)
    _bind(api, backend, options.audience, progress)
    slug = backend.get("assigned_application_slug") or options.audience
    progress.say(
        f"the backend receives tokens with iss {shown_url(f'{base}/application/o/{slug}/')} "
        f"and aud {options.audience!r}; it should accept those"
    )
    return ExchangeValues(requester["client_id"], options.audience, SCOPE, options.secret_file)
