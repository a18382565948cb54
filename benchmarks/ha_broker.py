"""Broker clients under load: sign-ins (ha_signin.py), refresh rotations, the same refresh
token sent to two replicas at once, revocations, and tool calls with the access tokens; each
request recorded.

Each signed-in client is a `Session` that remembers what the gateway told it: its current
refresh token (answered 200), the tokens rotated away, whether its last answer was a 503 (which
promises that nothing changed) and whether it revoked its token. `verify` then checks every
promise once the run is over: a refresh token answered 200 still works (else it is a *lost*
effect), a token rotated away or revoked is refused (else a *duplicated* effect, or a *revoked
token accepted*)."""

from __future__ import annotations

import asyncio

from ha_http import Sender
from ha_signin import Session, SignIn

ADD = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
}
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


class BrokerLoad:
    """The Broker route's clients and their operations (each one request or one sign-in)."""

    def __init__(self, sender: Sender, mcp: str):
        self.sender = sender
        self.mcp = mcp
        self.sessions: list[Session] = []
        self.signed_in = 0
        self.signer = SignIn(sender, mcp)
        self._turn = 0

    async def sign_in(self) -> Session | None:
        """A new user signed in (recorded), kept among the sessions."""
        session = await self.signer.sign_in()
        if session is not None:
            self.sessions.append(session)
            self.signed_in += 1
        return session

    def idle(self, now: float, state: str = "live") -> Session | None:
        """The next session in `state` that is free to send a request now."""
        for _ in range(len(self.sessions)):
            self._turn += 1
            session = self.sessions[self._turn % len(self.sessions)]
            if session.state == state and not session.busy and session.not_before <= now:
                return session
        return None

    def _refresh_form(self, session: Session, token: str) -> dict[str, str]:
        return {
            "grant_type": "refresh_token",
            "refresh_token": token,
            "client_id": session.client_id,
            "resource": self.mcp,
        }

    async def refresh(self) -> None:
        """Rotate the next idle session's refresh token."""
        session = self.idle(self.sender.recorder.now())
        if session is None:
            self.sender.recorder.count("refreshes not sent (every session busy)")
            return
        session.busy = True
        try:
            await self._rotate(session)
        finally:
            session.busy = False

    async def _rotate(self, session: Session, choice: int | None = None) -> None:
        """One refresh of `session`'s current token; the session updated as answered."""
        token, owed = session.refresh, session.owed
        record, response = await self.sender.send(
            "refresh",
            "retry after 503" if owed else "rotate",
            "POST",
            f"{self.mcp}/oauth/token",
            (200,),
            choice=choice,
            note=False,
            data=self._refresh_form(session, token),
        )
        if response is None or response.status_code != 400:
            self.sender.recorder.note(record)
        if response is not None and response.status_code == 200:
            tokens = response.json()
            session.rotated.append(token)
            session.refresh, session.access = tokens["refresh_token"], tokens["access_token"]
            session.owed = False
        elif record.outcome == "503" and response is not None:
            session.owed = True
            session.not_before = record.end + int(response.headers["retry-after"])
        elif response is not None and response.status_code == 400:
            session.state = "lost"
            what = "after a 503 that said nothing changed" if owed else "answered 200 before"
            self.sender.recorder.count("lost refresh tokens")
            self.sender.recorder.finding(
                f"lost: a refresh token {what} was refused at {record.replica}, "
                f"t={record.start:.2f}s: {record.detail[:160]}"
            )
        else:
            session.state = "unknown"

    async def race(self) -> None:
        """The next idle session's token sent to two replicas at once: at most one may be
        answered 200 (two are a duplicated effect)."""
        session = self.idle(self.sender.recorder.now())
        if session is None:
            return
        session.busy, session.state = True, "raced"
        form = self._refresh_form(session, session.refresh)
        url = f"{self.mcp}/oauth/token"
        sent = [
            self.sender.send(
                "race", "same token at two replicas", "POST", url, (200, 400), choice=n, data=form
            )
            for n in (0, 1)
        ]
        answers = await asyncio.gather(*sent)
        won = [r for _, r in answers if r is not None and r.status_code == 200]
        self.sender.recorder.count("races")
        if len(won) > 1:
            self.sender.recorder.count("refresh tokens accepted twice")
            self.sender.recorder.finding(
                "duplicated: one refresh token answered 200 at two replicas at "
                f"t={answers[0][0].start:.2f}s"
            )
        session.busy = False

    async def revoke(self) -> None:
        """Revoke the next idle session's refresh token (RFC 7009)."""
        session = self.idle(self.sender.recorder.now())
        if session is None:
            return
        session.busy = True
        form = {
            "token": session.refresh,
            "token_type_hint": "refresh_token",
            "client_id": session.client_id,
        }
        record, response = await self.sender.send(
            "revoke", "revoke", "POST", f"{self.mcp}/oauth/revoke", (200,), data=form
        )
        if response is not None and response.status_code == 200:
            session.state = "revoked"
        elif record.outcome == "503" and response is not None:
            session.owed = True
            session.not_before = record.end + int(response.headers["retry-after"])
        else:
            session.state = "unknown"
        session.busy = False

    async def probe_revoked(self) -> None:
        """A revoked session's token presented again: it must be refused."""
        session = self.idle(self.sender.recorder.now(), "revoked")
        if session is None:
            return
        session.busy = True
        record, response = await self.sender.send(
            "revoked probe",
            "refresh",
            "POST",
            f"{self.mcp}/oauth/token",
            (400,),
            data=self._refresh_form(session, session.refresh),
        )
        if response is not None and response.status_code == 200:
            self.sender.recorder.count("revoked tokens accepted")
            self.sender.recorder.finding(f"revoked token accepted at t={record.start:.2f}s")
            session.state = "unknown"
        session.busy = False

    async def tool_call(self) -> None:
        """`tools/call add` on the Broker route with a signed-in user's access token."""
        if not self.sessions:
            return
        self._turn += 1
        access = self.sessions[self._turn % len(self.sessions)].access
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {access}"}
        _, response = await self.sender.send(
            "tool call",
            "tools/call",
            "POST",
            self.mcp,
            (200,),
            redis=False,
            json=ADD,
            headers=headers,
        )
        if (
            response is not None
            and response.status_code == 200
            and '"text":"5"' not in response.text.replace(" ", "")
        ):
            self.sender.recorder.finding(
                f"tool call answered 200 without its result: {response.text[:200]}"
            )
