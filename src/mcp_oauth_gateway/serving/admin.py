"""The admin listener (`serve --admin-port`, loopback only): a small ASGI app of its own with
metrics, health, readiness, live status and the running configuration (secrets redacted)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ..asgi import Receive, Scope, Send, send_error, send_json
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import CompiledProvider, Snapshot
from ..controlplane.watch import ConfigWatcher
from ..dataplane.metrics import Metrics
from ..urls import shown_url


class ControllerView(Protocol):
    """What controller mode adds to readiness and `/status`."""

    def waiting(self) -> list[str]:
        """Why the process is not ready (empty when it is)."""
        ...

    def state(self) -> dict[str, Any]:
        """The controller's state, shown under `controller` in `/status`."""
        ...


class AdminApp:
    """`/metrics`, `/healthz`, `/readyz`, `/status` (also `/`) and `/config`."""

    def __init__(
        self,
        control: ControlPlane,
        metrics: Metrics | None,
        watcher: ConfigWatcher | None,
        controller: ControllerView | None = None,
    ):
        self.control = control
        self.metrics = metrics
        self.watcher = watcher
        self.controller = controller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].rstrip("/") or "/"
        if path == "/metrics" and self.metrics is not None:
            body = self.metrics.render()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif path == "/healthz":
            await send_json(send, 200, {"status": "ok"})
        elif path == "/readyz":
            waiting = self.not_ready()
            await send_json(
                send, 503 if waiting else 200, {"ready": not waiting, "waitingFor": waiting}
            )
        elif path == "/config":
            await send_json(send, 200, config_dump(self.control.snapshot))
        elif path in ("/", "/status"):
            await send_json(send, 200, self.status())
        else:
            await send_error(
                send,
                404,
                "not_found",
                "admin endpoints: /status, /metrics, /healthz, /readyz, /config",
            )

    def not_ready(self) -> list[str]:
        """Keysets not loaded yet (ready means every policy can verify tokens) and, in
        controller mode, a configuration not yet read or a listener not yet bound."""
        waiting = self.controller.waiting() if self.controller is not None else []
        return waiting + [
            f"keyset {shown_url(url)} ({holder.last_error or 'not yet fetched'})"
            for url, holder in self.control.keysets.items()
            if not holder.available
        ]

    def status(self) -> dict[str, object]:
        """Policy conditions (live), the snapshot's errors and the last rejected reload."""
        snapshot = self.control.snapshot
        out: dict[str, object] = {
            "builtAt": snapshot.built_at,
            "tasks": len(asyncio.all_tasks()),
            "errors": list(snapshot.errors),
            "lastReloadError": self.watcher.last_error if self.watcher else None,
            "policies": [
                {
                    "policy": report.key,
                    "source": report.source,
                    "conditions": [c.as_dict() for c in self.control.conditions(report)],
                }
                for report in snapshot.policies
            ],
        }
        if self.controller is not None:
            out["controller"] = self.controller.state()
        return out


def _shown(url: str | None) -> str | None:
    """An optional URL as /config shows it (see `shown_url`)."""
    return None if url is None else shown_url(url)


def config_dump(snapshot: Snapshot) -> dict[str, object]:
    """Listeners, routes and policies as the data plane uses them."""
    policies: dict[str, dict[str, object]] = {}
    listeners: dict[str, list[dict[str, object]]] = {}
    for port, routes in snapshot.listeners.items():
        listeners[str(port)] = []
        for route in routes:
            listeners[str(port)].append(
                {
                    "route": route.route,
                    "match": f"{route.match_type} {route.match_value}",
                    "backend": f"{route.target.authority}{route.target.path}"
                    if route.target
                    else None,
                    "policy": route.policy.key if route.policy else None,
                }
            )
            policy = route.policy
            if policy is None or policy.key in policies:
                continue
            entry: dict[str, object] = {"invalid": policy.invalid}
            if policy.provider is not None:
                # The first provider at the top level (what one-provider policies show), all
                # of them under `providers`.
                entry.update(_provider_view(policy.provider))
                entry["providers"] = [_provider_view(p) for p in policy.providers]
            if policy.mcp is not None:
                entry["mcp"] = {
                    "provider": policy.mcp.provider,
                    "mode": policy.mcp.mode,
                    "clientId": policy.mcp.client_id,
                    "resource": _shown(policy.mcp.resource),
                    "redisUrl": _shown(policy.mcp.redis_url),
                }
            for name, rules in (
                ("authorization", policy.authorization),
                ("mcpAuthorization", policy.mcp_authorization),
            ):
                if rules is not None:
                    entry[name] = {
                        "action": rules.action,
                        "rules": [e.source for e in rules.expressions],
                    }
            if policy.rate_limit is not None:
                entry["rateLimit"] = {
                    "key": policy.rate_limit.key.source,
                    "capacity": policy.rate_limit.capacity,
                    "perSecond": policy.rate_limit.per_second,
                    "redisUrl": _shown(policy.rate_limit.redis_url),
                }
            policies[policy.key] = entry
    return {"builtAt": snapshot.built_at, "listeners": listeners, "policies": policies}


def _provider_view(provider: CompiledProvider) -> dict[str, object]:
    return {
        "issuer": shown_url(provider.issuer),
        "name": provider.name,
        "audiences": sorted(provider.audiences or []),
        "jwks": "inline" if provider.keyset.inline else shown_url(provider.keyset.url),
    }
