"""The SSE scanner counts chunks as tokens, finds usage, and keeps bytes faithful."""

from __future__ import annotations

import json

import pytest

from agentrt_controller.service.http import sse
from agentrt_controller.service.http.sse import SseScanner

pytestmark = pytest.mark.timeout(10)


def _event(data: object) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


STREAM = (
    _event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]})
    + _event({"choices": [{"index": 0, "delta": {"content": "b"}}], "usage": None})
    + _event({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]})
    + _event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})
    + b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("piece", [1, 7, 64, len(STREAM)])
def test_counts_chunks_whatever_the_network_splits(piece: int) -> None:
    scanner = SseScanner(strip_usage_chunk=False)
    out, counted = b"", 0
    for start in range(0, len(STREAM), piece):
        forwarded, new = scanner.feed(STREAM[start : start + piece])
        out += forwarded
        counted += new
    out += scanner.flush()
    assert out == STREAM
    assert counted == scanner.chunks == 3
    assert scanner.usage == {"prompt_tokens": 9, "completion_tokens": 3}


def test_strips_only_the_usage_chunk_it_asked_for() -> None:
    scanner = SseScanner(strip_usage_chunk=True)
    out, _ = scanner.feed(STREAM)
    assert b'"usage": {"prompt' not in out
    assert out.endswith(b"data: [DONE]\n\n")
    assert out.count(b"data:") == 4


def test_null_usage_chunks_are_tokens_and_a_text_naming_it_does_not_hide_the_usage() -> None:
    # OpenAI and the emulator put "usage": null in every chunk; the scanner skips parsing them.
    # A text that says "usage": null is escaped inside its JSON string and does not match.
    last = {
        "choices": [{"index": 0, "delta": {"content": 'a "usage": null b'}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2},
    }
    stream = (
        _event({"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": None})
        + _event(last)
        + _event({"choices": [], "usage": None})
        + b"data: [DONE]\n\n"
    )
    scanner = SseScanner(strip_usage_chunk=True)
    out, counted = scanner.feed(stream)
    assert out == stream  # nothing to strip: no usage-only chunk with numbers
    assert counted == 2
    assert scanner.usage == {"prompt_tokens": 4, "completion_tokens": 2}


def test_garbage_is_passed_on_not_raised() -> None:
    scanner = SseScanner(strip_usage_chunk=True)
    junk = b'data: {"usage": broken\n\n: comment\n\ndata: \xff\n\nno terminator'
    out, counted = scanner.feed(junk)
    assert out + scanner.flush() == junk
    assert counted == 2


# --- framing (WHATWG HTML, server-sent events: CRLF, LF or CR line endings) -------------------

FRAMINGS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def _framed(stream: bytes, eol: bytes) -> bytes:
    return stream.replace(b"\n", eol)


@pytest.mark.parametrize("eol", FRAMINGS.values(), ids=FRAMINGS.keys())
@pytest.mark.parametrize("piece", [1, 2, 7, 64, 10_000])
def test_every_framing_is_split_counted_and_passed_on_unchanged(eol: bytes, piece: int) -> None:
    stream = _framed(STREAM, eol)
    scanner = SseScanner(strip_usage_chunk=False)
    out, counted = b"", 0
    for start in range(0, len(stream), piece):
        forwarded, new = scanner.feed(stream[start : start + piece])
        out += forwarded
        counted += new
    out += scanner.flush()
    assert out == stream
    assert counted == 3
    assert scanner.usage == {"prompt_tokens": 9, "completion_tokens": 3}


@pytest.mark.parametrize("eol", FRAMINGS.values(), ids=FRAMINGS.keys())
def test_every_framing_forwards_each_event_as_soon_as_it_is_complete(eol: bytes) -> None:
    first = _framed(_event({"choices": [{"index": 0, "delta": {"content": "a"}}]}), eol)
    second = _framed(_event({"choices": [{"index": 0, "delta": {"content": "b"}}]}), eol)
    scanner = SseScanner(strip_usage_chunk=False)
    out, counted = scanner.feed(first)
    # A lone CR at the end may still become CRLF: the event is complete either way.
    assert (out, counted) == (first, 1)
    out, counted = scanner.feed(second[:5])
    assert (out, counted) == (b"", 0)
    out, counted = scanner.feed(second[5:])
    assert (out, counted) == (second, 1)


@pytest.mark.parametrize("eol", FRAMINGS.values(), ids=FRAMINGS.keys())
def test_every_framing_strips_the_added_usage_chunk(eol: bytes) -> None:
    stream = _framed(STREAM, eol)
    scanner = SseScanner(strip_usage_chunk=True)
    out = b""
    for start in range(0, len(stream), 5):
        out += scanner.feed(stream[start : start + 5])[0]
    out += scanner.flush()
    assert b'"usage": {"prompt' not in out
    assert out.replace(eol, b"\n").count(b"data:") == 4
    assert out.endswith(_framed(b"data: [DONE]\n\n", eol))
    assert scanner.usage == {"prompt_tokens": 9, "completion_tokens": 3}


def test_mixed_line_endings_in_one_stream() -> None:
    events = [
        b'data: {"choices":[{"index":0}]}\r\n\n',
        b'data: {"choices":[{"index":0}]}\n\r\n',
        b'event: x\rdata: {"choices":[{"index":0}]}\r\r',
        b'data: {"choices":[{"index":0}]}\r\r\n',
        b"data: [DONE]\n\n",
    ]
    scanner = SseScanner(strip_usage_chunk=False)
    out, counted = b"", 0
    for event in events:
        forwarded, new = scanner.feed(event)
        out += forwarded
        counted += new
    assert out + scanner.flush() == b"".join(events)
    assert counted == 4


def test_a_crlf_split_between_chunks_loses_no_byte() -> None:
    scanner = SseScanner(strip_usage_chunk=False)
    first, n1 = scanner.feed(b'data: {"choices":[{"index":0}]}\r\n\r')
    second, n2 = scanner.feed(b'\ndata: {"choices":[{"index":0}]}\r\n\r\n')
    assert first == b'data: {"choices":[{"index":0}]}\r\n\r'
    assert second == b'\ndata: {"choices":[{"index":0}]}\r\n\r\n'
    assert n1 + n2 == 2


# --- the Responses API dialect ----------------------------------------------------------------


def _typed(kind: str, **fields: object) -> bytes:
    # Type last, as the openai package's models dump it: detection must not rely on order.
    return b"event: " + kind.encode() + b"\n" + _event({**fields, "type": kind})


RESPONSES_STREAM = (
    _typed("response.created", response={"id": "r", "usage": None})
    + _typed("response.output_item.added", output_index=0, item={"type": "message"})
    + _typed("response.output_text.delta", delta="Hel", item_id="m", output_index=0)
    + _typed("response.output_text.delta", delta='lo "type":"response.x.delta"', item_id="m")
    + _typed("response.function_call_arguments.delta", delta="{}", item_id="f")
    + _typed("response.output_text.done", text="Hello")
    + _typed(
        "response.completed",
        response={
            "id": "r",
            "usage": {
                "input_tokens": 12,
                "output_tokens": 3,
                "input_tokens_details": {"cached_tokens": 8},
                "total_tokens": 15,
            },
        },
    )
)


@pytest.mark.parametrize("eol", FRAMINGS.values(), ids=FRAMINGS.keys())
def test_responses_deltas_count_and_completed_usage_is_read(eol: bytes) -> None:
    stream = _framed(RESPONSES_STREAM, eol)
    scanner = SseScanner(strip_usage_chunk=True, dialect="responses")
    out, counted = b"", 0
    for start in range(0, len(stream), 9):
        forwarded, new = scanner.feed(stream[start : start + 9])
        out += forwarded
        counted += new
    assert out + scanner.flush() == stream  # nothing stripped in this dialect
    assert counted == 3
    assert scanner.usage == {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 8},
    }


#: Events of every kind a chat stream may carry: tokens with and without a null usage, with
#: empty choices, the usage chunk (compact and spaced), text naming usage, comments, several
#: data lines, [DONE].
_KINDS = [
    b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}',
    b'data: {"choices": [{"index": 0, "delta": {"content": "y"}}], "usage": null}',
    b'data: {"choices":[],"usage":null}',
    b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}',
    b'data: {"choices":[],"usage":{"prompt_tokens":6,"completion_tokens":1}}',
    b'data: {"choices":[{"delta":{"content":"\\"usage\\": {\\"prompt_tokens\\": 1}"}}]}',
    b'data: {"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":7}}',
    b": keep-alive comment",
    b'event: message\ndata: {"choices":[{"delta":{"content":"z"}}]}',
    b"data: [DONE]",
]


@pytest.mark.parametrize("strip", [False, True])
@pytest.mark.parametrize("order", range(6))
def test_the_lf_fast_path_decides_like_the_general_one(strip: bool, order: int) -> None:
    # The same events framed with LF (the fast path for one-line events) and with CRLF (every
    # event through the general path) are counted, read and kept alike.
    events = _KINDS[order:] + _KINDS[:order] + _KINDS[::-1]
    results = []
    for eol in (b"\n", b"\r\n"):
        scanner = SseScanner(strip_usage_chunk=strip)
        framed = b"".join(event.replace(b"\n", eol) + eol + eol for event in events)
        out, _ = scanner.feed(framed)
        kept = [e.replace(eol, b"\n") for e in out.split(eol + eol) if e]
        results.append((scanner.chunks, scanner.usage, kept))
    assert results[0] == results[1]
    assert results[0][0] == 10  # five of the kinds carry output, each twice


#: One-line token events a read may hold many of (the whole-read path), and events that send
#: a read through the per-event path: usage numbers, empty choices, [DONE], a comment, an
#: empty event, an event of two lines.
_TOKENS = [_KINDS[0], _KINDS[1], _KINDS[5]]
_OTHERS = [_KINDS[2], _KINDS[3], _KINDS[6], _KINDS[7], _KINDS[8], _KINDS[9], b""]


@pytest.mark.parametrize("strip", [False, True])
@pytest.mark.parametrize("other", [None, *range(len(_OTHERS))])
@pytest.mark.parametrize("at", [0, 3, 8])
def test_a_read_of_many_events_is_decided_like_event_by_event(
    strip: bool, other: int | None, at: int
) -> None:
    # A read of eight token events, or of those with one other event among them, is counted,
    # read and forwarded as the general (CRLF) path does it, byte for byte as it came.
    events = [_TOKENS[i % len(_TOKENS)] for i in range(8)]
    if other is not None:
        events.insert(at, _OTHERS[other])
    results = []
    for eol in (b"\n", b"\r\n"):
        scanner = SseScanner(strip_usage_chunk=strip)
        framed = b"".join(event.replace(b"\n", eol) + eol + eol for event in events)
        out, counted = scanner.feed(framed)
        kept = [e.replace(eol, b"\n") for e in out.split(eol + eol) if e]
        results.append((scanner.chunks, counted, scanner.usage, kept))
        if other is None:
            assert out == framed
    assert results[0] == results[1]
    assert results[0][0] == 8 + (other is not None and _OTHERS[other] in (_KINDS[6], _KINDS[8]))


def test_a_read_that_ends_inside_an_event_forwards_the_complete_ones_whole() -> None:
    scanner = SseScanner(strip_usage_chunk=True)
    events = b"".join(token + b"\n\n" for token in _TOKENS)
    out, counted = scanner.feed(events + b'data: {"choices":[{"delta"')
    assert (out, counted) == (events, 3)
    out, counted = scanner.feed(b':{"content":"w"}}]}\n\n')
    assert (out, counted) == (b'data: {"choices":[{"delta":{"content":"w"}}]}\n\n', 1)


@pytest.mark.parametrize(
    "read",
    [
        b'data: {"a":1}\ndata: {"b":2}\n\n\n',  # runs of one and of three LFs
        b'data: {"a":1}\n\n\n\ndata: {"b":2}\n\n',  # an empty event
        b'data: {"a":1}\n\n\ndata: {"b":2}\n\n',  # a run of three
        b'data: {"a":1}\n\ndata: {"b":2}\n\n\n',  # ends with three
        b'data: {"a":1}\n\n: comment\n\ndata: {"b":2}\n\n',
        b'data: {"a":"data: {"}\n\ndata: {"usage": null}\n\n',
        b'data: {"usage":null,"x":{"usage":{"prompt_tokens":1}}}\n\n',
        b'data: {"a":1}\n\ndata: {"b":2}\n\n',
        # Odd framing just before the last two events (a stream's end: the tail split off).
        b'data: {"a":1}\n\n\ndata: {"b":2}\n\ndata: {"c":3}\n\ndata: [DONE]\n\n',
        b'data: {"a":1}\n\ndata: {"b":2}\n\n\ndata: {"c":3}\n\ndata: [DONE]\n\n',
        b'data: {"a":1}\n\ndata: {"b":2}\n\n\n\ndata: {"c":3}\n\ndata: [DONE]\n\n',
        b'data: {"a":1}\ndata: {"b":2}\n\ndata: {"c":3}\n\ndata: [DONE]\n\n',
        b'data: {"a":1}\n\ndata: {"choices":[]}\n\ndata: {"c":3}\n\ndata: [DONE]\n\n',
        b'data: {"a":1}\n\ndata: {"b":2}\n\n: comment\n\ndata: [DONE]\n\n',
        b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n\n',
        b'data: {"a":1}\n\ndata: [DONE]\n\n',
        b"data: [DONE]\n\n",
    ],
)
def test_odd_framings_are_decided_as_event_by_event(
    read: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole-read check takes only what the per-event path would keep and count as tokens.
    whole = SseScanner(strip_usage_chunk=True)
    got = (whole.feed(read), whole.flush(), whole.chunks, whole.usage)
    monkeypatch.setattr(sse, "_plain_tokens", lambda complete: 0)
    each = SseScanner(strip_usage_chunk=True)
    assert got == (each.feed(read), each.flush(), each.chunks, each.usage)


@pytest.mark.parametrize("strip", [False, True])
@pytest.mark.parametrize("last", range(len(_OTHERS)))
@pytest.mark.parametrize("before", [None, *range(len(_OTHERS))])
def test_a_stream_end_after_many_token_events_is_decided_like_event_by_event(
    strip: bool, last: int, before: int | None
) -> None:
    # Token events, then one or two others (the usage chunk and [DONE] at a stream's end): the
    # tokens pass whole and the last two are looked at one by one, as the general (CRLF)
    # path decides the whole read.
    events = [_TOKENS[i % len(_TOKENS)] for i in range(8)]
    events += ([] if before is None else [_OTHERS[before]]) + [_OTHERS[last]]
    results = []
    for eol in (b"\n", b"\r\n"):
        scanner = SseScanner(strip_usage_chunk=strip)
        framed = b"".join(event.replace(b"\n", eol) + eol + eol for event in events)
        out, counted = scanner.feed(framed)
        kept = [e.replace(eol, b"\n") for e in out.split(eol + eol) if e]
        results.append((scanner.chunks, counted, scanner.usage, kept))
    assert results[0] == results[1]


_READS = [
    b"".join(token + b"\n\n" for token in _TOKENS),
    _KINDS[1] + b"\n\n",
    *(b"".join(token + b"\n\n" for token in _TOKENS) + other + b"\n\n" for other in _OTHERS),
    _TOKENS[0] + b"\n\n" + _TOKENS[1],  # ends inside an event
    _TOKENS[0] + b"\r\n\r\n",
    _TOKENS[0] + b"\n\n\n",
]


@pytest.mark.parametrize("read", _READS)
def test_feed_plain_takes_only_what_feed_would_pass_on_whole(read: bytes) -> None:
    # What feed_plain sends and counts, feed forwards unchanged with the same count; what it
    # leaves, it leaves untouched (nothing counted, nothing sent).
    plain = SseScanner(strip_usage_chunk=True)
    sent: list[bytes] = []
    tokens = plain.feed_plain(read, lambda data: sent.append(data) is None)
    whole = SseScanner(strip_usage_chunk=True)
    forwarded, counted = whole.feed(read)
    if tokens:
        assert sent == [read] and (forwarded, counted) == (read, tokens) == (read, plain.chunks)
    else:
        assert sent == [] and plain.chunks == 0 and plain.feed(read) == (forwarded, counted)


def test_feed_plain_leaves_a_read_the_sender_declines_and_any_read_behind_a_waiting_part() -> None:
    scanner = SseScanner(strip_usage_chunk=True)
    read = _READS[0]
    assert scanner.feed_plain(read, lambda data: False) == 0
    assert scanner.chunks == 0
    assert scanner.feed(read[:10]) == (b"", 0)  # part of an event waits ...
    assert scanner.feed_plain(read, lambda data: True) == 0  # ... so no whole read passes
    assert scanner.feed(read[10:]) == (read, 3)
    assert scanner.feed_plain(read, lambda data: True) == 3
    assert scanner.chunks == 6
    assert scanner.feed(b"data: {}\r\n\r\n")[1] == 1  # a CR: the general framing from now
    assert scanner.feed_plain(read, lambda data: True) == 0


#: Events a read at decode pace may be, one at a time: tokens (vLLM's, OpenAI's with a null
#: usage, with ``[]`` in their text or arguments), and the ones the whole-read check must leave
#: to the per-event path — empty choices (compact and spaced), usage numbers, a comment, two
#: lines, [DONE], a text naming empty choices.
_ONE_EVENT = [
    *_TOKENS,
    b'data: {"choices":[{"index":0,"delta":{"content":"a[]b"}}]}',
    b'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"[]"}}]}}]}',
    b'data: {"choices":[{"delta":{"content":"\\"choices\\":[]"}}]}',
    b'data: {"choices":[],"usage":null}',
    b'data: {"choices": [], "usage": null}',
    b'data: {"choices":[{"delta":{}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}',
    b'data: {"choices":[{"delta":{"content":"x"}}],"usage": null,"x":{"usage":{"a":1}}}',
    b": comment",
    b'event: message\ndata: {"choices":[{"delta":{"content":"z"}}]}',
    b"data: [DONE]",
    b'data: {"choices":[{"delta":{"content":"\\n"}}]}',
]


@pytest.mark.parametrize("tail", [b"\n\n", b"\n\n\n", b"\n\n\n\n", b"\n"])
@pytest.mark.parametrize("event", _ONE_EVENT)
def test_a_read_of_one_event_is_decided_like_event_by_event(
    event: bytes, tail: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read of one event (an engine at decode pace), whatever ends it: the whole-read check
    # (the one-event shortcut, the look for empty choices only where a "[]" is) takes it only
    # when the per-event path would keep it unchanged and count it as a token.
    read = event + tail
    whole = SseScanner(strip_usage_chunk=True)
    sent: list[bytes] = []
    taken = whole.feed_plain(read, lambda data: sent.append(data) is None)
    got = (whole.feed(read) if not taken else (read, taken), whole.flush(), whole.usage)
    monkeypatch.setattr(sse, "_plain_tokens", lambda complete: 0)
    each = SseScanner(strip_usage_chunk=True)
    forwarded, counted = each.feed(read)
    assert got == ((forwarded, counted), each.flush(), each.usage)
    assert whole.chunks == each.chunks
    if taken:
        assert sent == [read] and forwarded == read and counted == 1
    if tail == b"\n\n" and _ONE_EVENT.index(event) < 6:  # the tokens: all taken whole
        assert taken == 1


def test_random_reads_are_decided_like_event_by_event(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reads of one to five events of every kind above, framed with runs of one to three LFs
    # (fixed seed): the whole-read checks decide them as the per-event path does.
    import random

    rng = random.Random(27)
    reads = []
    for _ in range(600):
        events = [rng.choice(_ONE_EVENT) for _ in range(rng.randint(1, 5))]
        reads.append(b"".join(e + b"\n" * rng.choice((2, 2, 2, 1, 3)) for e in events))
    got = []
    for read in reads:
        scanner = SseScanner(strip_usage_chunk=True)
        taken = scanner.feed_plain(read, lambda data: True)
        got.append(((read, taken) if taken else scanner.feed(read), scanner.flush(),
                    scanner.chunks, scanner.usage))  # fmt: skip
    monkeypatch.setattr(sse, "_plain_tokens", lambda complete: 0)
    for read, expected in zip(reads, got, strict=True):
        scanner = SseScanner(strip_usage_chunk=True)
        assert (scanner.feed(read), scanner.flush(), scanner.chunks, scanner.usage) == expected
