"""Synthetic agentrt spans for the demo tests (the attributes the SDK and controller set)."""

from __future__ import annotations

from typing import Any

from agentrt_demo.traces import SpanRecord

_T0 = 1_700_000_000_000_000_000  # ns


def _ns(seconds: float) -> int:
    return _T0 + round(seconds * 1e9)


class SpanFactory:
    """Builds program, LLM, tool and controller spans with consistent ids."""

    def __init__(self) -> None:
        self._next = 1
        self.spans: list[SpanRecord] = []

    def _id(self) -> str:
        self._next += 1
        return f"{self._next:016x}"

    def program(
        self,
        name: str,
        start: float,
        end: float,
        *,
        kind: str | None = None,
        status: str = "ok",
        usage: tuple[int, int] | None = None,
    ) -> str:
        """``usage``: (prompt tokens, cached tokens), as the react and coding agents set."""
        program_id = f"p-{name}"
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "agentrt.program.id": program_id,
            "agentrt.program.name": name,
            "agentrt.program.status": status,
        }
        if kind is not None:
            attrs["agentrt.demo.kind"] = kind
        if usage is not None:
            attrs["agentrt.demo.prompt_tokens"], attrs["agentrt.demo.cached_tokens"] = usage
        self.spans.append(
            SpanRecord(
                f"invoke_agent {name}", "a" * 32, self._id(), "", 1, _ns(start), _ns(end), attrs
            )
        )
        return program_id

    def llm(
        self,
        program_id: str,
        node_id: str,
        start: float,
        end: float,
        *,
        queue_s: float | None = None,
        backend: str | None = None,
    ) -> str:
        span_id = self._id()
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "agentrt.program.id": program_id,
            "agentrt.thread.id": node_id.rsplit(":", 1)[0],
            "agentrt.node.id": node_id,
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10,
        }
        if queue_s is not None:
            attrs["agentrt.queue_s"] = queue_s
        self.spans.append(
            SpanRecord("chat m", "a" * 32, span_id, "", 3, _ns(start), _ns(end), attrs)
        )
        if backend is not None:
            self.spans.append(
                SpanRecord(
                    "chat m",
                    "a" * 32,
                    self._id(),
                    span_id,
                    2,
                    _ns(start),
                    _ns(end),
                    {"agentrt.backend": backend, "agentrt.program_id": program_id},
                )
            )
        return span_id

    def tool(self, program_id: str, node_id: str, start: float, end: float) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search",
            "agentrt.program.id": program_id,
            "agentrt.thread.id": node_id.rsplit(":", 1)[0],
            "agentrt.node.id": node_id,
        }
        self.spans.append(
            SpanRecord(
                "execute_tool search", "a" * 32, self._id(), "", 1, _ns(start), _ns(end), attrs
            )
        )
