"""Broker mode: the gateway fronts the identity provider as the MCP authorization server."""

from .clients import MetadataDocuments
from .endpoints import Broker
from .store import BrokerStore, MemoryStore, RedisStore

__all__ = ["Broker", "BrokerStore", "MemoryStore", "MetadataDocuments", "RedisStore"]
