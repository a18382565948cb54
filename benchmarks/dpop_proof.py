"""Micro-benchmark: DPoP proofs verified per second on one core, in process (a report, never a
pass or fail).

What a DPoP-bound call costs the gateway: `verify_proof` on a fresh proof of a client whose key
it has seen (its header segment judged and its key imported once, the common case), the same
for a client seen for the first time (the header read and the key imported on every proof: the
most an attacker sending new keys can make a proof cost), the request's `htu` built from its
parts, and the `jti` recorded in the in-process replay cache. In Broker mode a bound call also
opens the gateway's sealed token (AES-256-GCM, once per token: then a lookup), measured apart.
Process CPU time, so other load on the machine inflates nothing but the wall time.
Usage: python benchmarks/dpop_proof.py [--proofs N] [--algs ES256 RS256 ...]"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable

import orjson
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey
from joserfc.jws import JWSRegistry
from joserfc.util import urlsafe_b64encode

from mcp_oauth_gateway.dpop import (
    BoundToken,
    MemoryReplayCache,
    ProofRules,
    TokenSeal,
    check_replay,
    htu_of,
    verify_proof,
)
from mcp_oauth_gateway.dpop.header import read_header

HTU = "https://gw.example/mcp"
TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJl"
NOW = time.time()


def _b64(data: bytes) -> str:
    return urlsafe_b64encode(data).decode("ascii")


def _key(alg: str) -> Key:
    if alg.startswith("ES"):
        return ECKey.generate_key({"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[alg])
    if alg in ("EdDSA", "Ed25519"):
        return OKPKey.generate_key("Ed25519")
    return RSAKey.generate_key(2048)


def proofs(alg: str, count: int) -> list[str]:
    """`count` proofs of one client (one key), each with its own jti."""
    key = _key(alg)
    head = _b64(orjson.dumps({"typ": "dpop+jwt", "alg": alg, "jwk": key.as_dict(private=False)}))
    ath = _b64(hashlib.sha256(TOKEN.encode()).digest())
    model = JWSRegistry.algorithms[alg]
    made = []
    for _ in range(count):
        claims = {"jti": str(uuid.uuid4()), "htm": "POST", "htu": HTU, "iat": int(NOW), "ath": ath}
        signing_input = f"{head}.{_b64(orjson.dumps(claims))}"
        made.append(f"{signing_input}.{_b64(model.sign(signing_input.encode(), key))}")
    return made


def per_second(values: list[str], each: Callable[[str], object]) -> float:
    """Calls of `each` per second of process CPU time over `values`."""
    start = time.process_time()
    for value in values:
        each(value)
    return len(values) / (time.process_time() - start)


def measure(alg: str, count: int) -> dict[str, float]:
    """The rates of one algorithm's proofs: known key, first-seen key, and with replay."""
    values, rules = proofs(alg, count), ProofRules()

    def verify(value: str) -> object:
        return verify_proof(
            [value], "POST", htu_of("https", "gw.example", "/mcp"), NOW, rules, TOKEN
        )

    def cold(value: str) -> object:
        read_header.cache_clear()
        return verify(value)

    async def with_replay() -> float:
        cache = MemoryReplayCache()
        start = time.process_time()
        for value in values:
            await check_replay(cache, verify(value), NOW, rules.iat_window)
        return len(values) / (time.process_time() - start)

    verify(values[0])  # the header judged once, as for a client already seen
    return {
        "known key": per_second(values, verify),
        "first-seen key": per_second(values, cold),
        "known key + replay cache": asyncio.run(with_replay()),
    }


def measure_sealed(count: int) -> dict[str, float]:
    """The rates of opening the Broker's sealed tokens: each for the first time (decrypted and
    read), and again (the seal's lookup), as a client's every call after its first."""
    route = "0" * 32

    async def secret() -> bytes:
        return b"s" * 32

    async def run() -> dict[str, float]:
        seal = TokenSeal(secret, opened_entries=count)
        inner = TOKEN * 20  # a provider JWT of about 1 KiB
        tokens = [await seal.seal(route, BoundToken(inner, "j" * 43, 0)) for _ in range(count)]
        rates = {}
        for case in ("first open", "opened before"):
            start = time.process_time()
            for token in tokens:
                await seal.open(route, token)
            rates[case] = len(tokens) / (time.process_time() - start)
        return rates

    return asyncio.run(run())


def main() -> None:
    """Print proofs per second per core, per algorithm."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--proofs", type=int, default=2000)
    parser.add_argument("--algs", nargs="+", default=["ES256", "RS256", "EdDSA"])
    options = parser.parse_args()
    print(f"{'alg':<8}{'case':<28}{'proofs/s/core':>14}{'µs/proof':>10}")
    for alg in options.algs:
        for case, rate in measure(alg, options.proofs).items():
            print(f"{alg:<8}{case:<28}{rate:>14,.0f}{1e6 / rate:>10.1f}")
    for case, rate in measure_sealed(options.proofs).items():
        print(f"{'sealed':<8}{case:<28}{rate:>14,.0f}{1e6 / rate:>10.1f}")


if __name__ == "__main__":
    main()
