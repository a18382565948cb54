"""Validate HTTP exchanges against the providers' official OpenAPI documents, with openapi-core.

The documents are third-party data kept outside the repository: in the directory named by the
environment variable `CONTRACTS_DIR`, by default `../shared/contracts` beside the repository.
Tests that use them are marked `contracts`: `make test` leaves them out, `make test-contracts`
runs them (and only them)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse

from support import ROOT, yaml_load

CONTRACTS = (
    Path(os.environ.get("CONTRACTS_DIR") or ROOT.parent / "shared" / "contracts")
    .expanduser()
    .resolve()
)
AUTHENTIK = CONTRACTS / "authentik-2026.5.6-schema.yml"
KEYCLOAK = CONTRACTS / "keycloak-26.6-admin-rest-openapi.json"


def require(path: str | Path) -> None:
    """Fail in one line naming what is missing and how to point `CONTRACTS_DIR` at it."""
    if not CONTRACTS.is_dir():
        pytest.fail(
            f"the providers' API documents are not in {CONTRACTS}: set CONTRACTS_DIR "
            "to the directory that holds them (make test-contracts CONTRACTS_DIR=DIR)",
            pytrace=False,
        )
    if not Path(path).is_file():
        pytest.fail(
            f"{Path(path).name} is not in {CONTRACTS} (CONTRACTS_DIR): it holds "
            f"{sorted(p.name for p in CONTRACTS.iterdir())}",
            pytrace=False,
        )


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


@functools.cache
def openapi(path: str, token_exchange: bool = False) -> OpenAPI:
    """The parsed document (cached: the authentik one is 1.7 MB). `token_exchange`: as
    authentik 2026.8 has it, whose schema differs for the calls we make only by the
    token-exchange grant joining the grant-type enum (the contracts' README)."""
    require(path)
    with open(path, encoding="utf-8") as handle:
        document = yaml_load(handle.read())
    _fix_document(document)
    _realm_import_body(document)
    if token_exchange:
        grants = document["components"]["schemas"]["GrantTypesEnum"]["enum"]
        assert TOKEN_EXCHANGE not in grants, "the document has the grant: drop the override"
        grants.append(TOKEN_EXCHANGE)
    return OpenAPI.from_dict(document, config=Config(spec_validator_cls=None))


def _realm_import_body(document: dict[str, Any]) -> None:
    """Keycloak's `POST /admin/realms` reads its body as a stream (the document says a binary
    string) holding "a full representation of that realm": it is checked as one."""
    operation = document.get("paths", {}).get("/admin/realms", {}).get("post")
    if operation is not None:
        body = operation["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"format": "binary", "type": "string"}, "drop this override"
        body["schema"] = {"$ref": "#/components/schemas/RealmRepresentation"}


def _fix_document(node: object) -> None:
    """Two readings the validator gets wrong, made explicit without changing what is allowed:
    the Keycloak document writes some boolean defaults as strings (`default: "true"`), which
    would be applied to requests that omit the parameter; and the authentik document marks
    `allOf: [$ref]` wrappers `nullable`, which the OpenAPI 3.0 validator ignores without a
    `type`, so null is spelled out as an alternative."""
    if isinstance(node, dict):
        schema_type, default = node.get("type"), node.get("default")
        if schema_type == "boolean" and default in ("true", "false"):
            node["default"] = default == "true"
        elif schema_type == "integer" and isinstance(default, str) and default.isdigit():
            node["default"] = int(default)
        if node.get("nullable") is True and "type" not in node and len(node.get("allOf", ())) == 1:
            node["anyOf"] = [
                node.pop("allOf")[0],
                {"type": "string", "nullable": True, "enum": [None]},
            ]
        for value in node.values():
            _fix_document(value)
    elif isinstance(node, list):
        for value in node:
            _fix_document(value)


@dataclass
class Recorder:
    """An httpx event hook pair that keeps every exchange."""

    exchanges: list[tuple[httpx.Request, httpx.Response]] = field(default_factory=list)

    def hooks(self) -> dict[str, list]:
        """`event_hooks=` for an httpx.Client."""
        return {"response": [self._keep]}

    def _keep(self, response: httpx.Response) -> None:
        response.read()
        self.exchanges.append((response.request, response))


def _mock_request(request: httpx.Request, prefix_strip: str = "") -> MockRequest:
    url = request.url
    return MockRequest(
        host_url=f"{url.scheme}://{url.netloc.decode()}",
        method=request.method.lower(),
        path=url.path,
        args=dict(parse_qsl(url.query.decode())),
        headers=dict(request.headers.items()),
        data=request.content or None,
        content_type=request.headers.get("content-type", "application/json").split(";")[0],
    )


def validate(
    document: str,
    request: httpx.Request,
    response: httpx.Response,
    documented_only: bool = True,
    check_request: bool = True,
    token_exchange: bool = False,
) -> list[str]:
    """Problems with this exchange: the request (unless it is invalid on purpose); the response
    when its status is documented for the operation (the Keycloak document lists few)."""
    api = openapi(document, token_exchange)
    problems: list[str] = []
    mock = _mock_request(request)
    if check_request:
        try:
            api.validate_request(mock)
        except Exception as exc:  # the validator's own exception hierarchy
            problems.append(f"request {request.method} {request.url.path}: {_reason(exc)}")
            return problems
    content_type = response.headers.get("content-type", "application/json").split(";")[0]
    mock_response = MockResponse(
        data=response.content or b"",
        status_code=response.status_code,
        content_type=content_type if response.content else None,
    )
    try:
        api.validate_response(mock, mock_response)
    except Exception as exc:
        reason = _reason(exc)
        # The Keycloak document lists few error statuses and no error bodies (its README says
        # so); what it does not describe cannot be checked against it.
        undocumented = ("Unknown response http status", "ResponseNotFound", "Valid mimetypes: []")
        if documented_only and any(marker in reason for marker in undocumented):
            return problems
        problems.append(
            f"response {response.status_code} to {request.method} {request.url.path}: {reason}"
        )
    return problems


def _reason(exc: Exception) -> str:
    parts = [f"{type(exc).__name__}: {exc}"]
    cause = exc.__cause__ or exc.__context__
    while cause is not None and len(parts) < 4:
        parts.append(f"{type(cause).__name__}: {cause}")
        details = getattr(cause, "schema_errors", None)
        if details:
            parts.extend(str(e.message)[:300] for e in list(details)[:3])
        cause = cause.__cause__ or cause.__context__
    return " <- ".join(parts)
