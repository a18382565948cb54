"""Applications in authentik's API (`/core/applications/`): list, read, create.

The application list behaves as authentik's does (`ApplicationViewSet.list`, 2025.12 to 2026.5):
each user's result page is cached for 24 h under the user and page number only, so the filters of
a later request are ignored; an empty page is never served from the cache; `superuser_full_list=
true` and a non-empty `search` bypass it; creating an application and saving a user or a group
clear it for everyone (`post_save` signals). Adding a user to a group is not a save; nor, here,
is a sign-in (authentik saves the user's `last_login` then; the dev IdP keeps the cache)."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .authentik_drf import (
    FieldErrors,
    envelope,
    invalid_page,
    not_found,
    page_of,
    paginated,
    read_body,
    required_or_blank,
)
from .authentik_providers import provider_brief
from .authentik_state import AuthentikState
from .oidc import json_response
from .store import Record, new_id

APP_SEARCH_FIELDS = (
    "name",
    "slug",
    "meta_launch_url",
    "meta_description",
    "meta_publisher",
    "group",
)
RESERVED_SLUGS = frozenset({"authorize", "token", "device", "userinfo", "introspect", "revoke"})


def application_rep(state: AuthentikState, app: Record) -> Record:
    """An application as `ApplicationSerializer` shows it."""
    provider = state.find("ak_providers", pk=app["provider"]) if app["provider"] else None
    return {
        "pk": app["pk"],
        "name": app["name"],
        "slug": app["slug"],
        "provider": app["provider"],
        "provider_obj": provider_brief(state, provider) if provider else None,
        "backchannel_providers": [],
        "backchannel_providers_obj": [],
        "launch_url": None,
        "open_in_new_tab": False,
        "meta_launch_url": "",
        "meta_icon": "",
        "meta_icon_url": None,
        "meta_icon_themed_urls": None,
        "meta_description": "",
        "meta_publisher": "",
        "policy_engine_mode": "any",
        "group": "",
        "meta_hide": False,
    }


class ApplicationsApi:
    """The views of `/core/applications/`."""

    def __init__(self, state: AuthentikState):
        self.state = state
        self.store = state.store

    def _filtered(self, request: Request) -> list[Record]:
        """The list's queryset: exact filters, `search` over the search fields, by name."""
        q = request.query_params
        terms = [t for t in re.split(r"[\s,]+", q.get("search", "").lower()) if t]
        reps = [application_rep(self.state, a) for a in self.store.collection("ak_applications")]
        items = [
            a
            for a in reps
            if all(str(a[f] or "") == q[f] for f in APP_SEARCH_FIELDS if q.get(f))
            and all(any(t in str(a[f] or "").lower() for f in APP_SEARCH_FIELDS) for t in terms)
        ]
        return sorted(items, key=lambda a: a["name"])

    async def list_applications(self, request: Request) -> Response:
        """authentik's custom list: see the module docstring for its cache."""
        q = request.query_params
        items = self._filtered(request)
        if q.get("superuser_full_list", "").lower() == "true":
            return paginated(items, request)  # the bootstrap token's user is a superuser
        paging = page_of(request)
        if paging is None:
            return invalid_page()
        page, size = paging
        chunk = items[(page - 1) * size : page * size]
        if q.get("search", "") == "":
            chunk = self._through_cache(page, chunk)
        if q.get("only_with_launch_url", "").lower() == "true":
            chunk = [a for a in chunk if a["launch_url"]]
        # The envelope counts the filtered queryset while the results come from the cache.
        return envelope(len(items), page, size, chunk)

    def _through_cache(self, page: int, chunk: list[Record]) -> list[Record]:
        """The page as the user's cache has it (cached now when it holds nothing)."""
        state = self.state
        user = state.find("ak_users", username="akadmin")
        user_pk = user["pk"] if user else 0
        # authentik tests the cached list for truth: an empty page is computed every time.
        cached = state.cached_page(user_pk, page)
        if not cached:
            cached = [a["pk"] for a in chunk]
            state.cache_page(user_pk, page, cached)
        # The cached objects are re-read (`_expand_applications`), so they are current.
        current = {a["pk"]: a for a in self.store.collection("ak_applications")}
        return [application_rep(state, current[pk]) for pk in cached if pk in current]

    async def get_application(self, request: Request, slug: str) -> Response:
        app = self.state.find("ak_applications", slug=slug)
        if app is None:
            return not_found("Application")
        return json_response(application_rep(self.state, app))

    def _slug_errors(self, slug: str) -> list[str]:
        if not re.fullmatch(r"[-a-zA-Z0-9_]+", slug):
            return ["Enter a valid “slug” consisting of letters, numbers, underscores or hyphens."]
        if slug in RESERVED_SLUGS:
            return [f"The slug '{slug}' is reserved and cannot be used for applications."]
        if self.state.find("ak_applications", slug=slug):
            return ["Application with this slug already exists."]
        return []

    def _provider_errors(self, provider: Any) -> list[str]:
        if not isinstance(provider, int) or self.state.find("ak_providers", pk=provider) is None:
            return [f'Invalid pk "{provider}" - object does not exist.']
        if self.state.find("ak_applications", provider=provider):
            return ["Application with this provider already exists."]
        return []

    async def create_application(self, request: Request) -> Response:
        body = await read_body(request)
        errors: dict[str, list[str]] = {}
        for field in ("name", "slug"):
            if not isinstance(body.get(field), str) or not body[field].strip():
                errors[field] = required_or_blank(body, field)
        slug, provider = body.get("slug"), body.get("provider")
        if isinstance(slug, str) and slug and (slug_errors := self._slug_errors(slug)):
            errors["slug"] = slug_errors
        if provider is not None and (provider_errors := self._provider_errors(provider)):
            errors["provider"] = provider_errors
        if errors:
            raise FieldErrors(errors)
        app = {"pk": new_id(), "name": body["name"], "slug": slug, "provider": provider}
        self.store.collection("ak_applications").append(app)
        self.store.save()
        self.state.forget_application_lists()
        return json_response(application_rep(self.state, app), 201)
