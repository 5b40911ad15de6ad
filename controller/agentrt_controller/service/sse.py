"""Reads an OpenAI server-sent-event stream as it passes through, without changing it.

Counts output tokens for quanta (one ``data:`` chunk with choices ≈ one token on vLLM-like
servers, which send a chunk per decode step), picks up the final ``usage`` object when the
server sends one, and can drop the usage-only chunk the controller asked for on the client's
behalf (``stream_options.include_usage`` added by the controller, not by the client).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SseScanner"]


class SseScanner:
    """Feed raw stream bytes; get back the bytes to forward (whole events only)."""

    __slots__ = ("_buffer", "_strip_usage_chunk", "chunks", "usage")

    def __init__(self, *, strip_usage_chunk: bool) -> None:
        self._buffer = b""
        self._strip_usage_chunk = strip_usage_chunk
        #: ``data:`` events that carried at least one choice (≈ output tokens so far).
        self.chunks = 0
        #: The last ``usage`` object seen in the stream, if any.
        self.usage: dict[str, Any] | None = None

    def feed(self, data: bytes) -> tuple[bytes, int]:
        """Returns ``(bytes to forward now, new chunks counted)``; partial events wait."""
        buffer = self._buffer + data
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._buffer = buffer
            return b"", 0
        complete, self._buffer = buffer[: end + 2], buffer[end + 2 :]
        before = self.chunks
        out = [event for event in complete.split(b"\n\n") if event and self._keep(event)]
        forwarded = b"\n\n".join(out) + b"\n\n" if out else b""
        return forwarded, self.chunks - before

    def flush(self) -> bytes:
        """Whatever is left at the end of the stream (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _keep(self, event: bytes) -> bool:
        payload = b""
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return True
        has_choices = b'"choices":[]' not in payload and b'"choices": []' not in payload
        if b'"usage"' in payload:
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                usage = parsed.get("usage")
                if isinstance(usage, dict):
                    self.usage = usage
                choices = parsed.get("choices")
                has_choices = bool(choices) if isinstance(choices, list) else has_choices
                if self._strip_usage_chunk and isinstance(usage, dict) and not has_choices:
                    return False
        if has_choices:
            self.chunks += 1
        return True
