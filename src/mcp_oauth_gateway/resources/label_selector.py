"""A Kubernetes label selector (`matchLabels`, `matchExpressions`), as Gateway API listeners use
it to say which namespaces' routes they take (`allowedRoutes.namespaces.selector`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import model_validator

from .fields import StrictModel

# Set by the API server on every Namespace (Kubernetes 1.22+) and not writable otherwise: the
# one label a selector can trust to name a namespace. Any other label says whatever whoever may
# label namespaces wants it to say.
NAME_LABEL = "kubernetes.io/metadata.name"


class LabelSelectorRequirement(StrictModel):
    key: str
    """The label's key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the label's value is compared with `values`."""
    values: list[str] = []
    """The values for `In` and `NotIn` (at least one); none for `Exists` and `DoesNotExist`."""

    @model_validator(mode="after")
    def _values(self) -> LabelSelectorRequirement:
        needs = self.operator in ("In", "NotIn")
        if needs and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if not needs and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def holds(self, labels: Mapping[str, str]) -> bool:
        """Whether a set of labels meets this requirement."""
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        found = self.key in labels and labels[self.key] in self.values
        return found if self.operator == "In" else not found


class LabelSelector(StrictModel):
    """Objects whose labels have every `matchLabels` pair and meet every `matchExpressions`
    requirement; an empty selector selects every object."""

    match_labels: dict[str, str] = {}
    """Labels that must be present with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] = []
    """Requirements that must all hold."""

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether the selector selects an object with these labels."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            requirement.holds(labels) for requirement in self.match_expressions
        )

    def trusted(self) -> bool:
        """Whether it reads namespaces by the one label nobody but the API server sets."""
        keys = {*self.match_labels, *(r.key for r in self.match_expressions)}
        return keys == {NAME_LABEL}
