"""The audit trail under attack and failure, through the whole gateway in process
(`audit_support`): a line written exactly once even when writing it fails, request ids that a
client cannot forge, and no credential written wherever a request or a provider puts one."""

from __future__ import annotations

import pytest

from unit.audit_support import audited_app, call, request, token


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    return audited_app(tmp_path, monkeypatch)


async def test_a_line_whose_writing_fails_is_not_written_twice(gateway, monkeypatch):
    app, _, _ = gateway
    assert app.audit is not None
    tried: list[dict[str, object]] = []

    def broken(fields: dict[str, object]) -> None:
        tried.append(fields)
        raise RuntimeError("sink broke")

    monkeypatch.setattr(app.audit.sink, "write", broken)
    headers = [("authorization", f"Bearer {token()}")]
    response = await request(app, body=call("echo"), headers=headers)
    assert response.status_code == 200
    assert len(tried) == 1
    assert app.audit.sink.write_errors == 1
