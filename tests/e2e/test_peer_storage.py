"""The oidc-provider peers (tests/node/idp.mjs, upstream_as.mjs) remember what a real provider
remembers: every token until it expires, however much traffic came after it. The library's own
development store keeps only its last 1,000 entries, which made a long failover test's users
"lose" refresh tokens the gateway had kept safely (tests/node/lasting_adapter.mjs)."""

from __future__ import annotations

import json
import subprocess

from support import NODE_DIR, node

# Through the adapter as the provider calls it: a refresh token upserted first, then far more
# entries than the library's store holds, then a token already expired.
SCRIPT = """
import { lastingAdapter } from './lasting_adapter.mjs';
const adapter = lastingAdapter();
const tokens = adapter('RefreshToken');
await tokens.upsert('first', { grantId: 'g1', accountId: 'alice' }, 3600);
for (let i = 0; i < 5000; i += 1) {
  await adapter('Session').upsert(`s${i}`, { uid: `u${i}` }, 3600);
}
await tokens.upsert('gone', { grantId: 'g2' }, -1);
const first = await tokens.find('first');
await tokens.consume('first');
await adapter('RefreshToken').revokeByGrantId('g2');
console.log(JSON.stringify({
  first: first?.accountId ?? null,
  consumed: typeof (await tokens.find('first')).consumed,
  session: (await adapter('Session').findByUid('u0')) !== undefined,
  expired: (await tokens.find('gone')) ?? null,
}));
"""


def test_the_peers_store_forgets_only_what_expired():
    done = subprocess.run(
        [node(), "--input-type=module", "-e", SCRIPT],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "first": "alice",
        "consumed": "number",
        "session": True,
        "expired": None,
    }


def test_both_providers_use_it():
    for peer in ("idp.mjs", "upstream_as.mjs"):
        text = (NODE_DIR / peer).read_text()
        assert "adapter: lastingAdapter()," in text, peer
