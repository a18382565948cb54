"""Groups and users in authentik's core API (`/core/groups/`, `/core/users/`): list, read and
create groups, add a user to one (not a save: the application list cache stays), list users."""

from __future__ import annotations

import hashlib

from starlette.requests import Request
from starlette.responses import Response

from .authentik_drf import FieldErrors, not_found, paginated, read_body, required_or_blank
from .authentik_state import AuthentikState, now
from .oidc import json_response
from .store import Record, new_id


def uid(user: Record) -> str:
    """authentik's `uid` of a user."""
    return hashlib.sha256(f"{user['pk']}-{user['username']}".encode()).hexdigest()


def partial_user(user: Record) -> Record:
    """A member as a group's `users_obj` shows it."""
    return {
        "pk": user["pk"],
        "username": user["username"],
        "name": user["name"],
        "is_active": user.get("is_active", True),
        "last_login": None,
        "email": user.get("email", ""),
        "attributes": {},
        "uid": uid(user),
    }


def _group_brief(group: Record) -> Record:
    """A group as a user's `groups_obj` shows it."""
    return {
        "pk": group["pk"],
        "num_pk": group["num_pk"],
        "name": group["name"],
        "is_superuser": False,
        "parents": [],
        "attributes": {},
    }


class CoreApi:
    """The views of `/core/groups/` and `/core/users/`."""

    def __init__(self, state: AuthentikState):
        self.state = state
        self.store = state.store

    def _group_rep(self, group: Record) -> Record:
        members = [u for u in self.store.collection("ak_users") if u["pk"] in group["users"]]
        return {
            "pk": group["pk"],
            "num_pk": group["num_pk"],
            "name": group["name"],
            "is_superuser": False,
            "parents": [],
            "parents_obj": [],
            "users": group["users"],
            "users_obj": [partial_user(u) for u in members],
            "attributes": {},
            "roles": [],
            "roles_obj": [],
            "inherited_roles_obj": [],
            "children": [],
            "children_obj": [],
        }

    def _user_rep(self, user: Record) -> Record:
        groups = [g for g in self.store.collection("ak_groups") if user["pk"] in g["users"]]
        return {
            "pk": user["pk"],
            "username": user["username"],
            "name": user["name"],
            "is_active": user.get("is_active", True),
            "last_login": None,
            "date_joined": user.get("date_joined", now()),
            "is_superuser": user["username"] == "akadmin",
            "groups": [g["pk"] for g in groups],
            "groups_obj": [_group_brief(g) for g in groups],
            "roles": [],
            "roles_obj": [],
            "email": user.get("email", ""),
            "avatar": "data:image/svg+xml;base64,",
            "attributes": {},
            "uid": uid(user),
            "path": user.get("path", "users"),
            "type": user.get("type", "internal"),
            "uuid": user["uuid"],
            "password_change_date": user.get("date_joined", now()),
            "last_updated": user.get("date_joined", now()),
        }

    async def list_groups(self, request: Request) -> Response:
        name = request.query_params.get("name")
        items = [g for g in self.store.collection("ak_groups") if name is None or g["name"] == name]
        return paginated([self._group_rep(g) for g in items], request)

    async def get_group(self, request: Request, pk: str) -> Response:
        group = self.state.find("ak_groups", pk=pk)
        if group is None:
            return not_found("Group")
        return json_response(self._group_rep(group))

    async def create_group(self, request: Request) -> Response:
        body = await read_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise FieldErrors({"name": required_or_blank(body, "name")})
        if self.state.find("ak_groups", name=name):
            raise FieldErrors({"name": ["Group with this name already exists."]})
        groups = self.store.collection("ak_groups")
        group = {"pk": new_id(), "num_pk": len(groups) + 1000, "name": name, "users": []}
        groups.append(group)
        self.store.save()
        self.state.forget_application_lists()
        return json_response(self._group_rep(group), 201)

    async def add_user(self, request: Request, group_pk: str) -> Response:
        group = self.state.find("ak_groups", pk=group_pk)
        if group is None:
            return not_found("Group")
        body = await read_body(request)
        if "pk" not in body:
            raise FieldErrors({"pk": ["This field is required."]})
        user = self.state.find("ak_users", pk=body["pk"])
        if user is None:
            return json_response({"detail": "Not found."}, 404)
        if user["pk"] not in group["users"]:
            group["users"].append(user["pk"])
            self.store.save()
        return Response(status_code=204)

    async def list_users(self, request: Request) -> Response:
        username = request.query_params.get("username")
        items = [
            u
            for u in self.store.collection("ak_users")
            if username is None or u["username"] == username
        ]
        return paginated([self._user_rep(u) for u in items], request)
