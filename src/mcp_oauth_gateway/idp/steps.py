"""Progress lines and step errors shared by the provisioning tools."""

from __future__ import annotations

import re
import sys
from typing import TextIO

import httpx

_SECRET_FIELDS = re.compile(
    r'("(?:access_token|refresh_token|id_token|client_secret|password|value|token|'
    r'registration_access_token)"\s*:\s*)"[^"]*"')


class StepError(Exception):
    """A provisioning step failed; the message names the step and the server's answer."""


def redact(text: str) -> str:
    """Hide secret-looking JSON values in a server answer before it is shown."""
    return _SECRET_FIELDS.sub(r'\1"***"', text)


def describe(response: httpx.Response) -> str:
    """`HTTP 409: {"errorMessage": …}` with secrets redacted and the body shortened."""
    body = redact(response.text.strip())
    if len(body) > 600:
        body = body[:600] + "…"
    return f"HTTP {response.status_code}" + (f": {body}" if body else " (empty body)")


class Progress:
    """One line per step on stderr: `[tool 3/8] step: detail`."""

    def __init__(self, tool: str, total: int, stream: TextIO = sys.stderr):
        self.tool = tool
        self.total = total
        self.stream = stream
        self.current = 0
        self.step = ""

    def begin(self, step: str) -> None:
        """Start the next step."""
        self.current += 1
        self.step = step

    def say(self, detail: str) -> None:
        """A progress line for the current step."""
        print(f"[{self.tool} {self.current}/{self.total}] {self.step}: {detail}",
              file=self.stream, flush=True)

    def fail(self, detail: str) -> StepError:
        """The error to raise for the current step."""
        return StepError(f"{self.tool} step {self.current}/{self.total} ({self.step}) failed: "
                         f"{detail}")
