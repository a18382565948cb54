"""The admin REST API's answers as Keycloak words them: business errors as an
`ErrorRepresentation` (`errorMessage`), a missing object as `{"error": …}` 404, a creation as 201
with the new object's `Location`, and a body Jackson cannot read as 400."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .keycloak_paths import ADMIN
from .oidc import json_response
from .store import Record


def error(status: int, message: str) -> Response:
    """Keycloak's `ErrorRepresentation` (business errors)."""
    return json_response({"errorMessage": message}, status)


def not_found(message: str) -> Response:
    """A 404 naming what was not found."""
    return json_response({"error": message}, 404)


def created(request: Request, collection: str, new: str) -> Response:
    """201 with the `Location` of the new object in `collection`."""
    base = str(request.base_url).rstrip("/")
    return Response(status_code=201, headers={"Location": f"{base}{ADMIN}/{collection}/{new}"})


async def read_body(request: Request) -> Record | Response:
    """The JSON object a request sends, or the 400 for anything else."""
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return error(400, "Unrecognized field or malformed JSON")
    if not isinstance(body, dict):
        return error(400, "Unrecognized field or malformed JSON")
    return body
