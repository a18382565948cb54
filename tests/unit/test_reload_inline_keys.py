"""A policy's inline keys as a reload leaves them: a key dropped from `jwks.inline` (revoked)
verifies nothing once the reload is served, though the keyset keeps its name."""

from __future__ import annotations

from support import new_key
from unit.reload_support import call_with, inline_policy, watched_app, write_config

OLD, KEPT, SPARE = new_key("old"), new_key("kept"), new_key("spare")


async def test_a_key_dropped_from_an_inline_keyset_is_refused_after_the_reload(tmp_path):
    config = write_config(tmp_path / "config", inline_policy(OLD, KEPT, SPARE))
    app, watcher = watched_app(config)
    assert (await call_with(app, OLD)).status_code == 200
    (config / "policy.yaml").write_text(inline_policy(KEPT, SPARE))
    assert await watcher.reload(), watcher.last_error
    refused = await call_with(app, OLD)
    assert refused.status_code == 401, refused.text
    assert (await call_with(app, KEPT)).status_code == 200
