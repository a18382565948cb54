"""Several identity providers on one route, at load time and in process: what a policy with two
issuers compiles to, the problems it can have, the metadata that lists them, and the status
that names the provider whose keyset is missing."""

from __future__ import annotations

import httpx
import pytest

from mcp_oauth_gateway.broker.identity import SignInProvider, pick_by_hint
from mcp_oauth_gateway.controlplane import ControlPlane, build_from_objects, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp

from .resources_fixture import BASE, policy, write

AT = "2025-01-02T03:04:05Z"
SECOND = """        - issuer: http://kc.internal/realms/corp
          name: Corp SSO
          kind: Keycloak
          clientId: corp-mcp
          loginHintDomains: [corp.example]
          audiences: [http://gw.example/mcp]
          jwks:
            remote:
              url: http://kc.internal/realms/corp/protocol/openid-connect/certs
"""


def two_providers(mode: str = "", provider: str = "ProviderB") -> str:
    text = policy(provider=provider).replace("      mcp:\n", SECOND + "      mcp:\n", 1)
    if mode:
        text = text.replace(
            "        provider: ", f"        authorizationServerMode: {mode}\n        provider: "
        )
    return text


def problems(tmp_path, text: str) -> str:
    result = build_from_objects(load_paths([write(tmp_path, BASE + text)]).resources, at=AT)
    accepted = [c for c in result.statuses["GatewayPolicy", "default", "auth"].conditions]
    return next(c.message for c in accepted if c.type == "Accepted")


def test_facade_cannot_front_two_providers(tmp_path):
    message = problems(tmp_path, two_providers())
    assert "Facade mode serves one provider's metadata, but the policy has 2 providers" in message


def test_two_providers_compile_with_their_own_kinds_clients_and_names(tmp_path):
    text = two_providers().replace(
        "        provider: ProviderB\n        clientId: mcp-public\n", ""
    )
    snapshot = build_snapshot(load_paths([write(tmp_path, BASE + text)]))
    assert snapshot.ok, [p.conditions for p in snapshot.policies]
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    first, second = route.policy.providers
    assert (first.index, first.kind, first.name) == (0, None, "idp")
    assert (second.index, second.kind, second.client_id) == (1, "Keycloak", "corp-mcp")
    assert second.name == "Corp SSO"
    assert second.login_hint_domains == ("corp.example",)
    assert snapshot.policies[0].keyset_owners == (
        "providers[0] (issuer http://idp/application/o/mcp/)",
        "providers[1] (issuer http://kc.internal/realms/corp)",
    )


def test_repeated_issuers_are_a_problem(tmp_path):
    text = two_providers().replace(
        "issuer: http://kc.internal/realms/corp", "issuer: http://idp/application/o/mcp/"
    )
    assert "providers[1].issuer repeats spec.traffic.jwtAuthentication.providers[0]" in (
        problems(tmp_path, text)
    )


def test_broker_needs_a_client_at_every_provider(tmp_path):
    text = two_providers("Broker").replace("          clientId: corp-mcp\n", "")
    text = text.replace("        clientId: mcp-public\n", "")
    message = problems(tmp_path, text)
    assert "providers[1].clientId is required in Broker mode" in message


async def test_protected_resource_metadata_lists_every_issuer(tmp_path):
    text = two_providers().replace(
        "        provider: ProviderB\n        clientId: mcp-public\n", ""
    )
    app = GatewayApp(ControlPlane(build_snapshot(load_paths([write(tmp_path, BASE + text)]))))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    ) as client:
        document = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert document["authorization_servers"] == [
        "http://idp/application/o/mcp/",
        "http://kc.internal/realms/corp",
    ]


def test_the_status_names_the_provider_whose_keyset_is_missing(tmp_path):
    text = two_providers().replace(
        "        provider: ProviderB\n        clientId: mcp-public\n", ""
    )
    control = ControlPlane(build_snapshot(load_paths([write(tmp_path, BASE + text)])))
    report = control.snapshot.policies[0]
    resolved = next(c for c in control.conditions(report) if c.type == "ResolvedRefs")
    assert not resolved.status
    assert resolved.message.startswith(
        "providers[0] (issuer http://idp/application/o/mcp/): keyset "
    )
    assert "; providers[1] (issuer http://kc.internal/realms/corp): keyset " in resolved.message


def test_a_domain_in_two_providers_login_hints_is_a_problem(tmp_path):
    text = two_providers("Broker").replace(
        "jwksPath: /application/o/mcp/jwks/\n",
        "jwksPath: /application/o/mcp/jwks/\n          loginHintDomains: [corp.example]\n",
    )
    assert "loginHintDomains: corp.example is also in" in problems(tmp_path, text)


def test_a_login_hint_picks_a_provider_only_by_a_domain_that_is_its_alone():
    def provider(index: int, *domains: str) -> SignInProvider:
        return SignInProvider(index, f"p{index}", "c", None, True, domains)

    one = (provider(0),)
    two = (provider(0, "corp.example"), provider(1, "partner.example"))
    assert pick_by_hint(one, None) == 0  # nothing to choose
    assert pick_by_hint(two, "alice@Partner.Example") == 1
    assert pick_by_hint(two, "alice@elsewhere.example") is None  # the user chooses
    assert pick_by_hint(two, "alice") is None
    assert pick_by_hint(two, None) is None


def identity_header(claims: str = "") -> str:
    """A backend secret header with the caller's identity (default claims unless given)."""
    listed = f"          claims: {claims}\n" if claims else ""
    return (
        "  backend:\n    credentials:\n      secretHeader:\n        header: X-Api-Key\n"
        "        value: {env: SEVERAL_PROVIDERS_API_KEY}\n        identity:\n"
        f"          header: X-User\n{listed}"
    )


def without_mcp_provider(text: str) -> str:
    """Two providers without `mcp.provider`: Facade would front one of them (a problem)."""
    return text.replace("        provider: ProviderB\n        clientId: mcp-public\n", "")


@pytest.mark.parametrize(
    "claims", ["[sub]", "[sub, groups]", "[email]"], ids=["sub", "sub-groups", "email"]
)
def test_an_identity_header_without_iss_is_refused_with_two_providers(
    tmp_path, monkeypatch, claims
):
    """Alice at one provider and alice at the other are two people: an identity without the
    issuer would make them one caller for the backend."""
    monkeypatch.setenv("SEVERAL_PROVIDERS_API_KEY", "k-123")
    text = without_mcp_provider(two_providers())
    message = problems(tmp_path, text + identity_header(claims))
    path = "spec.backend.credentials.secretHeader.identity.claims"
    assert (
        f"{path} {claims} has no iss, but the policy has 2 providers: sub is unique only "
        "within its issuer"
    ) in message
    assert message.endswith(f"; add iss to {path}")
    for accepted in (identity_header(), identity_header(f"[iss, {claims[1:]}")):
        snapshot = build_snapshot(load_paths([write(tmp_path, BASE + text + accepted)]))
        assert snapshot.ok, [p.conditions for p in snapshot.policies]
    alone = policy() + identity_header(claims)  # one issuer: its subjects are unique
    assert build_snapshot(load_paths([write(tmp_path, BASE + alone)])).ok


def transformation(*values: str) -> str:
    """Request headers X-0, X-1, … set to these CEL values."""
    rows = "".join(f"          - {{name: X-{i}, value: '{v}'}}\n" for i, v in enumerate(values))
    return f"    transformation:\n      request:\n        set:\n{rows}"


def test_a_header_set_from_sub_without_the_issuer_is_refused_with_two_providers(tmp_path):
    """A header set to `jwt.sub` tells the backend who calls, as the identity header does."""
    text = without_mcp_provider(two_providers())
    at = "    authorization:\n"

    def with_headers(*values: str) -> str:
        return text.replace(at, transformation(*values) + at)

    message = problems(tmp_path, with_headers('jwt.groups.join(",")', "jwt.sub"))
    assert (
        "spec.traffic.transformation.request.set[1].value reads jwt.sub but no header set reads "
        "jwt.iss, and the policy has 2 providers: sub is unique only within its issuer"
    ) in message
    assert "add jwt.iss to this value, or set another header to jwt.iss" in message
    for accepted in (
        with_headers('jwt.iss + " " + jwt.sub'),
        with_headers("jwt.sub", "jwt.iss"),
        with_headers('jwt.groups.join(",")'),  # no subject: nothing to mistake
    ):
        snapshot = build_snapshot(load_paths([write(tmp_path, BASE + accepted)]))
        assert snapshot.ok, [p.conditions for p in snapshot.policies]
    alone = policy().replace(at, transformation("jwt.sub") + at)
    assert build_snapshot(load_paths([write(tmp_path, BASE + alone)])).ok


def test_every_problem_a_policy_has_makes_it_fail_closed(tmp_path):
    """The invariant the data plane relies on: a policy with any problem carries `invalid`
    (its routes answer 503). Each variant has one problem, found by a different step."""
    from mcp_oauth_gateway.controlplane.policies import compile_policy
    from mcp_oauth_gateway.controlplane.service_refs import ServiceRefs
    from mcp_oauth_gateway.resources.models import GatewayPolicy

    variants = {
        "cel": policy(rules=("jwt.groups.contanis(1)",)),
        "client": policy(client_id=None),
        "facade": two_providers(),
        "secret": policy()
        + "  backend:\n    credentials:\n      secretHeader:\n        header: X-K\n"
        "        value: {env: NOT_SET_IN_THIS_TEST}\n",
        "both": policy().replace(
            "    jwtAuthentication:\n", "    jwtAuthentication:\n      forwardToken: true\n"
        )
        + "  backend:\n    credentials: {passthrough: true}\n",
        "scope-rule": policy()
        + "  backend:\n    mcp:\n      scopes: [{match: 'mcp.tool.name ==', required: [x]}]\n",
    }
    for name, text in variants.items():
        loaded = load_paths([write(tmp_path, BASE + text)])
        document = next(
            r.resource for r in loaded.resources if isinstance(r.resource, GatewayPolicy)
        )
        result = compile_policy(document, ServiceRefs({}))
        assert not result.valid, name
        assert result.compiled.invalid is not None, name
        for problem in result.problems:
            assert problem in result.compiled.invalid, (name, problem)
