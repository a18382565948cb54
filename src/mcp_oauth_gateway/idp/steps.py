"""Progress lines, step errors and the step runner shared by the provisioning tools."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TextIO, TypeVar

import httpx

_SECRET_FIELDS = re.compile(
    r'("(?:access_token|refresh_token|id_token|client_secret|password|value|token|'
    r'registration_access_token)"\s*:\s*)"[^"]*"'
)

Context = TypeVar("Context")


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

    def __init__(self, tool: str, total: int, stream: TextIO | None = None):
        self.tool = tool
        self.total = total
        # sys.stderr as it is when the run starts, not as it was when this module was loaded
        # (a default argument would keep a stream since closed or replaced).
        self.stream = stream if stream is not None else sys.stderr
        self.current = 0
        self.step = ""
        # What this run created or changed, so a failure can say what it leaves behind.
        self.made: list[str] = []

    def begin(self, step: str) -> None:
        """Start the next step."""
        self.current += 1
        self.step = step

    def say(self, detail: str) -> None:
        """A progress line for the current step."""
        print(
            f"[{self.tool} {self.current}/{self.total}] {self.step}: {detail}",
            file=self.stream,
            flush=True,
        )

    def record(self, what: str) -> None:
        """Remember an object this run created or changed (named as the error should say)."""
        self.made.append(what)

    def left_behind(self) -> str:
        """`; this run already created …; delete it or re-run …`, or "" if it wrote nothing."""
        if not self.made:
            return ""
        made = (
            self.made[0]
            if len(self.made) == 1
            else ", ".join(self.made[:-1]) + " and " + self.made[-1]
        )
        them = "it" if len(self.made) == 1 else "them"
        return f"; this run already {made}: delete {them} or re-run (a re-run reuses {them})"

    def fail(self, detail: str) -> StepError:
        """The error to raise for the current step."""
        return StepError(
            f"{self.tool} step {self.current}/{self.total} ({self.step}) failed: "
            f"{detail}{self.left_behind()}"
        )


@dataclass(frozen=True)
class Step(Generic[Context]):
    """One provisioning step: the name its progress lines carry and the function doing it."""

    name: str
    run: Callable[[Context], None]


def names(steps: Sequence[Step[Context]]) -> tuple[str, ...]:
    """The step names, in order (what `Progress` counts)."""
    return tuple(step.name for step in steps)


def run_steps(steps: Sequence[Step[Context]], context: Context, progress: Progress) -> None:
    """Run each step in order under its own name."""
    for step in steps:
        progress.begin(step.name)
        step.run(context)
