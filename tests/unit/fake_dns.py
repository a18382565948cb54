"""A DNS lookup that answers from a table, for the resolver that checks addresses."""

from __future__ import annotations

import socket


class FakeLookup:
    """DNS stand-in: a fixed answer per host, counting every lookup."""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int, family: socket.AddressFamily) -> list:
        self.calls.append(host)
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in self.answers[host]
        ]
