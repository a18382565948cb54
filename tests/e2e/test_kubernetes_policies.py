"""GatewayPolicies in controller mode against a real Kubernetes API server: a policy the gateway
refuses (bad CEL, a value the CRD schema cannot check, a key from the gateway's environment)
fails its route closed and fixing it restores service; the API server itself refuses what the
schema can check; a policy whose target is missing says so (tests/kube_example_support.py says
how the example is applied).

Tests in this module share one gateway and run in file order; each puts the policy back.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import httpx
import pytest

from kube_example_support import (
    BACKEND_API_KEY,
    ClusterStack,
    example_cluster,
    own_site,
)
from kube_support import ACCEPT, INITIALIZE, WAIT
from support import wait_until

NS = "k8s-policies"


cluster = example_cluster(own_site(NS))


def test_an_invalid_cel_rule_fails_closed_and_fixing_it_restores_service(
    cluster: ClusterStack,
) -> None:
    api, token = cluster.api, cluster.token()
    assert cluster.initialize(token).status_code == 200
    good = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]["authorization"]
    broken = copy.deepcopy(good)
    broken["policy"]["matchExpressions"] = ['jwt.groups.exists(g, g == "mcp-agent"']
    generation = api.patch(
        "GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": {"authorization": broken}}}
    )
    conditions = api.wait_conditions(
        "GatewayPolicy", NS, "mcp-authn", {"Accepted": "False"}, generation
    )
    assert conditions["Accepted"]["reason"] == "Invalid"
    assert (
        "spec.traffic.authorization.policy.matchExpressions[0]" in conditions["Accepted"]["message"]
    )
    wait_until(
        lambda: cluster.initialize(token).status_code == 503, WAIT, "the route to fail closed"
    )
    refused = cluster.initialize(token)
    assert refused.json()["error"] == "policy_invalid"
    generation = api.patch(
        "GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": {"authorization": good}}}
    )
    api.wait_conditions(
        "GatewayPolicy", NS, "mcp-authn", {"Accepted": "True", "Attached": "True"}, generation
    )
    wait_until(lambda: cluster.initialize(token).status_code == 200, WAIT, "service to return")


@pytest.mark.parametrize(
    "refused",
    [
        # Past the schema's pattern, refused by the WHATWG URL parser only.
        {"jwtAuthentication": {"providers": [{"jwks": {"remote": {"url": "http://a:99999/"}}}]}},
        {"jwtAuthentication": {"mcp": {"resourceMetadata": {"resource": "http://a%zz/mcp"}}}},
    ],
    ids=["jwks url", "resource"],
)
def test_a_policy_the_api_server_stores_but_the_gateway_refuses_fails_its_route_closed(
    cluster: ClusterStack, refused: dict[str, Any]
) -> None:
    # The CRD allows more than the models read: such a policy was dropped from the build and
    # its route served without it (200 without a token).
    api = cluster.api
    assert cluster.initialize(None).status_code == 401
    good = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]
    broken = merge(copy.deepcopy(good), refused)
    generation = api.patch("GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": broken}})
    try:
        api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "False"}, generation)
        wait_until(
            lambda: cluster.initialize(None).status_code == 503, WAIT, "the route to fail closed"
        )
        for token in (None, cluster.token()):
            answer = cluster.initialize(token)
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "policy_invalid"
    finally:
        api.patch("GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": good}})
    wait_until(lambda: cluster.initialize(None).status_code == 401, WAIT, "the policy to return")


@pytest.mark.parametrize(
    "value", ["not-a-url", "ftp://idp.example/jwks", "http://user:pw@idp.example/jwks"]
)
def test_the_api_server_refuses_a_url_the_gateway_would(cluster: ClusterStack, value: str) -> None:
    # The CRD says what the models say: the report's `not-a-url` is not even stored.
    api = cluster.api
    traffic = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]
    broken = merge(
        copy.deepcopy(traffic),
        {"jwtAuthentication": {"providers": [{"jwks": {"remote": {"url": value}}}]}},
    )
    answer = api.server.request(
        "PATCH",
        api.path("GatewayPolicy", NS, "mcp-authn"),
        {"spec": {"traffic": broken}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 422, answer.text
    assert "jwks.remote.url" in answer.text


def merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`change` laid over `base`; lists of objects are merged item by item (the first one)."""
    for key, value in change.items():
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merge(current, value)
        elif isinstance(value, list) and isinstance(current, list) and current:
            merge(current[0], value[0])
        else:
            base[key] = value
    return base


def passed_through(cluster: ClusterStack, token: str, mark: str) -> bool:
    """One call marked `mark`; whether the backend saw it with the caller's own token."""
    headers = {**ACCEPT, "Authorization": f"Bearer {token}", "Mcp-Param-Mark": mark}
    httpx.post(f"{cluster.gateway}/mcp", json=INITIALIZE, headers=headers, timeout=10)
    return any(
        dict(r["headers"]).get("mcp-param-mark") == mark
        and dict(r["headers"]).get("authorization") == f"Bearer {token}"
        for r in httpx.get(f"http://{cluster.backend}/debug/requests").json()
    )


def test_backend_credentials_in_controller_mode(cluster: ClusterStack) -> None:
    """A policy naming a variable of the controller's environment (one that holds a key, as
    a Deployment's secretKeyRef would put it there) is refused, Accepted=False naming the field
    and secretRef, its route fails closed and the key never reaches the backend; passthrough
    hands on the caller's token. (tests/e2e/test_secret_refs.py runs secretRef on a server
    that serves Secrets.)"""
    api, token = cluster.api, cluster.token()

    def credentials(value: dict[str, Any] | None) -> int:
        return api.patch(
            "GatewayPolicy", NS, "mcp-authn", {"spec": {"backend": {"credentials": value}}}
        )

    try:
        env = {"header": "X-Api-Key", "value": {"env": "BACKEND_API_KEY"}}
        generation = credentials({"secretHeader": env})
        conditions = api.wait_conditions(
            "GatewayPolicy", NS, "mcp-authn", {"Accepted": "False"}, generation
        )
        message = conditions["Accepted"]["message"]
        assert message.startswith(
            "spec.backend.credentials.secretHeader.value: env: in a cluster a policy cannot "
            "read the gateway's environment variables"
        ), message
        assert "use secretRef" in message
        wait_until(
            lambda: cluster.initialize(token).status_code == 503, WAIT, "the route to fail closed"
        )
        received = httpx.get(f"http://{cluster.backend}/debug/requests").json()
        assert all(dict(r["headers"]).get("x-api-key") != BACKEND_API_KEY for r in received)
        generation = credentials({"secretHeader": None, "passthrough": True})
        api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "True"}, generation)
        wait_until(
            lambda: passed_through(cluster, token, uuid.uuid4().hex),
            WAIT,
            "the backend to receive the caller's token (passthrough)",
        )
    finally:
        generation = credentials(None)
        api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "True"}, generation)
        wait_until(lambda: cluster.initialize(token).status_code == 200, WAIT, "service to return")


def test_a_policy_targeting_a_missing_route_is_not_attached(cluster: ClusterStack) -> None:
    api = cluster.api
    orphan = copy.deepcopy(api.get("GatewayPolicy", NS, "mcp-authn"))
    orphan = {
        "apiVersion": orphan["apiVersion"],
        "kind": "GatewayPolicy",
        "metadata": {"name": "orphan", "namespace": NS},
        "spec": {
            **orphan["spec"],
            "targetRefs": [{**orphan["spec"]["targetRefs"][0], "name": "nope"}],
        },
    }
    api.create(orphan)
    try:
        conditions = api.wait_conditions(
            "GatewayPolicy", NS, "orphan", {"Accepted": "True", "Attached": "False"}, 1
        )
        assert conditions["Attached"]["reason"] == "TargetNotFound"
        assert "nope" in conditions["Attached"]["message"]
    finally:
        api.delete("GatewayPolicy", NS, "orphan")
