"""One OpenTelemetry span per proxied call, joined to the client's trace (docs/tracing.md).

The incoming trace context is read from the request's headers by the globally configured
propagator (``opentelemetry.propagate``: W3C ``traceparent`` / ``tracestate`` and ``baggage``
unless ``OTEL_PROPAGATORS`` names others), and the backend request gets it back the same way:
with a tracer provider, our span is the backend's parent (it inherits the client's
``tracestate``); without one, the client's context goes on unchanged. Either way the caller's
``tracestate`` and ``baggage`` reach the backend.

The tracer provider is passed in explicitly: the CLI builds one from the standard ``OTEL_*``
variables (:mod:`agentrt_controller.service.telemetry.otel`); an embedding program passes its
own. Prompt and completion contents are never recorded (docs/controller.md, "Traces").

A call without trace headers, with tracing off and the default W3C propagators, skips the
propagators altogether (about twenty Python calls a call): there is nothing to read and
nothing to forward.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Span, SpanKind, TracerProvider

__all__ = ["CallTracing"]

#: The headers the default propagators (W3C trace context and baggage) read and write.
_W3C_FIELDS = frozenset({"traceparent", "tracestate", "baggage"})
#: The context of a call that sent no trace headers (see the module docstring).
_NOTHING = Context()


class CallTracing:
    """Starts call spans; :attr:`enabled` is False with no provider (spans are no-ops)."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.enabled = provider is not None
        self._tracer: trace.Tracer = trace.NoOpTracer()
        if provider is not None:
            self._tracer = provider.get_tracer("agentrt.controller")
        #: The last global propagator seen, and whether it reads only the W3C headers.
        self._textmap: TextMapPropagator | None = None
        self._w3c_only = False

    def incoming(self, headers: Mapping[str, str]) -> Context:
        """The trace context (parent span, baggage) the client sent in ``headers`` (lower-case
        names); an empty context when it sent none, or none the propagator accepts."""
        textmap = propagate.get_global_textmap()
        if textmap is not self._textmap:  # looked at once per propagator, not per call
            self._textmap, self._w3c_only = textmap, set(textmap.fields) == _W3C_FIELDS
        if (
            self._w3c_only
            and "traceparent" not in headers
            and "tracestate" not in headers
            and "baggage" not in headers
        ):
            return _NOTHING
        return propagate.extract(headers, context=Context())

    def start(self, operation: str, model: str, parent: Context) -> Span:
        """A server span ``"{operation} {model}"``, a child of ``parent``'s span if it has
        one (else the root of a new trace); the invalid span when tracing is off."""
        if not self.enabled:
            return trace.INVALID_SPAN
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

    def outgoing_headers(self, span: Span, parent: Context) -> dict[str, str]:
        """Trace headers for the backend request: ``parent`` with ``span`` as the current span
        (the client's own span when ``span`` is the invalid one), and ``parent``'s baggage."""
        if parent is _NOTHING and not self.enabled:
            return {}  # no span of ours, none of the client's, no baggage: nothing to write
        context = trace.set_span_in_context(span, parent) if self.enabled else parent
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=context)
        return carrier
