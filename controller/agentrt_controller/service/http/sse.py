"""Reads a server-sent-event stream as it passes through, without changing it.

Framing follows the SSE specification (WHATWG HTML, "Server-sent events", §9.2.5): a line ends
with CRLF, LF or CR, and an event ends at an empty line, so an event terminator is any two
consecutive line endings — ``\\n\\n``, ``\\r\\n\\r\\n``, ``\\r\\r`` or a mix (``\\r\\n\\n`` ...).
sse-starlette frames with ``\\r\\n\\r\\n`` by default, vLLM and OpenAI with ``\\n\\n``. Every
complete event is handed on as soon as its terminator arrived, in every framing; only an
unterminated tail waits. A CR at the very end of what arrived may be the first half of a CRLF:
the event it ends is complete either way, and a LF that follows in the next chunk is handed on
with the next event (an empty line before it, which a client ignores), so no byte is lost.

Two dialects, one per OpenAI streaming API:

* ``chat`` (``/v1/chat/completions``, ``/v1/completions``): one ``data:`` chunk with choices ≈
  one token on vLLM-like servers (a chunk per decode step); the final ``usage`` object when the
  server sends one; the usage-only chunk the controller asked for on the client's behalf
  (``stream_options.include_usage`` added by the controller, not by the client) can be dropped.
* ``responses`` (``/v1/responses``): every ``*.delta`` event (``response.output_text.delta``,
  ``response.function_call_arguments.delta``, ``response.reasoning_text.delta`` ...) ≈ one
  token; usage from ``response.completed`` (or ``response.incomplete`` / ``response.failed``)
  ``response.usage``, given in the chat dialect's keys (``prompt_tokens``,
  ``completion_tokens``, ``prompt_tokens_details.cached_tokens``) so that charging reads one
  shape. Nothing is ever dropped: the Responses API always reports usage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Literal, NotRequired, TypedDict

__all__ = ["ChatUsage", "Dialect", "SseScanner", "responses_usage"]

Dialect = Literal["chat", "responses"]


class CachedTokens(TypedDict):
    """``prompt_tokens_details`` of :class:`ChatUsage`."""

    #: The answer's ``input_tokens_details.cached_tokens`` as the server sent it (tokens).
    cached_tokens: object


class ChatUsage(TypedDict):
    """A Responses API ``usage`` in the chat dialect's keys (:func:`responses_usage`). The
    values are the server's, unchecked: charging reads the counts it can use."""

    #: ``input_tokens`` (tokens; ``None`` when absent).
    prompt_tokens: object
    #: ``output_tokens`` (tokens; ``None`` when absent).
    completion_tokens: object
    #: Present when the answer had ``input_tokens_details`` (an object).
    prompt_tokens_details: NotRequired[CachedTokens]


#: Two consecutive line endings (CRLF, a CR not followed by LF, or LF): the end of an event.
#: A CR at the end of the buffer counts as a line ending (see the module docstring).
_TERMINATOR = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE_END = re.compile(rb"\r\n|\r|\n")
#: A ``usage`` that is null: OpenAI (and our emulator) put one in every chunk of a stream that
#: asked for usage, and only the last carries numbers. Unescaped quotes occur in JSON only
#: around keys and values, so a text that mentions it does not match.
_NULL_USAGE = re.compile(rb'"usage":\s*null')
#: A Responses API delta event's type (unescaped quotes occur in JSON only around keys and
#: values, never inside a string, so text that mentions it does not match).
_DELTA_TYPE = re.compile(rb'"type":\s*"response\.[a-z_.]+\.delta"')


def responses_usage(usage: object) -> ChatUsage | None:
    """A Responses API ``usage`` object (``input_tokens``, ``output_tokens``,
    ``input_tokens_details.cached_tokens``) in the chat dialect's keys; ``None`` when
    ``usage`` is not an object."""
    if not isinstance(usage, dict):
        return None
    out: ChatUsage = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
    }
    details = usage.get("input_tokens_details")
    if isinstance(details, dict):
        out["prompt_tokens_details"] = {"cached_tokens": details.get("cached_tokens")}
    return out


class SseScanner:
    """Feed raw stream bytes; get back the bytes to forward (whole events only)."""

    __slots__ = (
        "_buffer", "_chat_plain", "_crlf", "_responses", "_strip_usage_chunk", "chunks", "usage"
    )  # fmt: skip

    def __init__(self, *, strip_usage_chunk: bool, dialect: Dialect = "chat") -> None:
        self._buffer = b""
        self._strip_usage_chunk = strip_usage_chunk and dialect == "chat"
        self._responses = dialect == "responses"
        #: Chat dialect: one-line events take the fast path in :meth:`feed`.
        self._chat_plain = dialect == "chat"
        #: A CR was seen: the general framing path from now on (LF-only streams stay fast).
        self._crlf = False
        #: Events that carried output (≈ output tokens so far).
        self.chunks = 0
        #: The last ``usage`` object seen in the stream (chat dialect's keys), if any.
        self.usage: Mapping[str, object] | None = None

    def feed(self, data: bytes) -> tuple[bytes, int]:
        """Returns ``(bytes to forward now, new chunks counted)``; partial events wait."""
        buffer = self._buffer + data
        before = self.chunks
        if not self._crlf and data.find(b"\r") >= 0:
            self._crlf = True
        if self._crlf:
            return self._feed_any(buffer), self.chunks - before
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._buffer = buffer
            return b"", 0
        complete, self._buffer = buffer[: end + 2], buffer[end + 2 :]
        plain = self._chat_plain
        if plain:
            tokens = _plain_tokens(complete)
            if tokens:
                # A read of many token events (a server that writes faster than we read)
                # passes whole: a few scans of the bytes in C, no Python work per event.
                self.chunks += tokens
                return complete, self.chunks - before
            head, tokens = _plain_head(complete)
            if tokens:
                # The read that ends a stream: token events, then the usage chunk and [DONE].
                # The tokens pass whole as above; only the last two are looked at one by one.
                self.chunks += tokens
                rest = self._feed_events(complete[len(head) :])
                return head + rest if rest else head, self.chunks - before
        return self._feed_events(complete), self.chunks - before

    def _feed_events(self, complete: bytes) -> bytes:
        """The events of ``complete`` (LF-framed, ending with a terminator) one by one: what
        to forward."""
        plain = self._chat_plain
        out = []
        for event in complete.split(b"\n\n"):
            if not event:
                continue
            # The common event, one ``data: {...}`` line of a chat stream whose usage is absent
            # or null, decided here in a few byte searches (``find``, as in _plain_tokens);
            # anything else by _keep.
            if (
                plain
                and event.startswith(b"data: {")
                and event.find(b"\n") < 0
                and (
                    event.find(b'"usage"') < 0
                    or event.find(b'"usage": null') >= 0
                    or event.find(b'"usage":null') >= 0
                    or _NULL_USAGE.search(event) is not None
                )
            ):
                if event.find(b'"choices":[]') < 0 and event.find(b'"choices": []') < 0:
                    self.chunks += 1
                out.append(event)
                continue
            if self._keep(event):
                out.append(event)
        return b"\n\n".join(out) + b"\n\n" if out else b""

    def feed_plain(self, data: bytes, send: Callable[[bytes], bool]) -> int:
        """Pass ``data`` to ``send`` when :meth:`feed` would forward it unchanged as a whole
        read of plain token events (chat dialect, no partial event waiting, LF framing,
        ``data`` ends with a terminator, every event a token by :func:`_plain_tokens`); when
        ``send`` took it (returned ``True``), its tokens are counted and returned. ``0`` when
        ``data`` is anything else or ``send`` declined: nothing was done, :meth:`feed`
        decides it."""
        if (
            self._buffer
            or self._crlf
            or not self._chat_plain
            or not data.endswith(b"\n\n")
            or data.find(b"\r") >= 0
        ):
            return 0
        tokens = _plain_tokens(data)
        if not tokens or not send(data):
            return 0
        self.chunks += tokens
        return tokens

    def _feed_any(self, buffer: bytes) -> bytes:
        """Split ``buffer`` at every terminator of any framing; keeps the unterminated rest."""
        out: list[bytes] = []
        start = 0
        for match in _TERMINATOR.finditer(buffer):
            event = buffer[start : match.end()]
            start = match.end()
            if self._keep(event):
                out.append(event)
        self._buffer = buffer[start:]
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left at the end of the stream (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _keep(self, event: bytes) -> bool:
        payload = b""
        for line in _LINE_END.split(event) if self._crlf else event.split(b"\n"):
            if line.startswith(b"data:"):
                payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return True
        if self._responses:
            self._responses_event(payload)
            return True
        has_choices = b'"choices":[]' not in payload and b'"choices": []' not in payload
        # Parsed only when it may carry numbers: a chunk whose usage is null is one token.
        if b'"usage"' in payload and _NULL_USAGE.search(payload) is None:
            parsed = _json(payload)
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

    def _responses_event(self, payload: bytes) -> None:
        if _DELTA_TYPE.search(payload) is not None:  # no parsing on the hot path
            self.chunks += 1
            return
        if b'"usage"' not in payload:
            return
        parsed = _json(payload)
        if not isinstance(parsed, dict):
            return
        kind = parsed.get("type")
        response = parsed.get("response")
        if kind in _FINAL_EVENTS and isinstance(response, dict):
            usage = responses_usage(response.get("usage"))
            if usage is not None:
                self.usage = usage


def _plain_tokens(complete: bytes) -> int:
    """How many events ``complete`` (LF-framed events ending with a terminator) holds when
    all are events the fast path of :meth:`SseScanner.feed` counts as a token and keeps — one
    ``data: {...}`` line each, choices not empty, usage absent or null — else 0; decided for
    all of them at once. A raw LF occurs in JSON only between values, never inside a string,
    so every LF is framing. With ``n`` LFs (``n`` even), ``n / 2 - 1`` of them followed by an
    event's start, and the text starting with one, every run of LFs is exactly one terminator
    followed by the next event (a run of one or of three and more leaves too few); when the
    first LF is the terminator's at the end, there is one event and no other LF. Every
    ``"usage"`` must be a null one (unescaped quotes occur in JSON only around keys and
    values).

    Each search is a ``find`` or a ``count`` (``x in data`` costs twice as much: it tries
    ``x`` as an integer first), the empty choices are looked for only where a ``[]`` is, and
    a read of one event (an engine at decode pace) is counted without counting its LFs."""
    if not complete.startswith(b"data: {"):
        return 0
    if complete.find(b"\n") == len(complete) - 2:
        events = 1
    else:
        lfs = complete.count(b"\n")
        if lfs & 1 or complete.count(b"\n\ndata: {") != lfs // 2 - 1:
            return 0
        events = lfs // 2
    if complete.find(b"[]") >= 0 and (
        complete.find(b'"choices":[]') >= 0 or complete.find(b'"choices": []') >= 0
    ):
        return 0
    usages = complete.count(b'"usage"')
    if usages:
        nulls = complete.count(b'"usage":null')
        if nulls != usages and nulls + complete.count(b'"usage": null') != usages:
            return 0
    return events


def _plain_head(complete: bytes) -> tuple[bytes, int]:
    """``complete`` but its last two events (a stream's end: the usage chunk and ``[DONE]``)
    and its tokens, when those before them are all token events by :func:`_plain_tokens` —
    the last two to be looked at one by one; else ``(b"", 0)``. The head passes only when it
    ends with exactly one terminator after an event, so it ends where splitting ``complete``
    at its terminators cuts it too."""
    last = complete.rfind(b"\n\n", 0, len(complete) - 2)  # the end of the event before it
    cut = complete.rfind(b"\n\n", 0, last) if last > 0 else -1
    if cut < 0:
        return b"", 0
    head = complete[: cut + 2]
    return head, _plain_tokens(head)


#: Responses API events whose ``response`` carries the final usage.
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _json(payload: bytes) -> object:
    try:
        return json.loads(payload)
    except ValueError:
        return None
