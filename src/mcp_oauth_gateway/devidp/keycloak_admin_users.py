"""Users and groups in the admin REST API (`/admin/realms/master/users`, `…/groups`): list
(search, exact), create (201 + `Location`, 409 for a name taken), a user's groups and joining
one, answered as Keycloak 26 answers."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from .keycloak_admin_http import created, error, not_found, read_body
from .keycloak_users import Users
from .oidc import json_response
from .store import Record, Store, hash_password, new_id

_USER_FIELDS = (
    "id",
    "username",
    "enabled",
    "emailVerified",
    "createdTimestamp",
    "firstName",
    "lastName",
    "email",
)


def group_rep(group: Record) -> Record:
    """A `GroupRepresentation`."""
    return {
        "id": group["id"],
        "name": group["name"],
        "path": f"/{group['name']}",
        "subGroupCount": 0,
        "subGroups": [],
        "attributes": {},
        "realmRoles": [],
        "clientRoles": {},
        "access": {"view": True, "manage": True},
    }


def user_rep(user: Record) -> Record:
    """A `UserRepresentation` (never the password)."""
    rep = {k: user[k] for k in _USER_FIELDS if k in user}
    rep.setdefault("emailVerified", False)
    rep["totp"] = False
    rep["access"] = {"manage": True}
    return rep


def _new_user(body: Record, username: str) -> Record:
    user: Record = {
        "id": new_id(),
        "username": username,
        "enabled": bool(body.get("enabled", False)),
        "emailVerified": bool(body.get("emailVerified", False)),
        "createdTimestamp": int(time.time() * 1000),
        "groups": [],
    }
    for name in ("email", "firstName", "lastName"):
        if isinstance(body.get(name), str):
            user[name] = body[name]
    for credential in body.get("credentials") or []:
        if credential.get("type") == "password" and isinstance(credential.get("value"), str):
            user["password"] = hash_password(credential["value"])
    return user


class UsersAdmin:
    """The admin API's users and groups."""

    def __init__(self, store: Store, users: Users):
        self.store = store
        self.users = users

    async def list_groups(self, request: Request, parts: list[str]) -> Response:
        search = request.query_params.get("search")
        exact = request.query_params.get("exact", "false") == "true"
        groups = self.store.collection("kc_groups")
        if search is not None:
            groups = [
                g
                for g in groups
                if (g["name"] == search if exact else search.lower() in g["name"].lower())
            ]
        return json_response([group_rep(g) for g in groups])

    async def create_group(self, request: Request, parts: list[str]) -> Response:
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            return error(400, "Group name is missing")
        if any(g["name"] == name for g in self.store.collection("kc_groups")):
            return error(409, f"Top level group named '{name}' already exists.")
        group = {"id": new_id(), "name": name}
        self.store.collection("kc_groups").append(group)
        self.store.save()
        return created(request, "groups", group["id"])

    async def list_users(self, request: Request, parts: list[str]) -> Response:
        username = request.query_params.get("username")
        exact = request.query_params.get("exact", "false") == "true"
        users = [
            u for u in self.store.collection("kc_users") if not u.get("serviceAccountClientId")
        ]
        if username is not None:
            wanted = username.lower()
            users = [
                u for u in users if (u["username"] == wanted if exact else wanted in u["username"])
            ]
        return json_response([user_rep(u) for u in users])

    async def create_user(self, request: Request, parts: list[str]) -> Response:
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        username = body.get("username")
        if not isinstance(username, str) or not username.strip():
            return error(400, "User name is missing")
        username = username.lower()
        if self.users.find(username=username):
            return error(409, "User exists with same username")
        email = body.get("email")
        if email and self.users.find(email=email):
            return error(409, "User exists with same email")
        user = _new_user(body, username)
        self.store.collection("kc_users").append(user)
        self.store.save()
        return created(request, "users", user["id"])

    async def user_groups(self, request: Request, parts: list[str]) -> Response:
        user = self.users.find(id=parts[0])
        if user is None:
            return not_found("User not found")
        return json_response(
            [
                {"id": g["id"], "name": g["name"], "path": f"/{g['name']}"}
                for gid in user["groups"]
                if (g := self.users.group(gid))
            ]
        )

    async def join_group(self, request: Request, parts: list[str]) -> Response:
        user = self.users.find(id=parts[0])
        if user is None:
            return not_found("User not found")
        group = self.users.group(parts[1])
        if group is None:
            return not_found("Group not found")
        if group["id"] not in user["groups"]:
            user["groups"].append(group["id"])
            self.store.save()
        return Response(status_code=204)
