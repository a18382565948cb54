"""The Django REST framework conventions of authentik's API v3, as the dev IdP answers them: the
paginated envelope, 400 with field errors, the JSON body read as a dictionary."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .oidc import json_response
from .store import Record

API = "/api/v3"
# An API view: the request and the path's captured parts (a pk or slug) to a response.
Handler = Callable[..., Awaitable[Response]]


class FieldErrors(Exception):
    """DRF validation errors: `{"field": ["message", …]}`."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(str(errors))
        self.errors = errors


def page_of(request: Request) -> tuple[int, int] | None:
    """The requested page number and size (None when they are not numbers)."""
    try:
        page = max(1, int(request.query_params.get("page", "1")))
        size = min(100, max(1, int(request.query_params.get("page_size", "20"))))
    except ValueError:
        return None
    return page, size


def envelope(count: int, page: int, size: int, chunk: list[Record]) -> Response:
    """DRF's paginated envelope for one page of `count` objects (`next`/`previous` are 0 when
    absent)."""
    total_pages = max(1, -(-count // size))
    start = (page - 1) * size + 1 if chunk else 0
    return json_response(
        {
            "pagination": {
                "next": page + 1 if page < total_pages else 0,
                "previous": page - 1 if page > 1 else 0,
                "count": count,
                "current": page,
                "total_pages": total_pages,
                "start_index": start,
                "end_index": start + len(chunk) - 1 if chunk else 0,
            },
            "results": chunk,
            "autocomplete": {},
        }
    )


def invalid_page() -> Response:
    """DRF's 404 for a page number or size that is not a number."""
    return json_response({"detail": "Invalid page."}, 404)


def paginated(results: list[Record], request: Request) -> Response:
    """One page of `results` in DRF's paginated envelope."""
    paging = page_of(request)
    if paging is None:
        return invalid_page()
    page, size = paging
    return envelope(len(results), page, size, results[(page - 1) * size : page * size])


def not_found(model: str) -> Response:
    """DRF's 404 for a detail view whose object does not exist."""
    return json_response({"detail": f"No {model} matches the given query."}, 404)


def required_or_blank(body: Record, field: str) -> list[str]:
    """The error of a missing or blank string field."""
    return ["This field is required."] if field not in body else ["This field may not be blank."]


async def read_body(request: Request) -> Record:
    """The JSON object a create or update sends (FieldErrors for anything else)."""
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise FieldErrors({"non_field_errors": [f"JSON parse error - {exc}"]}) from exc
    if not isinstance(body, dict):
        raise FieldErrors(
            {
                "non_field_errors": [
                    f"Invalid data. Expected a dictionary, but got {type(body).__name__}."
                ]
            }
        )
    return body
