"""Resource API: typed models and the YAML loader."""

from .loader import Loaded, LoadResult, load_paths
from .models import Gateway, GatewayBackend, GatewayPolicy, HTTPRoute, Service

__all__ = [
    "Gateway",
    "GatewayBackend",
    "GatewayPolicy",
    "HTTPRoute",
    "LoadResult",
    "Loaded",
    "Service",
    "load_paths",
]
