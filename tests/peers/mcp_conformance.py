"""An MCP server (the `mcp` SDK) offering what the MCP conformance suite's server scenarios ask
of the server under test (`conformance list`; each scenario's description names a tool, prompt
or resource and the answer it expects), written here from those descriptions:
`python mcp_conformance.py PORT` serves at /mcp.

Tools `test_simple_text`, `test_image_content`, `test_audio_content`, `test_embedded_resource`,
`test_multiple_content_types`, `test_error_handling`, `test_tool_with_progress`,
`test_tool_with_logging`, `test_sampling`, `test_elicitation`; prompts `test_simple_prompt`,
`test_prompt_with_arguments`, `test_prompt_with_embedded_resource`, `test_prompt_with_image`;
resources `test://static-text`, `test://static-binary`, template `test://template/{id}/data`;
completion for the prompt's arguments."""

from __future__ import annotations

import asyncio
import base64
import json
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    AudioContent,
    CallToolResult,
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    SamplingMessage,
    SetLevelRequestParams,
    TextContent,
    TextResourceContents,
)

server = MCPServer("conformance-peer")

# A 1x1 PNG and a WAV of one silent sample, built here (no fixture files).
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c63f8cfc0f01f0005000201a5f1d6c40000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF"
    + (38).to_bytes(4, "little")
    + b"WAVEfmt "
    + bytes.fromhex("10000000010001004011000080220000020010006461746102000000")
    + b"\x00\x00"
).decode()


def text(value: str) -> TextContent:
    return TextContent(type="text", text=value)


def embedded(uri: str, mime: str, value: str) -> EmbeddedResource:
    contents = TextResourceContents(uri=uri, mime_type=mime, text=value)
    return EmbeddedResource(type="resource", resource=contents)


def image() -> ImageContent:
    return ImageContent(type="image", data=PNG, mime_type="image/png")


@server.tool()
def test_simple_text() -> CallToolResult:
    """Answer with one text item."""
    return CallToolResult(content=[text("This is a simple text response for testing.")])


@server.tool()
def test_image_content() -> CallToolResult:
    """Answer with a PNG image."""
    return CallToolResult(content=[image()])


@server.tool()
def test_audio_content() -> CallToolResult:
    """Answer with a WAV sound."""
    return CallToolResult(content=[AudioContent(type="audio", data=WAV, mime_type="audio/wav")])


@server.tool()
def test_embedded_resource() -> CallToolResult:
    """Answer with an embedded text resource."""
    body = "This is an embedded resource content."
    return CallToolResult(content=[embedded("test://embedded-resource", "text/plain", body)])


@server.tool()
def test_multiple_content_types() -> CallToolResult:
    """Answer with text, an image and an embedded resource."""
    data = json.dumps({"test": "data", "value": 123})
    resource = embedded("test://mixed-content-resource", "application/json", data)
    return CallToolResult(content=[text("Multiple content types test:"), image(), resource])


@server.tool()
def test_error_handling() -> CallToolResult:
    """Fail, as a tool result (`isError`)."""
    failure = text("This tool intentionally returns an error for testing")
    return CallToolResult(content=[failure], is_error=True)


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Report progress 0, 50 and 100 of 100."""
    for done in (0, 50, 100):
        await ctx.report_progress(done, 100)
        await asyncio.sleep(0.05)
    return "progress reported"


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Send three info log messages while running."""
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(message)
        await asyncio.sleep(0.05)
    return "logged"


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Ask the client's model (sampling/createMessage)."""
    message = SamplingMessage(role="user", content=text(prompt))
    session = ctx.request_context.session
    answer = await session.create_message(
        [message], max_tokens=100, related_request_id=ctx.request_id
    )
    return f"LLM response: {getattr(answer.content, 'text', answer.content)}"


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Ask the user (elicitation/create) for a user name and an email address."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    session = ctx.request_context.session
    answer = await session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return f"User response: action={answer.action}, content={json.dumps(answer.content)}"


@server.prompt()
def test_simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with two arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[dict]:
    """A prompt embedding the resource it is given."""
    resource = embedded(resourceUri, "text/plain", "Embedded resource content for testing.")
    return [
        {"role": "user", "content": resource.model_dump(by_alias=True, exclude_none=True)},
        {"role": "user", "content": "Please process the embedded resource above."},
    ]


@server.prompt()
def test_prompt_with_image() -> list[dict]:
    """A prompt holding an image."""
    picture = image().model_dump(by_alias=True, exclude_none=True)
    return [
        {"role": "user", "content": picture},
        {"role": "user", "content": "Please analyze the image above."},
    ]


@server.completion()
async def complete(ref, argument, context) -> Completion:
    """Completions for `arg1`: the words starting with what was typed."""
    words = ["paris", "park", "party"]
    return Completion(values=[w for w in words if w.startswith(argument.value)], has_more=False)


@server.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A binary resource (a PNG)."""
    return base64.b64decode(PNG)


@server.resource("test://template/{id}/data", mime_type="application/json")
def template(id: str) -> str:
    """A resource per id."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


async def set_level(ctx, params: SetLevelRequestParams) -> EmptyResult:
    """Accept `logging/setLevel` (so the server declares logging); every message is sent."""
    return EmptyResult()


# MCPServer has no decorator for it: registered as its own `completion()` registers a handler.
server._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)


if __name__ == "__main__":
    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
