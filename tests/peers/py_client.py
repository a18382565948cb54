"""A real Python MCP client (the `mcp` SDK's OAuth client, 1.x or 2.x) signs in through the
gateway headlessly and calls a tool. Usage:

    py_client.py URL USER PASSWORD [STEP_UP_TOOL] [--again]

With STEP_UP_TOOL it then calls that tool (with n=1), which needs a scope the first sign-in did
not ask for: the SDK must step up on the 403 by itself. With --again it then forgets its tokens
(not its registration) and signs in once more, in the same browser, as after a restart. Prints
JSON: the scope each sign-in asked for, the pages each one met ("consent" for the gateway's
consent page), the client it was after each session."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from importlib.metadata import version
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).parent))
from headless_login import Jar, sign_in

MAJOR = int(version("mcp").split(".")[0])
CALLBACK = "http://127.0.0.1:53999/callback"


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


async def session(url: str, oauth, report: dict, step_up: str | None) -> None:
    """Connect, list the tools, call `add` (and the step-up tool), into `report`."""
    if MAJOR >= 2:
        import httpx2
        from mcp.client import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(auth=oauth, follow_redirects=True, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            tools = await client.list_tools()
            called = await client.call_tool("add", {"a": 2, "b": 3})
            if step_up:
                stepped = await client.call_tool(step_up, {"n": 1})
                report["step_up"] = stepped.content[0].text
    else:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamablehttp_client

        async with (
            streamablehttp_client(url, auth=oauth) as (read, write, _),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            tools = await client.list_tools()
            called = await client.call_tool("add", {"a": 2, "b": 3})
    report["tools"] = sorted(t.name for t in tools.tools)
    report["result"] = called.content[0].text


class SignIns:
    """The user at one browser for every sign-in: the pages each met and its answer go into
    `report`, the answer's code to the SDK's callback handler."""

    def __init__(self, user: str, password: str, report: dict):
        self.user, self.password, self.report = user, password, report
        self.result: dict = {}
        self.browser = Jar()

    async def redirect_handler(self, authorization_url: str) -> None:
        self.report["authorize"] = authorization_url.split("?")[0]
        query = parse_qs(urlsplit(authorization_url).query)
        self.report.setdefault("sign_ins", []).append(query.get("scope", [""])[0])
        # Each sign-in's answer replaces the last: an error answer must not leave an old code.
        self.result.clear()
        met: list[str] = []
        self.report["met"].append(met)
        answer = await sign_in(
            authorization_url, self.user, self.password, CALLBACK, jar=self.browser, met=met
        )
        self.result.update(answer)

    async def callback_handler(self):
        result = self.result
        if MAJOR < 2:
            return result["code"], result.get("state")
        from mcp.client.auth import AuthorizationCodeResult

        if "code" not in result:
            raise RuntimeError(f"the sign-in ended with {result}")
        return AuthorizationCodeResult(
            code=result["code"], state=result.get("state"), iss=result.get("iss")
        )


def oauth_provider(url: str, storage: Memory, sign_ins: SignIns):
    """The SDK's OAuth client for `url`, registering as py-mcp-MAJOR."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name=f"py-mcp-{MAJOR}", redirect_uris=[CALLBACK]
        ),
        storage=storage,
        redirect_handler=sign_ins.redirect_handler,
        callback_handler=sign_ins.callback_handler,
    )


def failure(exc: BaseException) -> str:
    """The exception and, for a group, the first of each level inside it."""
    said = f"{type(exc).__name__}: {exc}"
    inner = getattr(exc, "exceptions", None)
    while inner:
        said += f" <- {type(inner[0]).__name__}: {inner[0]}"
        inner = getattr(inner[0], "exceptions", None)
    return said


async def main(
    url: str,
    user: str,
    password: str,
    step_up: str | None = None,
    again: bool = False,
) -> dict:
    report: dict = {"sdk": f"mcp {version('mcp')}", "met": []}
    sign_ins = SignIns(user, password, report)
    storage = Memory()

    def client_id() -> str | None:
        return storage.client.client_id if storage.client else None

    try:
        await session(url, oauth_provider(url, storage, sign_ins), report, step_up)
        report["client_ids"] = [client_id()]
        if again:  # as after a restart that kept the registration but not the tokens
            storage.tokens = None
            await session(url, oauth_provider(url, storage, sign_ins), report, None)
            report["client_ids"].append(client_id())
        report["client_id"] = client_id()
        report["ok"] = True
    except BaseException as exc:  # report every failure, including exception groups
        report["ok"] = False
        report["error"] = failure(exc)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("user")
    parser.add_argument("password")
    parser.add_argument("step_up", nargs="?")
    parser.add_argument("--again", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(main(args.url, args.user, args.password, args.step_up, args.again))
    print(json.dumps(report))
