"""Control plane: resources → immutable snapshot, plus the JWKS and discovery fetchers."""

from .builder import BuildResult, build_from_objects, build_snapshot
from .control import ControlPlane
from .deployment import Deployment
from .snapshot import Snapshot

__all__ = [
    "BuildResult",
    "ControlPlane",
    "Deployment",
    "Snapshot",
    "build_from_objects",
    "build_snapshot",
]
