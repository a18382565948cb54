"""The CRDs of deploy/crds on a real Kubernetes API server, which also evaluates their CEL rules.

Every document of the case tables in tests/crd_support.py (which tests/unit/test_crds.py runs
without a server) is created with `?fieldValidation=Strict` (what `kubectl apply` sends by
default) and must be answered as the file loader decides: 201 for what it accepts, 422 (invalid)
or 400 (unknown field) naming the same field for what it refuses, and the documented answer
for each known divergence.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from crd_cases import (
    ACCEPTED,
    CONTROLLER_ONLY,
    DIVERGENCES,
    Case,
    Divergence,
    example_documents,
)
from crd_refusals import REFUSED
from crd_support import (
    CRD_FILES,
    GROUP,
    PLURALS,
    admit,
    rules,
    schema,
)
from mcp_oauth_gateway.resources import load_paths

if TYPE_CHECKING:
    from devcluster.apiserver import DevApiServer

NAMESPACE = "default"
# What the CRDs' CEL rules say: the loader's words.
CEL_MESSAGES = {entry["message"] for kind in PLURALS for entry in rules(schema(kind))}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.fixture(scope="module")
def server(apiserver: DevApiServer) -> DevApiServer:
    """The session's API server with this repository's CRDs applied (and Established)."""
    apiserver.apply_crds(sorted(CRD_FILES.values()))
    return apiserver


def case_named(name: str) -> Case:
    (case,) = [c for c in ACCEPTED if c.name == name]
    return case


def collection(kind: str) -> str:
    return f"/apis/{GROUP}/v1alpha1/namespaces/{NAMESPACE}/{PLURALS[kind]}"


def named(document: dict[str, Any], name: str) -> dict[str, Any]:
    """`document` under a name of its own in NAMESPACE, so cases never meet other tests' objects."""
    document = copy.deepcopy(document)
    document["metadata"] = {"name": f"crds-{name}", "namespace": NAMESPACE}
    return document


@contextlib.contextmanager
def posted(
    server: DevApiServer, document: dict[str, Any], validation: str | None = "Strict"
) -> Iterator[httpx.Response]:
    """POST `document` (with `?fieldValidation=`); what was created is deleted at the end."""
    path = collection(document["kind"])
    params = {"fieldValidation": validation} if validation else {}
    answer = server.request("POST", path, document, params=params)
    try:
        yield answer
    finally:
        if answer.status_code == 201:
            server.request("DELETE", f"{path}/{document['metadata']['name']}").raise_for_status()


def create(server: DevApiServer, document: dict[str, Any]) -> httpx.Response:
    """The server's answer to creating `document` with strict field validation."""
    with posted(server, document) as answer:
        return answer


def assert_refused(answer: httpx.Response, case: Case) -> None:
    """The server refused with the case's status, naming the case's field."""
    assert answer.status_code == case.status, (case.name, answer.status_code, answer.text)
    status = answer.json()
    if case.status == 400:
        assert f'unknown field "{case.field}"' in status["message"], status
        return
    fields = [cause.get("field") for cause in status["details"]["causes"]]
    # A `not` keyword fails with field "<nil>" and the path only in the message.
    fields += re.findall(r'"([^"]+)" must not validate the schema', status["message"])
    assert case.field in fields, (case.field, status)


@pytest.mark.parametrize(
    ("where", "document"), example_documents(), ids=[w for w, _ in example_documents()]
)
def test_every_example_is_created(
    server: DevApiServer, where: str, document: dict[str, Any]
) -> None:
    answer = create(server, named(document, f"example-{document['kind'].lower()}"))
    assert answer.status_code == 201, (where, answer.text)


@pytest.mark.parametrize("case", [*ACCEPTED, *CONTROLLER_ONLY], ids=lambda c: c.name)
def test_what_the_loader_or_only_the_controller_refuses_is_created(
    server: DevApiServer, case: Case
) -> None:
    answer = create(server, named(case.document(), case.name))
    assert answer.status_code == 201, (case.name, answer.text)


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.name)
def test_what_the_loader_refuses_is_refused_naming_the_same_field(
    server: DevApiServer, case: Case
) -> None:
    answer = create(server, named(case.document(), case.name))
    assert_refused(answer, case)
    # The CEL rules answer in the loader's words.
    causes = [cause["message"] for cause in answer.json().get("details", {}).get("causes", [])]
    for refusal in admit(case.kind, case.document()):
        if refusal.message in CEL_MESSAGES:
            assert any(refusal.message in cause for cause in causes), (refusal, causes)


@pytest.mark.parametrize("known", DIVERGENCES, ids=lambda d: d.case.name)
def test_known_divergences_are_answered_as_documented(
    server: DevApiServer, known: Divergence
) -> None:
    answer = create(server, named(known.case.document(), known.case.name))
    if known.server_admits:
        assert answer.status_code == 201, (known.why, answer.text)
    else:
        assert_refused(answer, known.case)


@pytest.mark.parametrize(("validation", "warns"), [("Warn", True), ("Ignore", False), (None, True)])
def test_unknown_fields_without_strict_validation_are_dropped(
    server: DevApiServer, validation: str | None, warns: bool
) -> None:
    """`kubectl apply --validate=warn` sends Warn, `--validate=false` Ignore; a client that sends
    nothing gets Warn: the object is created without the field."""
    name = f"unknown-field-{(validation or 'unset').lower()}"
    document = named(case_named("example").document(), name)
    document["spec"]["traffic"]["jwtAuthentication"]["mcp"]["clientID"] = "typo"
    with posted(server, document, validation) as answer:
        assert answer.status_code == 201, answer.text
        warning = answer.headers.get("warning", "")
        warned = "unknown field" in warning and "jwtAuthentication.mcp.clientID" in warning
        assert warned is warns, warning
        assert "clientID" not in answer.json()["spec"]["traffic"]["jwtAuthentication"]["mcp"]


def test_defaults_are_applied_and_nulls_dropped(server: DevApiServer) -> None:
    document = named(case_named("example").document(), "defaults")
    jwt = document["spec"]["traffic"]["jwtAuthentication"]
    del jwt["mode"]
    del jwt["providers"][0]["jwks"]["remote"]["backendRef"]["kind"]
    jwt["providers"][0]["audiences"] = None
    with posted(server, document) as answer:
        assert answer.status_code == 201, answer.text
        stored = answer.json()["spec"]["traffic"]["jwtAuthentication"]
    assert (stored["mode"], stored["forwardToken"]) == ("Strict", False)
    provider = stored["providers"][0]
    assert "audiences" not in provider
    remote = provider["jwks"]["remote"]
    assert (remote["backendRef"]["kind"], remote["cacheDuration"]) == ("Service", "5m")


def condition(kind: str, status: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": "Valid" if status == "True" else "Invalid",
        "message": "written by the test",
        "observedGeneration": 1,
        "lastTransitionTime": "2026-11-23T00:00:00Z",
    }


MERGE_PATCH = {"content-type": "application/merge-patch+json"}


def test_status_subresource_and_printer_columns(server: DevApiServer) -> None:
    document = named(case_named("example").document(), "status")
    path = f"{collection('GatewayPolicy')}/{document['metadata']['name']}"
    conditions = [
        condition("Accepted", "True"),
        condition("Attached", "False"),
        condition("ResolvedRefs", "False"),
    ]
    ancestor = {
        "ancestorRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway"}
        | {"name": "mcp-gateway", "namespace": NAMESPACE},
        "controllerName": "mcp-oauth-gateway.dev/gateway-controller",
        "conditions": conditions,
    }
    status = {"status": {"conditions": conditions, "ancestors": [ancestor]}}
    bad = {"status": {"conditions": [condition("Accepted", "Maybe")]}}
    with posted(server, document) as answer:
        assert answer.status_code == 201, answer.text
        written = server.request("PATCH", f"{path}/status", status, headers=MERGE_PATCH)
        assert written.status_code == 200, written.text
        refused = server.request("PATCH", f"{path}/status", bad, headers=MERGE_PATCH)
        assert refused.status_code == 422, refused.text
        table = server.request("GET", path, headers={"accept": TABLE}).json()
    columns = [column["name"] for column in table["columnDefinitions"]]
    assert columns == ["Name", "Accepted", "Attached", "ResolvedRefs", "Age"]
    # A policy whose keyset cannot be fetched shows it: ResolvedRefs False beside True/True.
    assert table["rows"][0]["cells"][:4] == [document["metadata"]["name"], "True", "False", "False"]


def test_backend_printer_columns_show_the_target(server: DevApiServer) -> None:
    document = named(case_named("backend-port-65535").document(), "backend-columns")
    path = f"{collection('GatewayBackend')}/{document['metadata']['name']}"
    with posted(server, document) as answer:
        assert answer.status_code == 201, answer.text
        table = server.request("GET", path, headers={"accept": TABLE}).json()
    columns = [column["name"] for column in table["columnDefinitions"]]
    assert columns == ["Name", "Host", "Port", "Path", "Age"]
    cells = table["rows"][0]["cells"][:4]
    assert cells == [document["metadata"]["name"], "127.0.0.1", 65535, "/mcp"]


def test_spec_changes_bump_generation_status_changes_do_not(server: DevApiServer) -> None:
    """The controller's observedGeneration relies on the status subresource being enabled."""
    document = named(case_named("example").document(), "generation")
    path = f"{collection('GatewayPolicy')}/{document['metadata']['name']}"
    status = {"status": {"conditions": [condition("Accepted", "True")]}}
    spec = {"spec": {"traffic": {"jwtAuthentication": {"forwardToken": True}}}}
    with posted(server, document) as answer:
        assert answer.status_code == 201, answer.text
        after_status = server.request("PATCH", f"{path}/status", status, headers=MERGE_PATCH)
        after_spec = server.request("PATCH", path, spec, headers=MERGE_PATCH)
    assert after_status.json()["metadata"]["generation"] == 1
    assert after_spec.json()["metadata"]["generation"] == 2
    assert after_spec.json()["spec"]["traffic"]["jwtAuthentication"]["forwardToken"] is True


def federated(*names: str) -> dict[str, Any]:
    """A GatewayBackend of several targets, as docs/configuration/federation.md shows one."""
    targets = [
        {"name": name, "static": {"host": f"{name}.mcp.svc.cluster.local", "port": 8000 + i}}
        for i, name in enumerate(names)
    ]
    document = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "GatewayBackend"}
    return named(document | {"spec": {"mcp": {"targets": targets}}}, "-".join(names))


def test_a_backend_of_several_targets_is_created_and_keeps_their_order(
    server: DevApiServer,
) -> None:
    with posted(server, federated("search", "tickets", "wiki")) as answer:
        assert answer.status_code == 201, answer.text
        targets = answer.json()["spec"]["mcp"]["targets"]
    assert [t["name"] for t in targets] == ["search", "tickets", "wiki"]
    assert [t["static"]["path"] for t in targets] == ["/mcp"] * 3  # the default, filled in


def test_a_repeated_target_name_is_refused_naming_the_repeated_item(
    server: DevApiServer, tmp_path: Path
) -> None:
    document = federated("search", "tickets", "search")
    answer = create(server, document)
    assert answer.status_code == 422, answer.text
    (cause,) = answer.json()["details"]["causes"]
    # What the docs show: the repeated item, `spec.mcp.targets[2]` here, as the loader names it.
    assert cause["field"] == "spec.mcp.targets[2]", cause
    assert cause["reason"] == "FieldValueDuplicate", cause
    assert '"name":"search"' in cause["message"], cause
    # The file loader refuses it at the same item.
    path = tmp_path / "backend.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    (error,) = load_paths([path]).errors
    assert "spec.mcp.targets[2]" in error, error
    assert "the name 'search' is used by an earlier target" in error, error
