"""The admin listener (`serve --admin-port`, loopback by default): a small ASGI app of its own
with metrics, health, readiness, live status and the running configuration (secrets redacted);
and the health listener (`serve --health-port`), which a pod's probes reach on the pod's address:
health and readiness alone, saying nothing of the configuration."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ..asgi import Receive, Scope, Send, send_error, send_json
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import CompiledPolicy, CompiledRoute, Snapshot
from ..controlplane.watch import ConfigWatcher
from ..dataplane.metrics import Metrics
from ..urls import shown_url
from .drain import Drain
from .federation_status import federation_rows, federation_status, refresh_federation
from .process_state import ProcessState
from .stages import PIPELINE, stages_for


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
        process_state: ProcessState | None = None,
        drain: Drain | None = None,
    ):
        self.control = control
        # The gateway's own steps this process runs (`stages.ENTRY`), set once they are built.
        self.entry: tuple[str, ...] = ()
        self.drain = drain
        self.metrics = metrics
        self.watcher = watcher
        self.controller = controller
        # Where federated routes keep their targets' health (with their sessions).
        self.process_state = process_state
        if metrics is not None and process_state is not None:
            metrics.watch_federation(lambda: federation_rows(self.control.snapshot, process_state))
            metrics.watch_redis(
                lambda: [(c.shown, c.up, c.failures) for c in process_state.redis.all()]
            )

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
            await send_json(send, *self.readiness(detailed=True))
        elif path == "/config":
            await send_json(send, 200, config_dump(self.control.snapshot, self.entry))
        elif path in ("/", "/status"):
            if self.process_state is not None:
                await refresh_federation(self.control.snapshot, self.process_state)
            await send_json(send, 200, self.status())
        else:
            await send_error(
                send,
                404,
                "not_found",
                "admin endpoints: /status, /metrics, /healthz, /readyz, /config",
            )

    @property
    def draining(self) -> bool:
        """Whether SIGTERM started the drain (no load balancer should send requests here)."""
        return self.drain is not None and self.drain.draining

    def readiness(self, detailed: bool) -> tuple[int, dict[str, object]]:
        """/readyz's status and body: `ready`, `draining` while draining and, `detailed` (the
        admin listener), what it waits for."""
        waiting = self.not_ready()
        body: dict[str, object] = {"ready": not waiting}
        if self.draining:
            body["draining"] = True
        if detailed:
            body["waitingFor"] = waiting
            if self.process_state is not None:
                # Shown, not a reason to leave the balancer: every replica shares the Redis,
                # and routes that do not need it serve on (those that do answer 503).
                body["degraded"] = self.process_state.redis.down()
        return 503 if waiting else 200, body

    def not_ready(self) -> list[str]:
        """`draining` once SIGTERM came, keysets not loaded yet (ready means every policy can
        verify tokens) and, in controller mode, a configuration not yet read or a listener not
        yet bound."""
        waiting = ["draining"] if self.draining else []
        if self.controller is not None:
            waiting += self.controller.waiting()
        return waiting + [
            f"keyset {shown_url(url)} ({holder.last_error or 'not yet fetched'})"
            for url, holder in self.control.keysets.items()
            if not holder.available
        ]

    def status(self) -> dict[str, object]:
        """Policy conditions (live), the snapshot's errors, the last rejected reload and the
        federated routes' targets' health."""
        snapshot = self.control.snapshot
        out: dict[str, object] = {
            "builtAt": snapshot.built_at,
            "tasks": len(asyncio.all_tasks()),
            "errors": list(snapshot.errors),
            "lastReloadError": self.watcher.last_error if self.watcher else None,
            # SIGTERM came: finishing what is in flight, accepting nothing new.
            "draining": self.draining,
            # File mode: polls, changed files waited for while their writer has them open.
            "reload": self.watcher.state() if self.watcher else None,
            "policies": [
                {
                    "policy": report.key,
                    "source": report.source,
                    "conditions": [c.as_dict() for c in self.control.conditions(report)],
                }
                for report in snapshot.policies
            ],
        }
        if self.process_state is not None:
            # Route → rule → target: up or down as last seen, the last failure, its counts.
            out["federation"] = federation_status(snapshot, self.process_state)
            out["redis"] = [c.view() for c in self.process_state.redis.all()]
        if self.controller is not None:
            out["controller"] = self.controller.state()
        return out


class HealthApp:
    """`/healthz` and `/readyz` only: whether the process is up and ready, and not why (what
    it waits for names keysets, listeners and the API server: the admin listener says)."""

    def __init__(self, admin: AdminApp):
        self.admin = admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].rstrip("/") or "/"
        if path == "/healthz":
            await send_json(send, 200, {"status": "ok"})
        elif path == "/readyz":
            # Whether it drains is no secret, and tells an operator why a replica went unready.
            await send_json(send, *self.admin.readiness(detailed=False))
        else:
            why = "the health listener answers /healthz and /readyz only"
            await send_error(send, 404, "not_found", why)


def config_dump(snapshot: Snapshot, entry: tuple[str, ...] = ()) -> dict[str, object]:
    """The gateway's own steps (`entry`), listeners, routes (with the stages each runs) and
    policies as the data plane uses them: each policy shows what every stage of `PIPELINE`
    reads of it."""
    policies: dict[str, dict[str, object]] = {}
    listeners: dict[str, list[dict[str, object]]] = {}
    for port, routes in snapshot.listeners.items():
        listeners[str(port)] = [_route_view(route) for route in routes]
        for route in routes:
            policy = route.policy
            if policy is not None and policy.key not in policies:
                policies[policy.key] = _policy_view(policy)
    return {
        "builtAt": snapshot.built_at,
        "entry": list(entry),
        "listeners": listeners,
        "policies": policies,
    }


def _route_view(route: CompiledRoute) -> dict[str, object]:
    target = route.target
    view: dict[str, object] = {
        "route": route.route,
        "match": f"{route.match_type} {route.match_value}",
        "backend": target.url if target else None,
        "policy": route.policy.key if route.policy else None,
        "stages": [stage.name for stage in stages_for(route)],
    }
    if route.federated:
        view["targets"] = {t.name: t.url for t in route.targets}
    return view


def _policy_view(policy: CompiledPolicy) -> dict[str, object]:
    entry: dict[str, object] = {"invalid": policy.invalid}
    for stage in PIPELINE:
        if stage.view is not None:
            entry.update(stage.view(policy))
    return entry
