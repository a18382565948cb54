"""Reverse proxy to the MCP backend, and the upstream client interface it uses."""

from .reverse_proxy import ReverseProxy
from .upstream import Upstream, UpstreamError

__all__ = ["ReverseProxy", "Upstream", "UpstreamError"]
