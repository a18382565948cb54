"""Control plane: resources → immutable snapshot, plus the JWKS and discovery fetchers."""

from .control import ControlPlane
from .snapshot import Snapshot, build_snapshot

__all__ = ["ControlPlane", "Snapshot", "build_snapshot"]
