#!/usr/bin/env python3
"""Generate the CustomResourceDefinitions of GatewayPolicy, GatewayBackend and
GatewayClassParameters from the models.

    .venv/bin/python tools/gen_crds.py           write deploy/crds/*.yaml
    .venv/bin/python tools/gen_crds.py --check   exit 1 when a committed CRD is out of date

The spec schemas are read from the pydantic models in `mcp_oauth_gateway.resources.models`
(camelCase aliases, Literal enums, length and number bounds, required fields, scalar defaults),
so the API server and the file loader accept the same documents. Their descriptions, which
`kubectl explain` shows, are the docstrings under the fields (a model's own docstring for a
list's items, or for a field without one); a field with neither stops the generator.

Validators are code, not schema: every one the two kinds use must have an entry in
`AFTER_VALIDATORS` or `DECORATED` (tools/_crd_rules.py), saying how it is expressed (an OpenAPI
keyword when one can say it, because editors and offline linters read those too; a CEL rule
only for what OpenAPI cannot say) or that only the controller checks it. A validator without an
entry, or an entry no model uses any more, stops the generator, so the CRDs cannot silently
drift from the models. What the controller refuses beyond the models is listed where it is
checked (`controlplane.policies.CONTROLLER_CHECKS`) and copied into the CRD's header.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import _generated as generated
import yaml
from _crd_rules import AFTER_VALIDATORS, DECORATED, Schema
from _crd_schema import GeneratorError, Walk, described, field_text, schema_for
from _crd_status import ANCESTORS, POLICY_CONDITIONS, conditions
from pydantic import BaseModel

from mcp_oauth_gateway.controlplane.policies import CONTROLLER_CHECKS
from mcp_oauth_gateway.resources import models

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "deploy" / "crds"
# The Helm chart installs the same CRDs from its own crds/ (Helm reads no file outside a chart).
CHART_CRDS = ROOT / "deploy" / "helm" / "mcp-oauth-gateway" / "crds"
GROUP = models.POLICY_API_GROUP
VERSION = "v1alpha1"
REGENERATE = ".venv/bin/python tools/gen_crds.py"


# --- the CRDs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kind:
    """One custom resource kind and how `kubectl get` shows it."""

    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    description: str
    columns: tuple[Schema, ...]
    status: Schema | None  # None: the controller writes none (no status subresource)
    scope: str = "Namespaced"
    # What the controller refuses beyond the schema, said where it is checked.
    compile_checks: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.model.__name__

    @property
    def file(self) -> Path:
        return OUT_DIR / f"{self.plural}.{GROUP}.yaml"


def _condition_column(condition: str) -> Schema:
    return {
        "name": condition,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status',
    }


_AGE: Schema = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_TARGET = ".spec.mcp.targets[0].static"

KINDS = (
    Kind(
        model=models.GatewayPolicy,
        plural="gatewaypolicies",
        short_names=("gwpol",),
        description="OAuth 2.0 for the MCP servers behind the HTTPRoutes it targets: JWT "
        "authentication, MCP OAuth discovery and client registration, CEL authorization, scopes, "
        "rate limits, and what the MCP server receives.",
        # ResolvedRefs too: Accepted and Attached are True for a policy whose keyset cannot be
        # fetched, which serves nobody.
        columns=(
            _condition_column("Accepted"),
            _condition_column("Attached"),
            _condition_column("ResolvedRefs"),
            _AGE,
        ),
        status={
            "description": "Written by the gateway's controller: the policy's conditions, and "
            "the same per Gateway that serves its routes.",
            "type": "object",
            "properties": {"conditions": conditions(POLICY_CONDITIONS), "ancestors": ANCESTORS},
        },
        compile_checks=CONTROLLER_CHECKS,
    ),
    Kind(
        model=models.GatewayBackend,
        plural="gatewaybackends",
        short_names=("gwbe",),
        description="An MCP server that HTTPRoutes send traffic to, named in their backendRefs.",
        columns=(
            {"name": "Host", "type": "string", "jsonPath": f"{_TARGET}.host"},
            {"name": "Port", "type": "integer", "jsonPath": f"{_TARGET}.port"},
            {"name": "Path", "type": "string", "jsonPath": f"{_TARGET}.path"},
            _AGE,
        ),
        status={
            "description": "Written by the gateway's controller.",
            "type": "object",
            "properties": {
                "conditions": conditions(
                    "`Accepted`: True naming the target, or False reason `Invalid` naming the "
                    "problem."
                )
            },
        },
    ),
    Kind(
        model=models.GatewayClassParameters,
        plural="gatewayclassparameters",
        short_names=("gwcp",),
        description="What a GatewayClass of mcp-oauth-gateway allows, named by the class's "
        "parametersRef: which namespaces may own its Gateways. Cluster-scoped, so only those "
        "who may write cluster-wide objects decide.",
        columns=(
            {
                "name": "Namespaces",
                "type": "string",
                "jsonPath": ".spec.allowedGatewayNamespaces",
            },
            _AGE,
        ),
        status=None,
        scope="Cluster",
    ),
)


def spec_schema(kind: Kind, walk: Walk) -> Schema:
    """The schema of `spec`, from the model's `spec` field."""
    info = kind.model.model_fields["spec"]
    node = schema_for(info.annotation, walk, "spec")
    return described(node, field_text(kind.model, "spec"), "spec")


def crd(kind: Kind, walk: Walk) -> Schema:
    """The CustomResourceDefinition of one kind."""
    version: Schema = {"name": VERSION, "served": True, "storage": True}
    if kind.status is not None:
        version["subresources"] = {"status": {}}
    schema: Schema = {
        "description": kind.description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": f"The API version of the object: `{GROUP}/{VERSION}`.",
                "type": "string",
            },
            "kind": {"description": f"The object's kind: `{kind.name}`.", "type": "string"},
            # No description: the API server forbids anything but `type` here.
            "metadata": {"type": "object"},
            "spec": spec_schema(kind, walk),
            **({"status": kind.status} if kind.status is not None else {}),
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # The label kustomize gives every object of deploy/, here too: the Helm chart installs
        # these files as they are, and both installs must be the same objects.
        "metadata": {
            "name": f"{kind.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "mcp-oauth-gateway"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.name,
                "listKind": f"{kind.name}List",
                "plural": kind.plural,
                "singular": kind.name.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["mcp-oauth-gateway"],
            },
            "scope": kind.scope,
            "versions": [
                {
                    **version,
                    "additionalPrinterColumns": list(kind.columns),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


_HEADER = """\
# Generated by tools/gen_crds.py from src/mcp_oauth_gateway/resources/models.py; do not edit.
# Regenerate: {regenerate}
#
# Unknown fields: the schema is structural, so the API server drops fields it does not know
# unless the client asks for strict field validation. `kubectl apply` asks (--validate=strict is
# its default) and fails naming the field, as the file loader does:
#   Error from server (BadRequest): error when creating "policy.yaml": {kind} in version
#   "{version}" cannot be handled as a {kind}: strict decoding error: unknown field "spec.foo"
# `kubectl apply --validate=warn`, and clients that send no fieldValidation, get the object
# created without the field and a warning; `--validate=false` drops it silently.
#
# Checked by the controller, not by this schema (reported as Accepted=False reason=Invalid):
{checks}
"""


def _comment(lines: Iterable[str]) -> str:
    wrapped = (
        textwrap.fill(line, 98, initial_indent="# - ", subsequent_indent="#   ") for line in lines
    )
    return "\n".join(wrapped) or "# - nothing beyond this schema"


class _Dumper(yaml.SafeDumper):
    """Writes a shared sub-schema out in full each time: no YAML anchors in a CRD."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def render(kinds: tuple[Kind, ...] = KINDS) -> dict[Path, str]:
    """The text of every CRD file, by path (`kinds`: a test's own models in place of ours)."""
    walk = Walk()
    out: dict[Path, str] = {}
    for kind in kinds:
        start = len(walk.controller)
        document = crd(kind, walk)
        checks = [*walk.controller[start:], *kind.compile_checks]
        header = _HEADER.format(
            regenerate=REGENERATE, kind=kind.name, version=VERSION, checks=_comment(checks)
        )
        body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
        out[kind.file] = out[CHART_CRDS / kind.file.name] = header + "---\n" + body
    stale = [key for key in (*AFTER_VALIDATORS, *DECORATED) if key not in walk.used]
    if stale:
        raise GeneratorError(
            f"tools/gen_crds.py has rules for validators no model uses any more: {stale}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the CRDs, or with --check report those out of date."""
    description = __doc__.splitlines()[0] if __doc__ else None
    return generated.run(argv, description, render, REGENERATE)


if __name__ == "__main__":
    sys.exit(main())
