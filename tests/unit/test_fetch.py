"""Reading provider documents whole: bodies that arrive in several packets are not cut."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp.base_protocol import BaseProtocol

from mcp_oauth_gateway.controlplane.fetch import read_at_most


class _OpenConnection(BaseProtocol):
    """Stands in for aiohttp's response protocol: a connection that stays open while the
    test feeds the reader packet by packet."""

    @property
    def connected(self) -> bool:
        return True


async def _stream(chunks: list[bytes]) -> aiohttp.StreamReader:
    loop = asyncio.get_running_loop()
    reader = aiohttp.StreamReader(_OpenConnection(loop), 2**16, loop=loop)

    async def arrive() -> None:
        for chunk in chunks:
            reader.feed_data(chunk)
            await asyncio.sleep(0)  # the next packet comes later
        reader.feed_eof()

    asyncio.get_running_loop().create_task(arrive())
    return reader


async def test_a_body_in_several_packets_is_read_whole():
    parts = [b'{"keys": [', b'{"kid": "a"}', b", ", b'{"kid": "b"}', b"]}"]
    assert await read_at_most(await _stream(parts), 1024) == b"".join(parts)


async def test_a_body_over_the_limit_is_cut_one_byte_past_it():
    body = await read_at_most(await _stream([b"x" * 600, b"y" * 600]), 1000)
    assert len(body) == 1001


async def test_an_empty_body():
    assert await read_at_most(await _stream([]), 10) == b""
