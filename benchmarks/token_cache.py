"""Micro-benchmark: the verified-token cache against the number of live tokens, in process.

N users each hold one token (ES256, minted once: an RS256 key would take minutes to sign
50,000); requests pick a token from a Zipf-like distribution (the k-th most active user sends
1/k^s as many requests as the first), as users of a shared gateway do. The authentication stage
(over an ASGI app that does nothing) serves a warm-up, then the measured requests; shown per
cache: the hit rate and the process CPU per request, for the cache before this change (10,000
entries, first in first out), the same size least recently used, and the new default.
Then the memory an entry takes (tracemalloc), for `--token-cache-entries`.
Usage: python benchmarks/token_cache.py [--requests N] [--users N ...] [--skew S]"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import random
import time
import tracemalloc
from collections.abc import Sequence

from joserfc import jwt
from joserfc.jwk import ECKey

from mcp_oauth_gateway.asgi import Message, Receive, Scope, Send
from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.controlplane.snapshot import CompiledProvider, KeysetSource
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from mcp_oauth_gateway.dataplane.bounded import BoundedCache
from mcp_oauth_gateway.dataplane.metrics import Metrics

ISSUER = "https://idp.example/realms/staff"
USERS = (1_000, 5_000, 10_000, 20_000, 50_000)


class FifoCache(BoundedCache[str, object]):
    """The cache as it was: reading an entry does not keep it (first in, first out)."""

    __slots__ = ()

    def get(self, key: str) -> object | None:
        """The value, its place unchanged."""
        return self._entries.get(key)


def tokens(count: int) -> tuple[InlineKeyset, list[str]]:
    """A keyset and `count` tokens it verifies, one per user, claims as a provider's."""
    key = ECKey.generate_key("P-256", parameters={"kid": "k1", "alg": "ES256", "use": "sig"})
    keyset = InlineKeyset(parse_jwks({"keys": [key.as_dict(private=False)]}, version=1))
    now = int(time.time())
    minted = [
        jwt.encode(
            {"alg": "ES256", "kid": "k1", "typ": "at+jwt"},
            {
                "iss": ISSUER,
                "aud": "mcp",
                "sub": f"user-{i}",
                "iat": now,
                "exp": now + 3600,
                "scope": "openid profile mcp:tools",
                "groups": ["users", "mcp-agent"],
                "azp": "mcp-client",
                "jti": f"{i:032x}",
            },
            key,
            algorithms=["ES256"],
        )
        for i in range(count)
    ]
    return keyset, minted


def zipf(users: int, count: int, skew: float, seed: int = 7) -> list[int]:
    """`count` user indices, user k drawn with weight 1/(k+1)^skew (ranks shuffled)."""
    rng = random.Random(seed)
    cumulative = list(itertools.accumulate(1 / (k + 1) ** skew for k in range(users)))
    total = cumulative[-1]
    ranks = list(range(users))
    rng.shuffle(ranks)
    return [ranks[bisect.bisect_left(cumulative, rng.random() * total)] for _ in range(count)]


async def _inner(scope: Scope, receive: Receive, send: Send) -> None:
    """The backend: nothing, so only the stage is timed."""


async def _receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: Message) -> None:
    return None


def stage(keyset: InlineKeyset, size: int, fifo: bool) -> tuple[JwtAuthentication, Metrics]:
    """The authentication stage with a cache of `size`, its counters in fresh Metrics."""
    provider = CompiledProvider(ISSUER, frozenset({"mcp"}), KeysetSource("inline", 0.0), "")
    metrics = Metrics()
    authn = JwtAuthentication(_inner, [(provider, keyset)], None, False, metrics, "Strict", size)  # type: ignore[list-item]
    if fifo:
        authn._cache = FifoCache(size, metrics.token_cache)  # type: ignore[assignment]
    return authn, metrics


async def serve(authn: JwtAuthentication, minted: Sequence[str], picks: Sequence[int]) -> None:
    """One request per pick, through the stage."""
    for i in picks:
        scope: Scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [(b"authorization", b"Bearer " + minted[i].encode())],
        }
        await authn(scope, _receive, _send)


def run(
    keyset: InlineKeyset,
    minted: list[str],
    users: int,
    size: int,
    fifo: bool,
    requests: int,
    skew: float,
) -> tuple[float, float]:
    """Hit rate and CPU µs per request over the measured requests, after a warm-up of as many
    (twice the users when more): the first sight of each token is a miss whatever the cache."""
    authn, metrics = stage(keyset, size, fifo)
    warm = max(requests, 2 * users)
    picks = zipf(users, warm + requests, skew)
    asyncio.run(serve(authn, minted, picks[:warm]))
    counts = metrics.token_cache
    hits, misses = counts.hits, counts.misses
    started = time.process_time()
    asyncio.run(serve(authn, minted, picks[warm:]))
    cpu = time.process_time() - started
    hits, misses = counts.hits - hits, counts.misses - misses
    return hits / (hits + misses), cpu / requests * 1e6


def entry_bytes(keyset: InlineKeyset, minted: list[str], count: int) -> float:
    """Bytes of memory one cached entry holds (token, claims, bookkeeping)."""
    authn, _ = stage(keyset, count, False)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    asyncio.run(serve(authn, minted, range(count)))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return grown / count


def main(argv: Sequence[str] | None = None) -> None:
    """Print the Markdown tables."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--users", type=int, nargs="*", default=list(USERS))
    parser.add_argument("--skew", type=float, default=1.0)
    args = parser.parse_args(argv)
    keyset, minted = tokens(max(args.users))
    caches = [
        ("FIFO 10k (before)", 10_000, True),
        ("LRU 10k", 10_000, False),
        ("LRU 100k (default)", 100_000, False),
    ]
    print(
        f"Zipf skew {args.skew}, {args.requests:,} measured requests after a warm-up of as "
        "many (twice the users when more)"
    )
    print()
    print("| live tokens | " + " | ".join(f"{name} hit % | µs/req" for name, _, _ in caches) + " |")
    print("|---:|" + "---:|---:|" * len(caches))
    for users in args.users:
        cells = []
        for _, size, fifo in caches:
            rate, cpu = run(keyset, minted, users, size, fifo, args.requests, args.skew)
            cells.append(f"{rate * 100:.1f} | {cpu:.0f}")
        print(f"| {users:,} | " + " | ".join(cells) + " |")
    print()
    size = min(5_000, max(args.users))
    print(
        f"memory per entry: {entry_bytes(keyset, minted, size):,.0f} bytes "
        f"(token of {len(minted[0])} characters, 9 claims)"
    )


if __name__ == "__main__":
    main()
