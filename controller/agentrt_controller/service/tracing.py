"""One OpenTelemetry span per proxied call, joined to the client's trace via ``traceparent``.

The tracer provider is passed in explicitly (no global provider is read or set). Without one,
a no-op tracer is used and the client's ``traceparent`` is forwarded unchanged. Prompt and
completion contents are never recorded (docs/controller.md, "Traces").
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["CallTracing"]

_PROPAGATOR = TraceContextTextMapPropagator()


class CallTracing:
    """Starts call spans; :attr:`enabled` is False with no provider (spans are no-ops)."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.enabled = provider is not None
        self._tracer: trace.Tracer = trace.NoOpTracer()
        if provider is not None:
            self._tracer = provider.get_tracer("agentrt.controller")

    def start(self, operation: str, model: str, traceparent: str | None) -> Span:
        """A span ``"{operation} {model}"`` whose parent is the incoming ``traceparent``."""
        if not self.enabled:
            return trace.INVALID_SPAN
        parent: Context | None = None
        if traceparent:
            parent = _PROPAGATOR.extract({"traceparent": traceparent})
        return self._tracer.start_span(
            f"{operation} {model}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": model,
                "gen_ai.provider.name": "agentrt.controller",
            },
        )

    def outgoing_headers(self, span: Span, traceparent: str | None) -> Mapping[str, str]:
        """Trace headers for the backend request: our span as parent, else the client's."""
        if not self.enabled:
            return {"traceparent": traceparent} if traceparent else {}
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier
