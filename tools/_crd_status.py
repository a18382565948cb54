"""The status schemas of the CRDs: conditions and the Gateway API policy ancestors (gen_crds)."""

from __future__ import annotations

from _crd_rules import Schema

from mcp_oauth_gateway.resources import models

# --- status ----------------------------------------------------------------------------------

# metav1.Condition, as the Gateway API CRDs write it (the words are ours).
CONDITION: Schema = {
    "description": "One aspect of the object's state, as the controller last saw it.",
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {
            "description": "When `status` last changed (RFC 3339); it stays while the status does.",
            "type": "string",
            "format": "date-time",
        },
        "message": {
            "description": "What the controller found, in words; for a problem, what is wrong "
            "and where.",
            "type": "string",
            "maxLength": 32768,
        },
        "observedGeneration": {
            "description": "The `metadata.generation` the condition was computed for; lower than "
            "the object's means the controller has not caught up with its latest change.",
            "type": "integer",
            "format": "int64",
            "minimum": 0,
        },
        "reason": {
            "description": "Why the condition has its status, as one CamelCase word such as "
            "`Valid` or `Invalid`.",
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "status": {
            "description": "`True`, `False` or `Unknown`.",
            "type": "string",
            "enum": ["True", "False", "Unknown"],
        },
        "type": {
            "description": "What the condition is about, e.g. `Accepted`.",
            "type": "string",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
    },
}

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def conditions(description: str, min_items: int = 0) -> Schema:
    schema: Schema = {
        "description": description,
        "type": "array",
        "maxItems": 8,
        "items": CONDITION,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }
    if min_items:
        schema["minItems"] = min_items
    return schema


POLICY_CONDITIONS = (
    "`Accepted`: reason `Valid`, or `Invalid` naming every problem (the targeted routes then "
    "answer 503). `Attached`: reason `Attached`, or `TargetNotFound`, `Pending`, `Conflicted`. "
    "`ResolvedRefs`: the signing keys; `KeysetUnavailable` until fetched (the routes serve "
    "nobody), `KeysetStale` while refreshes fail."
)

# GEP-713 PolicyAncestorStatus: the Gateway a targeted route is attached to, per controller.
ANCESTOR_REF: Schema = {
    "description": "The Gateway a targeted route is attached to.",
    "type": "object",
    "required": ["name"],
    "properties": {
        "group": {
            "description": "API group of the Gateway; default `gateway.networking.k8s.io`.",
            "type": "string",
            "default": models.GATEWAY_API_GROUP,
            "maxLength": 253,
            "pattern": "^$|" + DNS_SUBDOMAIN,
        },
        "kind": {
            "description": "Kind of the ancestor: `Gateway`, the default.",
            "type": "string",
            "default": "Gateway",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
        },
        "name": {
            "description": "Name of the Gateway.",
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
        },
        "namespace": {
            "description": "Namespace of the Gateway.",
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        },
        "sectionName": {
            "description": "One listener of the Gateway, when the entry is about it alone.",
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
            "pattern": DNS_SUBDOMAIN,
        },
        "port": {
            "description": "One port of the Gateway, when the entry is about it alone.",
            "type": "integer",
            "format": "int32",
            "minimum": 1,
            "maximum": 65535,
        },
    },
}

ANCESTORS: Schema = {
    "description": "One entry per controller and Gateway serving a targeted route (GEP-713); "
    "entries of other controllers are left as they are.",
    "type": "array",
    "maxItems": 16,
    "x-kubernetes-list-type": "atomic",
    "items": {
        "description": "The policy's status at one Gateway.",
        "type": "object",
        "required": ["ancestorRef", "controllerName", "conditions"],
        "properties": {
            "ancestorRef": ANCESTOR_REF,
            "controllerName": {
                "description": "The controller that wrote the entry, e.g. "
                "`mcp-oauth-gateway.dev/gateway-controller`.",
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN[:-1] + r"\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$",
            },
            "conditions": conditions(
                "The policy's conditions at this Gateway, as in `status.conditions`.", min_items=1
            ),
        },
    },
}
