"""A fake vLLM KV-event publisher on loopback ZMQ, speaking vLLM's framing: a PUB socket
sending ``[topic, seq (8 bytes big-endian), msgpack batch]`` and a ROUTER replay socket that
answers ``[b"", start_seq]`` with ``[b"", topic, seq, payload]`` per buffered batch from
``start_seq``, then the end marker ``[b"", b"", -1, b""]`` (vLLM 0.32; ``replay_topic =
False``: the older form without the topic frame). Payloads are msgspec msgpack of tagged
structs shaped like vLLM's (the batch an array, each event a map with a ``"type"`` tag). For
tests only: it can drop a batch on the live stream (it stays in the replay buffer), stop
answering replays, and restart (numbering from 0).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
import msgspec
import zmq
import zmq.asyncio


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class BlockStored(msgspec.Struct, tag=True, omit_defaults=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True):
    pass


def stored(tokens: list[int], hashes: list[int], parent: int | None, block_size: int,
           salt: str | None = None) -> BlockStored:  # fmt: skip
    keys = None if salt is None else [(salt,)] + [None] * (len(hashes) - 1)
    return BlockStored(hashes, parent, tokens, block_size, None, "GPU", None, keys)


class FakeKvPublisher:
    """Bind with :meth:`start`; ``events_url`` / ``replay_url`` are the addresses to give."""

    def __init__(self, topic: str = "kv") -> None:
        self.topic = topic.encode()
        self._encoder = msgspec.msgpack.Encoder()
        self._context = zmq.asyncio.Context()
        self._pub: zmq.asyncio.Socket | None = None
        self._router: zmq.asyncio.Socket | None = None
        self.events_port = 0
        self.replay_port = 0
        self.seq = 0
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=10_000)
        #: Replays answered so far; set ``answer_replays = False`` to ignore them.
        self.replays = 0
        self.answer_replays = True
        #: vLLM 0.32 puts the topic in replay answers; older releases did not.
        self.replay_topic = True

    @property
    def events_url(self) -> str:
        return f"tcp://127.0.0.1:{self.events_port}"

    @property
    def replay_url(self) -> str:
        return f"tcp://127.0.0.1:{self.replay_port}"

    def bind(self) -> None:
        self._pub = self._context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        if self.events_port:  # a restart binds the same ports again (see restart)
            self._pub.bind(self.events_url)
            self._router.bind(self.replay_url)
        else:
            self.events_port = self._pub.bind_to_random_port("tcp://127.0.0.1")
            self.replay_port = self._router.bind_to_random_port("tcp://127.0.0.1")

    def close_sockets(self) -> None:
        for socket in (self._pub, self._router):
            if socket is not None:
                socket.close(linger=0)
        self._pub = self._router = None

    async def restart(self) -> None:
        """A new process: sockets rebound on the same ports (retried while ZMQ's I/O thread
        still holds them), numbering from 0, an empty replay buffer."""
        self.close_sockets()
        self.seq = 0
        self.buffer.clear()
        for _ in range(200):
            try:
                self.bind()
                return
            except zmq.ZMQError:
                self.close_sockets()
                await anyio.sleep(0.02)
        raise RuntimeError("the fake publisher could not bind its ports again")

    def close(self) -> None:
        self.close_sockets()
        self._context.term()

    async def publish(self, *events: Any, drop: bool = False) -> int:
        """Send one batch (``drop``: keep it for replay only). Returns its sequence number."""
        assert self._pub is not None
        seq = self.seq
        self.seq += 1
        payload = self._encoder.encode(EventBatch(ts=0.0, events=list(events)))
        self.buffer.append((seq, payload))
        if not drop:
            await self._pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    async def serve_replays(self) -> None:
        """Answer replay requests until cancelled (the ROUTER side of vLLM's protocol)."""
        while True:
            router = self._router
            if router is None:
                await anyio.sleep(0.01)
                continue
            with anyio.move_on_after(0.05):
                frames = await router.recv_multipart()
                if not self.answer_replays or router is not self._router:
                    continue
                client, _, start = frames
                first = int.from_bytes(start, "big")
                self.replays += 1
                head = [client, b""] + ([self.topic] if self.replay_topic else [])
                for seq, payload in list(self.buffer):
                    if seq >= first:
                        await router.send_multipart([*head, seq.to_bytes(8, "big"), payload])
                end = (-1).to_bytes(8, "big", signed=True)
                await router.send_multipart([client, b"", *([b""] if self.replay_topic else []),
                                             end, b""])  # fmt: skip
