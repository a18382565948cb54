"""A browser and a client app for tests/e2e/test_provider_a_parity.py: the user signs in on the
provider's own pages (the dev IdP's Keycloak flavour or real Keycloak), consenting or not."""

from __future__ import annotations

import base64
import hashlib
import secrets

import headless_login
import httpx
import pytest

from keycloak_support import USER_PASSWORD, Provider

USER = "parity-ann"
APP = "http://127.0.0.1:9999"
CALLBACK = f"{APP}/cb"


class Browser:
    """Signs in on the provider's own pages (headless_login), noting them; consent yes or no."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, consent: str = "yes") -> None:
        self.pages: list[str] = []
        self.consent = consent
        real = headless_login.submission

        def noted(page: str, user: str, password: str, decision: str):
            action, form = real(page, user, password, decision)
            login = 'type="password"' in page
            self.pages.append("login" if login else "consent")
            if not login and self.consent == "no":  # Keycloak's No button, the dev IdP's Deny
                form |= (
                    {"cancel": "No"}
                    if form.pop("accept", None) is not None
                    else {"decision": "deny"}
                )
            return action, form

        monkeypatch.setattr(headless_login, "submission", noted)

    async def sign_in(self, provider: Provider, client_id: str, scope: str):
        self.pages = []
        verifier = secrets.token_urlsafe(32)
        digest = hashlib.sha256(verifier.encode()).digest()
        challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": CALLBACK}
        params |= {"scope": scope, "state": "st-1", "nonce": "n-1", "code_challenge": challenge}
        params |= {"code_challenge_method": "S256"}
        url = f"{provider.issuer()}/protocol/openid-connect/auth?{httpx.QueryParams(params)}"
        query = await headless_login.sign_in(url, USER, USER_PASSWORD, CALLBACK)
        return query, verifier


def code_form(client_id: str, code: str, verifier: str) -> dict[str, str]:
    form = {"grant_type": "authorization_code", "client_id": client_id, "code": code}
    return form | {"redirect_uri": CALLBACK, "code_verifier": verifier}
