"""Recording one LLM call: its DAG node, its ``chat {model}`` span and its GenAI metrics.

Shared by the ``chat`` helper and by the transport (for calls made through a raw client the
runtime handed out), so both paths produce the same node, span and metrics.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentrt.program.context import Frame
from agentrt.program.model import Node, NodeStatus
from agentrt.runtime.telemetry import (
    ATTR_NODE_ID,
    ATTR_PROGRAM_ID,
    ATTR_SESSION_ID,
    ATTR_THREAD_ID,
)

if TYPE_CHECKING:
    from agentrt.runtime.runtime import Runtime

__all__ = ["LLMCall"]

_REQUEST_ATTRS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "seed": "gen_ai.request.seed",
}


class LLMCall:
    """Node + span + metrics of one LLM call. ``finish`` exactly once."""

    __slots__ = ("_model", "_t0", "frame", "node", "runtime", "span")

    def __init__(
        self,
        runtime: Runtime,
        frame: Frame,
        model: str,
        *,
        parents: tuple[str, ...] | None = None,
        objective: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> None:
        self.runtime = runtime
        self.frame = frame
        self._model = model
        self.node: Node = frame.run.begin_node(
            frame, "llm", model, parents=parents, objective=objective
        )
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
        }
        if request:
            for key, attr in _REQUEST_ATTRS.items():
                value = request.get(key)
                if isinstance(value, int | float):
                    attributes[attr] = value
            if runtime.config.capture_content and "messages" in request:
                attributes["gen_ai.input.messages"] = _dumps(request["messages"])
        self.span: Span = runtime.instruments.tracer.start_span(
            f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        self._t0 = anyio.current_time()

    def finish(
        self,
        status: NodeStatus,
        *,
        response: dict[str, Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Close the node and the span; ``response`` is the completion as a dict, if any."""
        node, span = self.node, self.span
        metric_attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.runtime.config.provider_name,
            "gen_ai.request.model": self._model,
        }
        if response is not None:
            usage = response.get("usage") or {}
            node.input_tokens = usage.get("prompt_tokens")
            node.output_tokens = usage.get("completion_tokens")
            response_model = response.get("model")
            if response_model:
                span.set_attribute("gen_ai.response.model", response_model)
                metric_attrs["gen_ai.response.model"] = response_model
            if response.get("id"):
                span.set_attribute("gen_ai.response.id", response["id"])
            reasons = [c.get("finish_reason") or "" for c in response.get("choices") or ()]
            if reasons:
                span.set_attribute("gen_ai.response.finish_reasons", reasons)
            if self.runtime.config.capture_content:
                messages = [c.get("message") for c in response.get("choices") or ()]
                span.set_attribute("gen_ai.output.messages", _dumps(messages))
        if node.input_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", node.input_tokens)
        if node.output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", node.output_tokens)
        if node.queue_s is not None:
            span.set_attribute("agentrt.queue_s", node.queue_s)
        span.set_attribute("agentrt.attempts", node.attempts)
        if status == "replayed":
            span.set_attribute("agentrt.replayed", True)
        if error is not None or status in ("error", "cancelled"):
            error_type = type(error).__qualname__ if error is not None else status
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
            metric_attrs["error.type"] = error_type
        self.frame.run.end_node(self.frame.chain, node, status, error)
        span.end()
        inst = self.runtime.instruments
        if status != "replayed":
            inst.operation_duration.record(anyio.current_time() - self._t0, metric_attrs)
        if node.input_tokens is not None:
            inst.token_usage.record(
                node.input_tokens, {**metric_attrs, "gen_ai.token.type": "input"}
            )
        if node.output_tokens is not None:
            inst.token_usage.record(
                node.output_tokens, {**metric_attrs, "gen_ai.token.type": "output"}
            )


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=str)[:65536]
    except (TypeError, ValueError):
        return "<unserialisable>"
