"""One streamed chat completion over the runtime's tagged ``httpx`` client.

The replay posts JSON and reads the server-sent events itself instead of going through the
``openai`` client: with long multi-turn prompts the client's request transform and per-chunk
model construction cost about 30 ms of CPU per call (measured: 20 s for the 698 calls of a
20-program mixed trace), which a replay at ``--time-scale 10`` multiplies into seconds of fake
latency. The SDK's transport still tags every request (``rt.http_client()``, docs/sdk.md).

Errors (all :class:`~agentrt.errors.LLMCallError`)::

    LLMCallError            an error answer or error event (``status_code``), a malformed
                            event, a timeout
    ├── EndpointUnavailable the connection could not be opened
    └── StreamCut           the connection broke, or the body ended, before ``[DONE]``

:func:`resendable` says which of them a re-send may cure. The caller only ever sees a whole
answer (:class:`StreamedChat`), never part of one, so re-sending a cut call is safe: it is
what an agent framework does with any failed whole-answer call.
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

__all__ = [
    "RESENDABLE_STATUS",
    "UPSTREAM_ERROR_TYPE",
    "StreamCut",
    "StreamedChat",
    "resendable",
    "stream_chat",
]

#: Error answers a re-send may cure: 503, no server up (HAProxy while no controller replica
#: is up; a controller with no healthy backend), and 502, a failed hop (HAProxy's for a
#: server that broke, a controller's for a backend that failed after its own retries). Final:
#: 4xx (the request's own fault, or a deliberate refusal such as 429), 500 (a server bug that
#: a re-send would repeat) and 504 (a timeout: HAProxy's after 11 minutes, a controller's when
#: the call's deadline passed, which a re-send cannot undo).
RESENDABLE_STATUS = frozenset({502, 503})

#: The OpenAI error ``type`` of a controller's 502 (``UpstreamFailed`` in
#: ``agentrt_controller.service.errors``), which a controller also sends as an error event
#: when a backend fails mid-answer. Named here, not imported: importing the controller's
#: service package costs the replay ~0.8 s of CPU at start (a test keeps the two equal).
UPSTREAM_ERROR_TYPE = "upstream_error"


class StreamCut(LLMCallError):
    """The answer's stream ended before ``[DONE]``: the connection closed or broke mid-answer
    (a server or a controller replica died), or before the answer began."""


def resendable(error: LLMCallError) -> bool:
    """Whether re-sending the call that raised ``error`` may succeed: a cut stream, a
    connection that could not be opened, or an answer (or error event) whose status is in
    :data:`RESENDABLE_STATUS`."""
    if isinstance(error, StreamCut | EndpointUnavailable):
        return True
    return error.status_code in RESENDABLE_STATUS


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


def _stream_error(url: str, error: Any) -> LLMCallError:
    """The error event's :class:`LLMCallError`: its status is the event's integer ``code``
    (vLLM's, the emulator's), or 502 for a controller's :data:`UPSTREAM_ERROR_TYPE` (a
    backend failed mid-answer), else None."""
    fields: Mapping[str, Any] = error if isinstance(error, Mapping) else {"message": error}
    code = fields.get("code")
    status = code if isinstance(code, int) else None
    if status is None and fields.get("type") == UPSTREAM_ERROR_TYPE:
        status = 502
    return LLMCallError(
        f"POST {url}: the server ended the stream with an error: "
        f"{str(fields.get('message'))[:300]}",
        status_code=status,
    )


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

    Raises :class:`EndpointUnavailable` when the server cannot be reached, :class:`StreamCut`
    when the connection breaks or the body ends before ``[DONE]``, and :class:`LLMCallError`
    (with ``status_code``) for an error answer or error event, a malformed event or a timeout.
    """
    parts: list[str] = []
    result = StreamedChat("")
    first = True
    done = False
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
                    done = True
                    # Read on to the end of the body rather than leaving here: a response
                    # closed unread takes its connection with it, and a new TCP connection
                    # per call cost ~1.5 ms of CPU on both sides (x --time-scale).
                    continue
                event = json.loads(data)
                if event.get("error"):
                    # The server failed the call mid-stream (vLLM and the emulator send an
                    # error event and end the body): its answer, not a cut connection.
                    raise _stream_error(url, event["error"])
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
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        # ReadError / WriteError / CloseError: the connection broke (reset, or a kept-alive
        # one the peer had closed); RemoteProtocolError: it closed mid-body.
        raise StreamCut(
            f"POST {url}: stream cut before [DONE] ({type(exc).__name__}: {exc})"
        ) from exc
    except httpx.HTTPError as exc:
        raise LLMCallError(f"POST {url} failed: {type(exc).__name__}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise LLMCallError(f"POST {url}: malformed stream event ({exc.msg})") from exc
    if not done:
        raise StreamCut(f"POST {url}: stream cut before [DONE] (the body ended without it)")
    result.text = "".join(parts)
    return result
