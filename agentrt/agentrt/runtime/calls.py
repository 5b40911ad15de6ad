"""Recording one LLM call: its DAG node, its ``chat {model}`` span and its GenAI metrics.

Shared by the ``chat`` helper and by the transport (for calls made through a raw client the
runtime handed out), so both paths produce the same node, span and metrics.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

import anyio
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode

from agentrt.program.model import Node, NodeStatus
from agentrt.runtime.frame import Frame
from agentrt.runtime.services import RuntimeServices
from agentrt.runtime.telemetry import (
    ATTR_NODE_ID,
    ATTR_NODE_PARENT_IDS,
    ATTR_PROGRAM_ID,
    ATTR_SESSION_ID,
    ATTR_THREAD_ID,
)

__all__ = ["ATTR_MODEL_CANDIDATES", "CURRENT_CALL", "LLMCall"]

#: Span attribute: the ordered model candidates of a node given several (docs/sdk.md,
#: "Models"); the span's ``gen_ai.request.model`` is the one that span tried.
ATTR_MODEL_CANDIDATES = "agentrt.model.candidates"

_REQUEST_ATTRS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "seed": "gen_ai.request.seed",
}


class LLMCall:
    """Node + span + metrics of one LLM call. ``finish`` exactly once."""

    __slots__ = ("_model", "_request", "_t0", "frame", "node", "runtime", "span")

    def __init__(
        self,
        runtime: RuntimeServices,
        frame: Frame,
        model: str,
        *,
        parents: tuple[str, ...] | None = None,
        objective: str | None = None,
        request: dict[str, Any] | None = None,
        reuse: Node | None = None,
        candidates: tuple[str, ...] = (),
    ) -> None:
        """``reuse``: a failed node retried (a new span for the new attempt, same node; its
        name becomes ``model``). ``candidates``: the node's ordered models when it was given
        several (``model`` is the one tried now)."""
        self.runtime = runtime
        self.frame = frame
        self._model = model
        self._request = request
        if reuse is not None:
            reuse.status, reuse.ended_s, reuse.error = "running", None, None
            reuse.name = model
            self.node: Node = reuse
        else:
            self.node = frame.run.begin_node(
                frame, "llm", model, parents=parents, objective=objective
            )
            self.node.model_candidates = candidates
        if not runtime.instruments.tracing:
            self.span: Span = INVALID_SPAN
        else:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": runtime.config.provider_name,
                "gen_ai.request.model": model,
                "gen_ai.conversation.id": frame.graph.id,
                "server.address": runtime.server_address,
                "server.port": runtime.server_port,
                ATTR_SESSION_ID: runtime.session_id,
                ATTR_PROGRAM_ID: frame.graph.id,
                ATTR_THREAD_ID: frame.thread.id,
                ATTR_NODE_ID: self.node.id,
                ATTR_NODE_PARENT_IDS: list(self.node.parent_ids),
            }
            if self.node.model_candidates:
                attributes[ATTR_MODEL_CANDIDATES] = list(self.node.model_candidates)
            if request:
                for key, attr in _REQUEST_ATTRS.items():
                    value = request.get(key)
                    if isinstance(value, int | float):
                        attributes[attr] = value
                if runtime.config.capture_content and "messages" in request:
                    attributes["gen_ai.input.messages"] = _dumps(request["messages"])
            self.span = runtime.instruments.tracer.start_span(
                f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
            )
        self._t0 = anyio.current_time()

    def next_model(self, model: str, refused: BaseException) -> LLMCall:
        """The server refused this attempt's model (``refused``: not served, or no backend
        up): end this attempt's span with the error and return the same node's next attempt
        on ``model`` (a new span; the node stays running)."""
        span = self.span
        if span.is_recording():
            error_type = type(refused).__qualname__
            span.set_status(Status(StatusCode.ERROR, error_type))
            span.set_attribute("error.type", error_type)
        span.end()
        return LLMCall(self.runtime, self.frame, model, request=self._request, reuse=self.node)

    def finish(
        self,
        status: NodeStatus,
        *,
        response: dict[str, Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Close the node and the span; ``response`` is the completion as a dict, if any."""
        node, span = self.node, self.span
        config = self.runtime.config
        response_model: str | None = None
        error_type: str | None = None
        if error is not None or status in ("error", "cancelled"):
            error_type = type(error).__qualname__ if error is not None else status
            span.set_status(Status(StatusCode.ERROR, error_type))
        if response is not None:
            usage = response.get("usage") or {}
            node.input_tokens = usage.get("prompt_tokens")
            node.output_tokens = usage.get("completion_tokens")
            response_model = response.get("model") or None
        if span.is_recording():
            # One set_attributes call: each SDK span attribute write takes the span's lock.
            span_attrs: dict[str, Any] = {}
            if node.attempts > 1:
                span_attrs["agentrt.attempts"] = node.attempts
            if response is not None:
                if response_model:
                    span_attrs["gen_ai.response.model"] = response_model
                if response.get("id"):
                    span_attrs["gen_ai.response.id"] = response["id"]
                choices = response.get("choices") or ()
                reasons = [c.get("finish_reason") or "" for c in choices]
                if reasons:
                    span_attrs["gen_ai.response.finish_reasons"] = reasons
                if config.capture_content:
                    messages = [c.get("message") for c in choices]
                    span_attrs["gen_ai.output.messages"] = _dumps(messages)
            if node.input_tokens is not None:
                span_attrs["gen_ai.usage.input_tokens"] = node.input_tokens
            if node.output_tokens is not None:
                span_attrs["gen_ai.usage.output_tokens"] = node.output_tokens
            if node.queue_s is not None:
                span_attrs["agentrt.queue_s"] = node.queue_s
            if status == "replayed":
                span_attrs["agentrt.replayed"] = True
            if error_type is not None:
                span_attrs["error.type"] = error_type
            span.set_attributes(span_attrs)
        self.frame.run.end_node(self.frame.chain, node, status, error)
        span.end()
        inst = self.runtime.instruments
        attrs = inst.chat_attrs(config.provider_name, self._model, response_model, error_type)
        if status != "replayed":
            inst.operation_duration.record(anyio.current_time() - self._t0, attrs.operation)
        if node.input_tokens is not None:
            inst.token_usage.record(node.input_tokens, attrs.input_tokens)
        if node.output_tokens is not None:
            inst.token_usage.record(node.output_tokens, attrs.output_tokens)


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=str)[:65536]
    except (TypeError, ValueError):
        return "<unserialisable>"


#: The LLM call an SDK helper (``chat``) is sending right now, None otherwise: the tagging
#: transport tags the request with this call's node and span instead of recording a raw call.
CURRENT_CALL: ContextVar[LLMCall | None] = ContextVar("agentrt_call", default=None)
