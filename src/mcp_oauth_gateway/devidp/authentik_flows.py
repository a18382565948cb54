"""The API's read-only lists of what a fresh install creates (`authentik_startup`): flows
(`/flows/instances/`), certificate key pairs (`/crypto/certificatekeypairs/`) and scope mappings
(`/propertymappings/provider/scope/`), in authentik's representations."""

from __future__ import annotations

import hashlib

from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import Response

from .authentik_drf import API, paginated
from .authentik_state import AuthentikState
from .store import Record


def flow_rep(flow: Record) -> Record:
    """A flow as `FlowSerializer` shows it."""
    return {
        "pk": flow["pk"],
        "policybindingmodel_ptr_id": flow["pk"],
        "name": flow["name"],
        "slug": flow["slug"],
        "title": flow["title"],
        "designation": flow["designation"],
        "background": "",
        "background_url": "/static/dist/assets/images/flow_background.jpg",
        "background_themed_urls": None,
        "stages": [],
        "policies": [],
        "cache_count": 0,
        "policy_engine_mode": "any",
        "compatibility_mode": False,
        "export_url": f"{API}/flows/instances/{flow['slug']}/export/",
        "layout": "stacked",
        "denied_action": "message_continue",
        "authentication": flow["authentication"],
    }


def keypair_rep(keypair: Record) -> Record:
    """A certificate key pair as `CertificateKeyPairSerializer` shows it."""
    key = RSAKey.import_key(keypair["jwk"])
    fingerprint = hashlib.sha256(key.thumbprint().encode()).hexdigest()
    return {
        "pk": keypair["pk"],
        "name": keypair["name"],
        "fingerprint_sha256": fingerprint,
        "fingerprint_sha1": fingerprint[:40],
        "cert_expiry": None,
        "cert_subject": None,
        "private_key_available": True,
        "key_type": "rsa",
        "certificate_download_url": f"{API}/crypto/certificatekeypairs/"
        f"{keypair['pk']}/view_certificate/?download",
        "private_key_download_url": f"{API}/crypto/certificatekeypairs/"
        f"{keypair['pk']}/view_private_key/?download",
        "managed": keypair["managed"],
    }


def mapping_rep(mapping: Record) -> Record:
    """A scope mapping as `ScopeMappingSerializer` shows it."""
    return {
        **{
            k: mapping[k]
            for k in ("pk", "managed", "name", "expression", "scope_name", "description")
        },
        "component": "ak-property-mapping-provider-scope-form",
        "verbose_name": "Scope Mapping",
        "verbose_name_plural": "Scope Mappings",
        "meta_model_name": "authentik_providers_oauth2.scopemapping",
    }


class FlowsApi:
    """The list views of flows, key pairs and scope mappings."""

    def __init__(self, state: AuthentikState):
        self.store = state.store

    async def list_flows(self, request: Request) -> Response:
        slug = request.query_params.get("slug")
        flows = [f for f in self.store.collection("ak_flows") if slug is None or f["slug"] == slug]
        return paginated([flow_rep(f) for f in flows], request)

    async def list_keypairs(self, request: Request) -> Response:
        keypairs = self.store.collection("ak_keypairs")
        return paginated([keypair_rep(k) for k in keypairs], request)

    async def list_mappings(self, request: Request) -> Response:
        q = request.query_params
        managed = q.getlist("managed")
        items = [
            m
            for m in self.store.collection("ak_mappings")
            if ("scope_name" not in q or m["scope_name"] == q["scope_name"])
            and (not managed or m["managed"] in managed)
            and ("name" not in q or m["name"] == q["name"])
        ]
        items.sort(key=lambda m: (m["scope_name"], m["name"]))
        return paginated([mapping_rep(m) for m in items], request)
