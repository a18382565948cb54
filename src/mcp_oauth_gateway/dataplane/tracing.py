"""Optional OpenTelemetry tracing (`serve --tracing otlp`, extra `mcp-oauth-gateway[otel]`).

One server span per request, a child of the caller's `traceparent` when it sends one; the
backend receives the gateway span as its parent. Spans are exported over OTLP/HTTP in batches
from a background thread, configured by the standard `OTEL_EXPORTER_OTLP_*` variables."""

from __future__ import annotations

from typing import Any

from ..asgi import Scope

_PROPAGATION_HEADERS = (b"traceparent", b"tracestate")


class TracingUnavailable(RuntimeError):
    """The `otel` extra is not installed."""


def require() -> None:
    """Raise `TracingUnavailable` unless the OpenTelemetry SDK and OTLP exporter import."""
    otlp_tracer(build=False)


def otlp_tracer(build: bool = True) -> Any:
    """A tracer exporting over OTLP/HTTP; call once per process (after any fork)."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "--tracing otlp needs the otel extra: pip install 'mcp-oauth-gateway[otel]'"
        ) from exc
    if not build:
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": "mcp-oauth-gateway"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("mcp_oauth_gateway")


class RequestTracing:
    """Starts and ends the span of one request; `tracer` is an OpenTelemetry tracer."""

    def __init__(self, tracer: Any):
        from opentelemetry import propagate, trace

        self.tracer = tracer
        self._propagate = propagate
        self._trace = trace

    def start(self, scope: Scope) -> Any:
        """Open the request's span and hand its context to the backend in `scope`'s headers."""
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k in _PROPAGATION_HEADERS
        }
        parent = self._propagate.extract(carrier)
        span = self.tracer.start_span(
            f"{scope['method']} {scope['path']}",
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
        )
        outgoing: dict[str, str] = {}
        self._propagate.inject(outgoing, context=self._trace.set_span_in_context(span))
        scope["headers"] = [
            (k, v) for k, v in scope["headers"] if k not in _PROPAGATION_HEADERS
        ] + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in outgoing.items()]
        return span

    def end(self, span: Any, status: int, route: str) -> None:
        """Record the outcome and close the span."""
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("http.route", route)
        if status >= 500 or status == 0:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end()
