"""After the run: every promise the gateway made to the Broker clients checked, once Redis and
every replica answer again. A refresh token answered 200 (or answered 503, which says nothing
changed) must still work: else a *lost* effect. A token rotated away must be refused, as reuse:
else a *duplicated* effect; and that reuse revokes the sign-in, so the token just issued must
then be refused too. A revoked token must be refused: else a *revoked token accepted*."""

from __future__ import annotations

import asyncio

import httpx
from ha_broker import BrokerLoad
from ha_http import Sender
from ha_signin import Session

PATIENCE = 60.0  # seconds a check keeps answering 503 before it is a finding
CONCURRENCY = 8


async def _present(
    sender: Sender, load: BrokerLoad, session: Session, token: str, what: str
) -> httpx.Response | None:
    """Refresh with `token`, trying again after each 503's Retry-After for up to PATIENCE."""
    waited = 0.0
    while True:
        record, response = await sender.send(
            "check",
            what,
            "POST",
            f"{load.mcp}/oauth/token",
            (200, 400),
            data={
                "grant_type": "refresh_token",
                "refresh_token": token,
                "client_id": session.client_id,
                "resource": load.mcp,
            },
        )
        if record.outcome != "503" or response is None or waited >= PATIENCE:
            return response
        pause = int(response.headers["retry-after"])
        waited += pause
        await asyncio.sleep(pause)


async def _check_live(sender: Sender, load: BrokerLoad, session: Session) -> None:
    recorder = sender.recorder
    answer = await _present(sender, load, session, session.refresh, "current token works")
    if answer is None or answer.status_code not in (200, 400):
        recorder.count("sessions not checked (no answer)")
        return
    if answer.status_code == 400:
        recorder.count("lost refresh tokens")
        promised = "a 503 that said nothing changed" if session.owed else "its last 200"
        recorder.finding(
            f"lost: a refresh token still held after {promised} was refused: {answer.text[:160]}"
        )
        return
    recorder.count("refresh tokens kept")
    newest = answer.json()["refresh_token"]
    for old in reversed(session.rotated):
        replay = await _present(sender, load, session, old, "rotated token refused")
        if replay is not None and replay.status_code == 200:
            recorder.count("refresh tokens accepted twice")
            recorder.finding("duplicated: a refresh token rotated away was answered 200 again")
        elif replay is not None:
            recorder.count("rotated tokens refused")
    if session.rotated:
        after = await _present(sender, load, session, newest, "family revoked after reuse")
        if after is not None and after.status_code == 200:
            recorder.count("sign-ins not revoked after reuse")
            recorder.finding("a sign-in whose rotated token came back was not revoked")


async def _check_revoked(sender: Sender, load: BrokerLoad, session: Session) -> None:
    answer = await _present(sender, load, session, session.refresh, "revoked token refused")
    if answer is not None and answer.status_code == 200:
        sender.recorder.count("revoked tokens accepted")
        sender.recorder.finding("revoked token accepted after the run")
    elif answer is not None:
        sender.recorder.count("revocations kept")


async def verify(sender: Sender, load: BrokerLoad) -> None:
    """Check every session's promises (a few at a time)."""
    gate = asyncio.Semaphore(CONCURRENCY)
    checks = {"live": _check_live, "revoked": _check_revoked}

    async def one(session: Session) -> None:
        check = checks.get(session.state)
        if check is None:
            sender.recorder.count(f"sessions not checked ({session.state})")
            return
        async with gate:
            await check(sender, load, session)

    await asyncio.gather(*(one(s) for s in load.sessions))
