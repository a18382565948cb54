"""Which Broker route a record belongs to (`broker/binding.py`): a key from the policy and the
resource alone (the same on every replica), and the part of a shared store each route reads."""

from __future__ import annotations

from mcp_oauth_gateway.broker.binding import RouteStore, route_key
from mcp_oauth_gateway.broker.store import MemoryStore


def test_a_route_key_names_the_policy_and_the_resource():
    a = route_key("tenant-a/mcp", "https://gw.example/a/mcp")
    assert a == route_key("tenant-a/mcp", "https://gw.example/a/mcp")  # every replica's
    others = {
        route_key("tenant-b/mcp", "https://gw.example/a/mcp"),  # another policy, same URL
        route_key("tenant-a/mcp", "https://gw.example/b/mcp"),  # another path
        route_key("tenant-a/mcp", "https://other.example/a/mcp"),  # another host
        route_key("tenant-a/mcp", "http://gw.example/a/mcp"),
        route_key("tenant-a", "/mcp https://gw.example/a/mcp"),  # the parts spelled apart
    }
    assert a not in others
    assert len(others) == 5
    assert len(a) == 32


async def test_a_route_never_finds_another_routes_records_nor_uses_them_up():
    store = MemoryStore()
    a, b = RouteStore(store, "a" * 32), RouteStore(store, "b" * 32)
    await a.put("code", "k", {"client_id": "c"}, 60)
    assert await b.take("code", "k") is None
    assert await a.take("code", "k") == {"client_id": "c"}
    assert await store.take("code", "k") is None  # nor under the key alone
    assert await a.secret() == await b.secret() == await store.secret()
