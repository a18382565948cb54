"""Data plane: the ASGI app and its pipeline stages."""

from .app import GatewayApp

__all__ = ["GatewayApp"]
