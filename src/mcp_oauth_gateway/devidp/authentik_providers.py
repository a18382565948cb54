"""OAuth2/OpenID providers in authentik's API (`/providers/oauth2/`): list, read, create with
authentik's field validation (DRF's messages, word for word), and the partial update the
provisioning tool sends (redirect URIs, grant types, federation)."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from . import authentik_exchange
from .authentik_drf import FieldErrors, not_found, paginated, read_body
from .authentik_state import AuthentikState, generate_id
from .oidc import json_response
from .store import Record

GRANT_TYPES = frozenset(
    {
        "authorization_code",
        "implicit",
        "hybrid",
        "refresh_token",
        "client_credentials",
        "password",
        "urn:ietf:params:oauth:grant-type:device_code",
        authentik_exchange.GRANT,
    }
)
# Token exchange is off unless a provider lists it (authentik 2026.8).
DEFAULT_GRANT_TYPES = GRANT_TYPES - {authentik_exchange.GRANT}
SUB_MODES = frozenset(
    {"hashed_user_id", "user_id", "user_uuid", "user_username", "user_email", "user_upn"}
)
# What the list of applications shows of each one's provider.
_BRIEF = (
    "pk",
    "name",
    "authentication_flow",
    "authorization_flow",
    "invalidation_flow",
    "property_mappings",
    "component",
    "assigned_application_slug",
    "assigned_application_name",
    "assigned_backchannel_application_slug",
    "assigned_backchannel_application_name",
    "verbose_name",
    "verbose_name_plural",
    "meta_model_name",
)


def provider_rep(state: AuthentikState, provider: Record) -> Record:
    """A provider as `OAuth2ProviderSerializer` shows it."""
    application = state.application_of(provider)
    return {
        **{k: v for k, v in provider.items() if k != "created"},
        "component": "ak-provider-oauth2-form",
        "assigned_application_slug": application["slug"] if application else None,
        "assigned_application_name": application["name"] if application else None,
        "assigned_backchannel_application_slug": None,
        "assigned_backchannel_application_name": None,
        "verbose_name": "OAuth2/OpenID Provider",
        "verbose_name_plural": "OAuth2/OpenID Providers",
        "meta_model_name": "authentik_providers_oauth2.oauth2provider",
    }


def provider_brief(state: AuthentikState, provider: Record) -> Record:
    """A provider as an application's `provider_obj` shows it."""
    rep = provider_rep(state, provider)
    return {k: rep.get(k) for k in _BRIEF}


def redirect_entries(value: Any) -> list[Record]:
    """`redirect_uris`, checked (FieldErrors): each a matching mode and a URL or regex."""
    errors = []
    entries = value if isinstance(value, list) else []
    if not isinstance(value, list):
        errors.append('Expected a list of items but got type "str".')
    for entry in entries:
        if (
            not isinstance(entry, dict)
            or entry.get("matching_mode") not in ("strict", "regex")
            or not isinstance(entry.get("url"), str)
        ):
            errors.append("Each redirect URI needs matching_mode (strict|regex) and url.")
            continue
        if entry["matching_mode"] == "regex":
            try:
                re.compile(entry["url"])
            except re.error:
                errors.append(f"Invalid Regex Pattern: {entry['url']}")
    if errors:
        raise FieldErrors({"redirect_uris": errors})
    return [
        {
            "matching_mode": e["matching_mode"],
            "url": e["url"],
            "redirect_uri_type": e.get("redirect_uri_type", "authorization"),
        }
        for e in entries
    ]


def _grant_types(body: Record, errors: dict[str, list[str]]) -> Any:
    grants = body.get("grant_types", sorted(DEFAULT_GRANT_TYPES))
    if not isinstance(grants, list) or any(g not in GRANT_TYPES for g in grants):
        errors["grant_types"] = [
            f'"{g}" is not a valid choice.'
            for g in (grants if isinstance(grants, list) else [grants])
            if g not in GRANT_TYPES
        ]
    return grants


class ProvidersApi:
    """The views of `/providers/oauth2/`."""

    def __init__(self, state: AuthentikState):
        self.state = state
        self.store = state.store

    def _by_pk(self, pk: str) -> Record | None:
        return next((p for p in self.store.collection("ak_providers") if str(p["pk"]) == pk), None)

    async def list_providers(self, request: Request) -> Response:
        q = request.query_params
        items = [
            p
            for p in self.store.collection("ak_providers")
            if ("name" not in q or p["name"] == q["name"])
            and ("client_id" not in q or p["client_id"] == q["client_id"])
        ]
        return paginated([provider_rep(self.state, p) for p in items], request)

    async def get_provider(self, request: Request, pk: str) -> Response:
        provider = self._by_pk(pk)
        if provider is None:
            return not_found("OAuth2Provider")
        return json_response(provider_rep(self.state, provider))

    async def patch_provider(self, request: Request, pk: str) -> Response:
        provider = self._by_pk(pk)
        if provider is None:
            return not_found("OAuth2Provider")
        body = await read_body(request)
        unsupported = sorted(
            set(body) - {"redirect_uris", "grant_types", "jwt_federation_providers"}
        )
        if unsupported:
            # The dev IdP only emulates the partial update the provisioning tool sends.
            raise FieldErrors(
                {k: ["The dev identity provider cannot change this field."] for k in unsupported}
            )
        if "redirect_uris" in body:
            provider["redirect_uris"] = redirect_entries(body.get("redirect_uris"))
        errors: dict[str, list[str]] = {}
        if "grant_types" in body:
            provider["grant_types"] = self._choices(
                {"grant_types": body["grant_types"], "client_id": "-"}, errors
            )["grant_types"]
            errors.pop("client_id", None)
        if "jwt_federation_providers" in body:
            provider["jwt_federation_providers"] = self._federation(body, errors)
        if errors:
            raise FieldErrors(errors)
        self.store.save()
        return json_response(provider_rep(self.state, provider))

    async def create_provider(self, request: Request) -> Response:
        body = await read_body(request)
        errors: dict[str, list[str]] = {}
        fields = {**self._relations(body, errors), **self._choices(body, errors)}
        if errors:
            raise FieldErrors(errors)
        providers = self.store.collection("ak_providers")
        provider = {
            "pk": max((p["pk"] for p in providers), default=0) + 1,
            "name": fields["name"],
            "authentication_flow": body.get("authentication_flow"),
            "authorization_flow": fields["authorization_flow"],
            "invalidation_flow": fields["invalidation_flow"],
            "property_mappings": fields["property_mappings"],
            "client_type": fields["client_type"],
            "grant_types": fields["grant_types"],
            "client_id": fields["client_id"],
            "client_secret": body.get("client_secret") or generate_id(128),
            "access_code_validity": "minutes=1",
            "access_token_validity": "hours=1",
            "refresh_token_validity": "days=30",
            "refresh_token_threshold": "seconds=0",
            "include_claims_in_id_token": bool(body.get("include_claims_in_id_token", True)),
            "signing_key": fields["signing_key"],
            "encryption_key": None,
            "redirect_uris": fields["redirect_uris"],
            "logout_uri": "",
            "logout_method": "backchannel",
            "sub_mode": fields["sub_mode"],
            "issuer_mode": "per_provider",
            "jwt_federation_sources": [],
            "jwt_federation_providers": self._federation(body, errors),
        }
        if errors:
            raise FieldErrors(errors)
        providers.append(provider)
        self.store.save()
        return json_response(provider_rep(self.state, provider), 201)

    def _federation(self, body: Record, errors: dict[str, list[str]]) -> list[int]:
        """`jwt_federation_providers`: pks of existing OAuth2 providers."""
        value = body.get("jwt_federation_providers", [])
        if not isinstance(value, list):
            errors["jwt_federation_providers"] = ['Expected a list of items but got type "str".']
            return []
        missing = [pk for pk in value if self.state.find("ak_providers", pk=pk) is None]
        if missing:
            errors["jwt_federation_providers"] = [
                f'Invalid pk "{pk}" - object does not exist.' for pk in missing
            ]
        return [pk for pk in value if pk not in missing]

    def _related(
        self, errors: dict[str, list[str]], field: str, value: Any, collection: str, nullable: bool
    ) -> Any:
        if value is None or value == "":
            if not nullable:
                errors[field] = ["This field may not be null."]
            return None
        if not isinstance(value, str):
            errors[field] = [f"Incorrect type. Expected pk value, received {type(value).__name__}."]
            return None
        try:
            uuid.UUID(value)
        except ValueError:
            errors[field] = [f"“{value}” is not a valid UUID."]
            return None
        if self.state.find(collection, pk=value) is None:
            errors[field] = [f'Invalid pk "{value}" - object does not exist.']
            return None
        return value

    def _relations(self, body: Record, errors: dict[str, list[str]]) -> Record:
        """Name, flows, signing key and property mappings of a new provider, checked."""
        for field in ("name", "authorization_flow", "invalidation_flow", "redirect_uris"):
            if field not in body:
                errors[field] = ["This field is required."]
        name = body.get("name")
        if "name" in body and (not isinstance(name, str) or not name.strip()):
            errors["name"] = ["This field may not be blank."]
        elif isinstance(name, str) and self.state.find("ak_providers", name=name):
            errors["name"] = ["provider with this name already exists."]
        fields: Record = {
            f: self._related(errors, f, body.get(f), "ak_flows", nullable=False)
            for f in ("authorization_flow", "invalidation_flow")
            if f in body
        }
        fields["signing_key"] = self._related(
            errors, "signing_key", body.get("signing_key"), "ak_keypairs", nullable=True
        )
        mappings = body.get("property_mappings", [])
        mapping_errors = []
        if not isinstance(mappings, list):
            mapping_errors.append('Expected a list of items but got type "str".')
            mappings = []
        for pk in mappings:
            if not isinstance(pk, str) or self.state.find("ak_mappings", pk=pk) is None:
                mapping_errors.append(f'Invalid pk "{pk}" - object does not exist.')
        if mapping_errors:
            errors["property_mappings"] = mapping_errors
        return {**fields, "name": name, "property_mappings": mappings}

    def _choices(self, body: Record, errors: dict[str, list[str]]) -> Record:
        """Client type, grant types, sub mode, redirect URIs and client id, checked."""
        client_type = body.get("client_type", "confidential")
        if client_type not in ("confidential", "public"):
            errors["client_type"] = [f'"{client_type}" is not a valid choice.']
        grants = _grant_types(body, errors)
        sub_mode = body.get("sub_mode", "hashed_user_id")
        if sub_mode not in SUB_MODES:
            errors["sub_mode"] = [f'"{sub_mode}" is not a valid choice.']
        redirect_uris: list[Record] = []
        if "redirect_uris" in body:
            try:
                redirect_uris = redirect_entries(body["redirect_uris"])
            except FieldErrors as exc:
                errors.update(exc.errors)
        client_id = body.get("client_id") or generate_id()
        if self.state.provider_by_client(client_id):
            errors["client_id"] = ["OAuth2/OpenID Provider with this Client ID already exists."]
        return {
            "client_type": client_type,
            "grant_types": grants,
            "sub_mode": sub_mode,
            "redirect_uris": redirect_uris,
            "client_id": client_id,
        }
