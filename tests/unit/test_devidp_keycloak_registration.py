"""Dynamic client registration in the Keycloak flavour gives a client the scopes Keycloak 26.7
gives it (probed on the real server): with a `scope`, exactly those as optional client scopes and
of the realm's defaults `basic` alone; without, the realm's defaults and its optional scopes."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from unit.devidp_support import ADMIN, open_keycloak

REGISTER = "/realms/master/clients-registrations/openid-connect"
REDIRECT = "http://127.0.0.1:5555/callback"
REALM_DEFAULTS = ["acr", "basic", "email", "profile", "roles", "web-origins"]
REALM_OPTIONAL = ["address", "microprofile-jwt", "offline_access", "organization", "phone"]


@pytest.fixture
def kc():
    with open_keycloak() as (http, admin):
        http.headers.update(admin)
        yield http


def registered(http: TestClient, **body) -> tuple[dict, dict]:
    """(the registration answer, the client as the admin API shows it)."""
    answer = http.post(
        REGISTER,
        json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", **body},
    )
    assert answer.status_code == 201, answer.text
    client_id = answer.json()["client_id"]
    client = http.get(f"{ADMIN}/clients", params={"clientId": client_id}).json()[0]
    return answer.json(), client


def scope_names(http: TestClient, client: dict, kind: str) -> list[str]:
    listing = http.get(f"{ADMIN}/clients/{client['id']}/{kind}-client-scopes").json()
    return sorted(s["name"] for s in listing)


def test_a_client_registered_without_scope_gets_the_realms_scopes(kc):
    answer, client = registered(kc)
    assert scope_names(kc, client, "default") == REALM_DEFAULTS
    assert scope_names(kc, client, "optional") == REALM_OPTIONAL
    assert sorted(answer["scope"].split(" ")) == REALM_OPTIONAL
    assert client["webOrigins"] == ["http://127.0.0.1:5555"]
    assert (client["consentRequired"], client["fullScopeAllowed"]) == (True, False)
    assert "client_secret" not in answer
    assert answer["post_logout_redirect_uris"] == [REDIRECT]


@pytest.mark.parametrize(
    ("scope", "status"),
    [("profile", 201), ("phone", 201), ("openid", 403), ("openid profile", 403), ("bogus", 403)],
)
def test_the_allowed_client_scopes_policy_allows_the_realms_scopes_only(kc, scope, status):
    answer = kc.post(
        REGISTER,
        json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "scope": scope},
    )
    assert answer.status_code == status, answer.text
    if status == 403:
        assert "Policy 'Allowed Client Scopes' rejected" in answer.json()["error_description"]


def test_a_client_registered_with_a_scope_gets_those_as_optional_scopes_only(kc):
    for policy in kc.get(f"{ADMIN}/components").json():
        if policy["providerId"] == "allowed-client-templates" and policy["subType"] == "anonymous":
            assert kc.delete(f"{ADMIN}/components/{policy['id']}").status_code == 204
    answer, client = registered(kc, scope="openid profile bogus")
    assert scope_names(kc, client, "default") == ["basic"]
    assert scope_names(kc, client, "optional") == ["profile"]
    assert answer["scope"] == "profile"


def test_a_scope_made_a_realm_default_later_reaches_only_clients_created_after(kc):
    _, before = registered(kc)
    created = kc.post(f"{ADMIN}/client-scopes", json={"name": "mcp", "protocol": "openid-connect"})
    scope_id = created.headers["location"].rsplit("/", 1)[1]
    assert kc.put(f"{ADMIN}/default-default-client-scopes/{scope_id}").status_code == 204
    _, after = registered(kc)
    assert "mcp" not in scope_names(kc, before, "default")
    assert "mcp" in scope_names(kc, after, "default")
    assert (
        kc.put(f"{ADMIN}/clients/{before['id']}/default-client-scopes/{scope_id}").status_code
        == 204
    )
    assert "mcp" in scope_names(kc, before, "default")


CANNOT_PARSE = {"error": "unknown_error", "error_description": "Cannot parse the JSON"}


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        (b"not json", {"error": "invalid_request", "error_description": "Cannot parse the JSON"}),
        (b"[1]", CANNOT_PARSE),
        (b'{"redirect_uris": "http://127.0.0.1:9999/cb"}', CANNOT_PARSE),
        (
            b'{"redirect_uris": ["http://127.0.0.1:9999/cb"], "bogus_field": 1}',
            {
                "error": "Invalid json representation for OIDCClientRepresentation. "
                'Unrecognized field "bogus_field" at line 1 column 65.'
            },
        ),
        (
            b'{\n  "a_b": 2\n}',
            {
                "error": "Invalid json representation for OIDCClientRepresentation. "
                'Unrecognized field "a_b" at line 2 column 11.'
            },
        ),
        (
            b'{"redirect_uris":[],"x":{"y":1}}',
            {
                "error": "Invalid json representation for OIDCClientRepresentation. "
                'Unrecognized field "x" at line 1 column 26.'
            },
        ),
        (
            b'{"redirect_uris": ["not a url"]}',
            {
                "error": "invalid_redirect_uri",
                "error_description": "A redirect URI is not a valid URI",
            },
        ),
        (
            b'{"redirect_uris": ["http://127.0.0.1:9999/cb#frag"]}',
            {
                "error": "invalid_redirect_uri",
                "error_description": "A redirect URI must not contain an URL fragment",
            },
        ),
        (
            b'{"redirect_uris": [], "token_endpoint_auth_method": "bogus"}',
            {"error": "invalid_client_metadata", "error_description": "Client metadata invalid"},
        ),
    ],
)
def test_a_body_keycloak_cannot_read_gets_its_400(kc, body, answer):
    """Answers word for word as Keycloak 26.7.3 gave them to the same bodies."""
    refused = kc.post(REGISTER, content=body, headers={"Content-Type": "application/json"})
    assert (refused.status_code, refused.json()) == (400, answer)


@pytest.mark.parametrize(
    ("asked", "grants", "responses"),
    [
        (None, ["authorization_code", "refresh_token"], ["code", "none"]),
        ([], ["authorization_code"], ["code", "none"]),
        (["authorization_code", "bogus"], ["authorization_code"], ["code", "none"]),
        (["client_credentials"], ["client_credentials"], []),
        (["implicit"], ["implicit"], ["id_token", "id_token token"]),
    ],
)
def test_grant_types_are_kept_as_keycloak_keeps_them(kc, asked, grants, responses):
    body = {"redirect_uris": ["relative/path", "myapp:/cb"]}
    if asked is not None:
        body["grant_types"] = asked
    answer = kc.post(REGISTER, json=body)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["grant_types"], answer.json()["response_types"]) == (grants, responses)


def test_a_client_is_updated_with_its_own_representation(kc):
    _, client = registered(kc)
    path = f"{ADMIN}/clients/{client['id']}"
    changed = {
        **client,
        "consentRequired": False,
        "webOrigins": ["+"],
        "directAccessGrantsEnabled": True,
    }
    assert kc.put(path, json=changed).status_code == 204
    shown = kc.get(f"{ADMIN}/clients", params={"clientId": client["clientId"]}).json()[0]
    assert (shown["consentRequired"], shown["webOrigins"], shown["directAccessGrantsEnabled"]) == (
        False,
        ["+"],
        True,
    )
    assert shown["standardFlowEnabled"] is True
    missing = kc.put(f"{ADMIN}/clients/nope", json=changed)
    assert (missing.status_code, missing.json()) == (404, {"error": "Could not find client"})
