"""One streamed chat completion over the runtime's tagged ``httpx`` client.

The replay posts JSON and reads the server-sent events itself instead of going through the
``openai`` client: with long multi-turn prompts the client's request transform and per-chunk
model construction cost about 30 ms of CPU per call (measured: 20 s for the 698 calls of a
20-program mixed trace), which a replay at ``--time-scale 10`` multiplies into seconds of fake
latency. The SDK's transport still tags every request (``rt.http_client()``, docs/sdk.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from agentrt.errors import EndpointUnavailable, LLMCallError
from agentrt.protocol import HEADER_QUEUE_MS

__all__ = ["StreamedChat", "stream_chat"]


@dataclass(slots=True)
class StreamedChat:
    """What one streamed call returned (``repr`` hides the text)."""

    text: str
    #: From the final ``usage`` event (None when the server sent none).
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    #: ``X-Agentrt-Queue-Ms`` in seconds (None = no such header).
    controller_queue_s: float | None = None

    def __repr__(self) -> str:
        return (
            f"StreamedChat(chars={len(self.text)}, prompt_tokens={self.prompt_tokens}, "
            f"completion_tokens={self.completion_tokens})"
        )


def _queue_s(headers: httpx.Headers) -> float | None:
    raw = headers.get(HEADER_QUEUE_MS)
    if not raw:
        return None
    try:
        value = float(raw) / 1000.0
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _usage(result: StreamedChat, usage: Mapping[str, Any]) -> None:
    result.prompt_tokens = usage.get("prompt_tokens")
    result.completion_tokens = usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        result.cached_tokens = int(details["cached_tokens"])


async def stream_chat(
    http: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    *,
    headers: Mapping[str, str],
    on_first_token: Callable[[], None],
) -> StreamedChat:
    """POST ``body`` (with ``stream: true``) to ``url``; ``on_first_token()`` runs when the
    first content arrives.

    Raises :class:`EndpointUnavailable` when the server cannot be reached and
    :class:`LLMCallError` (with ``status_code``) for an error answer or a broken stream.
    """
    parts: list[str] = []
    result = StreamedChat("")
    first = True
    try:
        async with http.stream("POST", url, json=dict(body), headers=dict(headers)) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:300]
                raise LLMCallError(
                    f"POST {url} answered {response.status_code}: {detail}",
                    status_code=response.status_code,
                )
            result.controller_queue_s = _queue_s(response.headers)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    # Read on to the end of the body rather than leaving here: a response
                    # closed unread takes its connection with it, and a new TCP connection
                    # per call cost ~1.5 ms of CPU on both sides (x --time-scale).
                    continue
                event = json.loads(data)
                if event.get("usage"):
                    _usage(result, event["usage"])
                for choice in event.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        if first:
                            first = False
                            on_first_token()
                        parts.append(content)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise EndpointUnavailable(f"cannot reach {url}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise LLMCallError(f"POST {url} failed: {type(exc).__name__}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise LLMCallError(f"POST {url}: malformed stream event ({exc.msg})") from exc
    result.text = "".join(parts)
    return result
