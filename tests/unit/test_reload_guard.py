"""A reload never lets in, or gives more to, a request the running policy refuses
(`controlplane/reload_guard.py`): each part of a GatewayPolicy that decides who gets in and what
they may do, edited in the files as an operator (or a file read half-written) would, is refused
when wider, naming the policy, the field and "restart to apply", and applied when narrower."""

from __future__ import annotations

from dataclasses import replace
from itertools import count

import pytest
from joserfc.jwk import ECKey

from mcp_oauth_gateway.controlplane.builder import build_snapshot
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.controlplane.reload_guard import policy_widening
from mcp_oauth_gateway.controlplane.snapshot import CompiledPolicy, KeysetSource, Snapshot
from mcp_oauth_gateway.controlplane.watch import reload_problems
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.resources.loader import load_paths

from .resources_fixture import BASE

PROVIDER = """
        - issuer: http://idp/application/o/mcp/
          audiences: [mcp-public]
          jwks:
            remote:
              backendRef: {name: authentik, port: 9000}
              jwksPath: /application/o/mcp/jwks/"""

AUTHORIZATION = """
    authorization:
      action: Allow
      policy:
        matchExpressions: ['"mcp-agent" in jwt.groups']"""


def policy(
    name: str = "auth",
    target: str = "mcp",
    mode: str = "Strict",
    providers: str = PROVIDER,
    traffic: str = AUTHORIZATION,
    backend: str = "",
) -> str:
    return f"""
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: {name}}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: {target}}}]
  traffic:
    jwtAuthentication:
      mode: {mode}
      providers:{providers}{traffic}{backend}
"""


SPARE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: spare}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /spare}}]
      backendRefs: [{name: backend}]
"""

_files = count()


@pytest.fixture
def built(tmp_path):
    def build(*documents: str) -> Snapshot:
        path = tmp_path / f"resources-{next(_files)}.yaml"
        path.write_text(BASE + SPARE + "".join(documents))
        snapshot = build_snapshot(load_paths([path]))
        assert snapshot.ok, (snapshot.errors, [p.conditions for p in snapshot.policies])
        return snapshot

    return build


def refused(built, before: str, after: str) -> str:
    (problem,) = reload_problems(built(before), built(after))
    assert "restart to apply" in problem
    return problem


def test_a_policy_edited_wider_is_refused_naming_the_policy_and_the_field(built):
    cases = [
        (
            policy(mode="Optional"),
            "spec.traffic.jwtAuthentication.mode: Strict → Optional lets in requests without",
        ),
        (policy(traffic=""), "spec.traffic.authorization: removed"),
        (
            policy(traffic=AUTHORIZATION.replace("]", ", 'true']")),
            "spec.traffic.authorization: Allow rule `true` added or changed",
        ),
        (
            policy(traffic=AUTHORIZATION.replace("mcp-agent", "operators")),
            'Allow rule `"operators" in jwt.groups` added or changed',
        ),
        (
            policy(providers=PROVIDER.replace("[mcp-public]", "[mcp-public, other]")),
            "spec.traffic.jwtAuthentication.providers[0].audiences: other added",
        ),
        (
            policy(providers=PROVIDER.replace("/mcp/jwks/", "/other/jwks/")),
            "providers[0].jwks: the signing keys would be taken from another place",
        ),
        (
            policy(providers=PROVIDER.replace("o/mcp/\n", "o/other/\n")),
            "providers[0].issuer: a new issuer: its tokens would be accepted",
        ),
    ]
    for after, why in cases:
        problem = refused(built, policy(), after)
        assert problem.startswith("GatewayPolicy default/auth: "), problem
        assert why in problem, problem


def test_rules_an_edit_narrows_are_applied(built):
    for after in [
        policy(traffic=AUTHORIZATION.replace("]", ", '\"operators\" in jwt.groups']")).replace(
            "Allow", "Require"
        ),
        policy(traffic=AUTHORIZATION.replace("[", "['jwt.sub == \"alice\"', ")).replace(
            "Allow", "Require"
        ),
        policy(providers=PROVIDER.replace("[mcp-public]", "[mcp-public]\n          name: idp")),
        policy(traffic=AUTHORIZATION + "\n    scopes: {required: [mcp:tools]}"),
    ]:
        assert reload_problems(built(policy()), built(after)) == [], after


SCOPES = "\n    scopes: {required: [mcp:tools, mcp:read]}"
TOOL_RULES = """
  backend:
    mcp:
      authorization:
        action: Require
        policy: {matchExpressions: ['mcp.tool.name != "delete"']}
      scopes:
        - {match: 'mcp.tool.name.startsWith("write")', required: [mcp:write]}"""
TRANSFORM = """
    transformation:
      request:
        set: [{name: X-User, value: jwt.sub}]
        remove: [X-Internal]"""


def test_scopes_tool_rules_and_headers_are_held_too(built):
    cases = [
        (SCOPES, "", SCOPES.replace(", mcp:read", ""), "", "spec.traffic.scopes: mcp:read is no"),
        (
            SCOPES,
            "",
            SCOPES.replace("}", ", implies: {profile: [mcp:read]}}"),
            "",
            "spec.traffic.scopes: profile would also grant mcp:read (implies)",
        ),
        ("", TOOL_RULES, "", "", "spec.backend.mcp.authorization: removed"),
        (
            "",
            TOOL_RULES,
            "",
            TOOL_RULES.replace('"delete"', '"drop"'),
            'spec.backend.mcp.authorization: Require rule `mcp.tool.name != "delete"` removed',
        ),
        (
            "",
            TOOL_RULES,
            "",
            TOOL_RULES.replace("mcp:write", "mcp:read"),
            'spec.backend.mcp.scopes: rule `mcp.tool.name.startsWith("write")` (tools): '
            "mcp:write is no longer required",
        ),
        (TRANSFORM, "", "", "", "request.set: header x-user no longer set as now"),
        (
            TRANSFORM,
            "",
            TRANSFORM.replace("jwt.sub", "jwt.email"),
            "",
            "spec.traffic.transformation.request.set: header x-user no longer set as now",
        ),
        (
            TRANSFORM,
            "",
            TRANSFORM.replace("[X-Internal]", "[]"),
            "",
            "spec.traffic.transformation.request.remove: header x-internal no longer removed",
        ),
    ]
    for traffic, backend, traffic_after, backend_after, why in cases:
        before = policy(traffic=AUTHORIZATION + traffic, backend=backend)
        after = policy(traffic=AUTHORIZATION + traffic_after, backend=backend_after)
        assert why in refused(built, before, after), why


def test_scopes_tool_rules_and_headers_edited_narrower_are_applied(built):
    for traffic, backend, traffic_after, backend_after in [
        (SCOPES.replace(", mcp:read", ""), "", SCOPES, ""),
        ("", TOOL_RULES, "", TOOL_RULES.replace('"delete"\']', '"delete"\', \'jwt.sub != "x"\']')),
        ("", TOOL_RULES, "", TOOL_RULES.replace("[mcp:write]", "[mcp:write, mcp:admin]")),
        (TRANSFORM, "", TRANSFORM.replace("[X-Internal]", "[X-Internal, X-User]"), ""),
    ]:
        before = policy(traffic=AUTHORIZATION + traffic, backend=backend)
        after = policy(traffic=AUTHORIZATION + traffic_after, backend=backend_after)
        assert reload_problems(built(before), built(after)) == [], (traffic_after, backend_after)


BOTH_ROUTES = "targetRefs: [{kind: HTTPRoute, name: mcp}, {kind: HTTPRoute, name: spare}]"


def test_a_route_moved_to_a_wider_policy_is_refused_and_to_a_narrower_one_applied(built):
    narrower = AUTHORIZATION.replace("]", ", 'jwt.sub == \"alice\"']").replace("Allow", "Require")
    before = built(policy() + policy(name="other", target="spare", traffic=narrower))
    wider = policy(name="other", traffic=AUTHORIZATION.replace("]", ", 'true']"))
    wider = wider.replace("targetRefs: [{kind: HTTPRoute, name: mcp}]", BOTH_ROUTES)
    mcp, spare = sorted(reload_problems(before, built(wider)))
    assert (
        "would be decided by GatewayPolicy default/other (HTTPRoute default/mcp) instead of "
        "default/auth, which decides it now, and it is wider" in mcp
    )
    assert "Allow rule `true` added or changed" in mcp
    assert "restart to apply" in mcp
    assert spare.startswith("GatewayPolicy default/other: spec.traffic.authorization: action")
    both = policy(name="other", traffic=narrower)
    both = both.replace("targetRefs: [{kind: HTTPRoute, name: mcp}]", BOTH_ROUTES)
    assert reload_problems(before, built(both)) == []


# --- the parts only compiled policies show -------------------------------------------------


def inline(*keys: ECKey) -> KeysetSource:
    document = {"keys": [key.as_dict(private=False) for key in keys]}
    return KeysetSource("inline:default/auth:0", 0, parse_jwks(document, version=1))


def with_keys(policy: CompiledPolicy, source: KeysetSource) -> CompiledPolicy:
    provider = replace(policy.providers[0], keyset=source)
    return replace(policy, providers=(provider,))


def test_inline_keys_may_be_dropped_but_never_added(built):
    compiled = built(policy()).listeners[8080][0].policy
    assert compiled is not None
    one, two, three = (ECKey.generate_key("P-256", {"kid": k}) for k in ("one", "two", "three"))
    both = with_keys(compiled, inline(one, two))
    assert policy_widening(both, with_keys(compiled, inline(two, three))) == [
        "spec.traffic.jwtAuthentication.providers[0].jwks: inline key 'three' added or changed"
    ]
    assert policy_widening(both, with_keys(compiled, inline(one, two))) == []
    # One key left: a token without a kid, refused among two keys, would be checked with it.
    (finding,) = policy_widening(both, with_keys(compiled, inline(one)))
    assert "a token without kid would be checked with it" in finding
    three_keys = with_keys(compiled, inline(one, two, three))
    assert policy_widening(three_keys, both) == []
    assert "another place" in policy_widening(both, compiled)[0]


def test_modes_and_provider_kinds_only_tighten(built):
    compiled = built(policy(mode="Permissive")).listeners[8080][0].policy
    assert compiled is not None
    for mode, wider in [("Strict", False), ("Optional", False), ("Permissive", False)]:
        assert bool(policy_widening(compiled, replace(compiled, jwt_mode=mode))) == wider
    strict = replace(compiled, jwt_mode="Strict")
    assert policy_widening(strict, replace(compiled, jwt_mode="Permissive")) == [
        "spec.traffic.jwtAuthentication.mode: Strict → Permissive lets in requests with a bad token"
    ]
    keycloak = replace(compiled.providers[0], kind=ProviderKind.KEYCLOAK)
    (finding,) = policy_widening(compiled, replace(compiled, providers=(keycloak,)))
    assert finding.startswith("spec.traffic.jwtAuthentication.providers[0].kind: none → Keycloak")


def test_the_same_files_built_again_are_never_refused(built):
    # Every build compiles new objects: the comparison is by content, never by identity.
    everything = AUTHORIZATION + SCOPES + TRANSFORM
    before = built(policy(traffic=everything, backend=TOOL_RULES))
    after = built(policy(traffic=everything, backend=TOOL_RULES))
    assert before.listeners[8080][0].policy is not after.listeners[8080][0].policy
    assert reload_problems(before, after) == []
