"""vLLM's KV-event wire format (``vllm/distributed/kv_events.py``), decoded into
:mod:`agentrt_controller.routing.kv_index`'s typed events.

The publisher (a ZMQ PUB socket) sends one multipart message per batch::

    [topic (bytes), seq (8 bytes, big-endian), payload (msgpack)]

``payload`` is msgspec's msgpack encoding of ``KVEventBatch``: an array ``[ts, events,
data_parallel_rank?]`` (older vLLM: a map with those keys); each event is a map tagged by
``"type"`` (``"BlockStored"``, ``"BlockRemoved"``, ``"AllBlocksCleared"``) or, in older vLLM,
an array whose first element is the tag, fields in declaration order.

The replay socket (ZMQ ROUTER) takes ``[b"", start_seq (8 bytes, big-endian)]`` from a DEALER
and answers ``[b"", topic, seq, payload]`` per buffered batch with ``seq >= start_seq``, then
``[b"", b"", -1 (8 bytes, big-endian, signed), b""]`` (vLLM 0.32; older releases send the
same without the topic frame).

Anything else is a :class:`KvEventDecodeError` (a :class:`~agentrt_controller.backends.api.
BackendError`): the subscriber counts it and treats the batch as missing (a gap, resynced).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from agentrt_controller.backends.api import BackendError
from agentrt_controller.routing.kv_index import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    KvEventBatch,
)

__all__ = [
    "END_OF_REPLAY",
    "KvEventDecodeError",
    "decode_batch",
    "decode_seq",
    "encode_seq",
]

#: The replay's end marker, as a sequence number.
END_OF_REPLAY = -1

#: Field order of the array form (vLLM's struct declaration order), after the tag.
_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                  "medium", "lora_name", "extra_keys", "group_idx")  # fmt: skip
_REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")

_decoder = msgspec.msgpack.Decoder()


class KvEventDecodeError(BackendError):
    """A KV-event message that does not follow vLLM's format."""


def encode_seq(seq: int) -> bytes:
    """A sequence number as the 8 bytes vLLM sends (big-endian; -1 = end of replay)."""
    return seq.to_bytes(8, "big", signed=True)


def decode_seq(frame: bytes) -> int:
    """The sequence number in an 8-byte frame. Raises :class:`KvEventDecodeError`."""
    if len(frame) != 8:
        raise KvEventDecodeError(f"a sequence number has 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)


def decode_batch(seq: int, payload: bytes) -> KvEventBatch:
    """The batch numbered ``seq`` in ``payload``. Raises :class:`KvEventDecodeError`."""
    try:
        raw: object = _decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise KvEventDecodeError(f"KV event batch {seq} is not msgpack: {exc}") from exc
    if isinstance(raw, Mapping):
        ts, events, rank = raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")
    elif isinstance(raw, list) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
        rank = raw[2] if len(raw) > 2 else None
    else:
        raise KvEventDecodeError(f"KV event batch {seq} is not [ts, events, rank?]")
    if not isinstance(ts, int | float) or not isinstance(events, list):
        raise KvEventDecodeError(f"KV event batch {seq} has no ts or events list")
    return KvEventBatch(
        seq=seq,
        ts=float(ts),
        events=tuple(_event(seq, e) for e in events),
        data_parallel_rank=rank if isinstance(rank, int) else None,
    )


def _fields(seq: int, raw: object) -> tuple[str, dict[str, object]]:
    fields: dict[str, object]
    if isinstance(raw, Mapping):
        fields = dict(raw)
        tag = fields.pop("type", None)
    elif isinstance(raw, list) and raw:
        tag, values = raw[0], raw[1:]
        names = {"BlockStored": _STORED_FIELDS, "BlockRemoved": _REMOVED_FIELDS}.get(str(tag), ())
        fields = dict(zip(names, values, strict=False))
    else:
        raise KvEventDecodeError(f"KV event batch {seq}: an event is neither map nor array")
    if not isinstance(tag, str):
        raise KvEventDecodeError(f"KV event batch {seq}: an event has no type tag")
    return tag, fields


def _hashes(seq: int, value: object) -> tuple[int | bytes, ...]:
    if not isinstance(value, list) or not all(isinstance(h, int | bytes) for h in value):
        raise KvEventDecodeError(f"KV event batch {seq}: block_hashes must be ints or bytes")
    return tuple(value)


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _extra_keys(value: object) -> tuple[tuple[object, ...] | None, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(tuple(k) if isinstance(k, Sequence) and not isinstance(k, str) else None
                 for k in value)  # fmt: skip


def _event(seq: int, raw: object) -> KvEvent:
    tag, fields = _fields(seq, raw)
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    group = fields.get("group_idx")
    if tag == "BlockRemoved":
        return BlockRemoved(
            block_hashes=_hashes(seq, fields.get("block_hashes")),
            medium=_optional_str(fields.get("medium")),
            group_idx=group if isinstance(group, int) else None,
        )
    if tag != "BlockStored":
        raise KvEventDecodeError(f"KV event batch {seq}: unknown event type {tag!r}")
    hashes = _hashes(seq, fields.get("block_hashes"))
    parent = fields.get("parent_block_hash")
    tokens = fields.get("token_ids")
    size = fields.get("block_size")
    if parent is not None and not isinstance(parent, int | bytes):
        raise KvEventDecodeError(f"KV event batch {seq}: bad parent_block_hash")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise KvEventDecodeError(f"KV event batch {seq}: token_ids must be a list of ints")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise KvEventDecodeError(f"KV event batch {seq}: block_size must be an int >= 1")
    if len(tokens) != size * len(hashes):
        raise KvEventDecodeError(
            f"KV event batch {seq}: {len(tokens)} token ids for {len(hashes)} blocks of {size}"
        )
    return BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=tuple(tokens),
        block_size=size,
        medium=_optional_str(fields.get("medium")),
        lora_name=_optional_str(fields.get("lora_name")),
        extra_keys=_extra_keys(fields.get("extra_keys")),
        group_idx=group if isinstance(group, int) else None,
    )
