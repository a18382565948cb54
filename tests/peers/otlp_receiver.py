"""An OTLP/HTTP trace and log receiver for tests: decodes what the gateway exports with the
official protobuf definitions and lists the spans at `GET /spans`, the log records at
`GET /logs`."""

from __future__ import annotations

import json
import sys

import uvicorn
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS: list[dict[str, object]] = []
LOGS: list[dict[str, object]] = []


def _value(any_value) -> object:
    kind = any_value.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _logs(body: bytes) -> bytes:
    request = ExportLogsServiceRequest.FromString(body)
    for resource_logs in request.resource_logs:
        service = {a.key: _value(a.value) for a in resource_logs.resource.attributes}
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                LOGS.append(
                    {
                        "service": service.get("service.name"),
                        "event_name": record.event_name,
                        "body": _value(record.body),
                        "attributes": {a.key: _value(a.value) for a in record.attributes},
                    }
                )
    return ExportLogsServiceResponse().SerializeToString()


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] == "POST" and scope["path"] == "/v1/traces":
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    SPANS.append(
                        {
                            "service": service.get("service.name"),
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                        }
                    )
        answer, content_type = (
            ExportTraceServiceResponse().SerializeToString(),
            b"application/x-protobuf",
        )
    elif scope["method"] == "POST" and scope["path"] == "/v1/logs":
        answer, content_type = _logs(body), b"application/x-protobuf"
    elif scope["path"] == "/logs":
        answer, content_type = json.dumps(LOGS).encode(), b"application/json"
    else:
        answer, content_type = json.dumps(SPANS).encode(), b"application/json"
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
    )
    await send({"type": "http.response.body", "body": answer})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
