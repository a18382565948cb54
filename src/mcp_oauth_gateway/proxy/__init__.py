"""Reverse proxy to the MCP backend, and the upstream client interface it uses."""

from .reverse_proxy import ReverseProxy
from .upstream import AiohttpUpstream, Upstream, UpstreamError

__all__ = ["AiohttpUpstream", "ReverseProxy", "Upstream", "UpstreamError"]
