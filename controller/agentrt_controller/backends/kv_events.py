"""Subscribe to one backend's vLLM KV-cache events and keep an
:class:`~agentrt_controller.routing.kv_index.ExactPrefixIndex` up to date (docs/backends.md,
"KV-cache events"; the wire format: :mod:`.kv_event_wire`).

One :class:`KvEventSubscriber` per backend configured with ``kv_events=tcp://host:port``
(optionally ``kv_replay=tcp://host:port``, ``kv_topic=...``):

* a ZMQ SUB socket on the events endpoint (ZMQ reconnects by itself; a socket monitor tells
  us when the connection comes and goes);
* on every (re)connect, and whenever the index reports a gap, a **replay** from the replay
  endpoint (a fresh DEALER socket per replay): the batches from the first missing sequence
  number, then the end marker; a second replay ``settle_s`` after a connect catches batches
  published before the subscription reached the publisher (ZMQ's "slow joiner");
* while disconnected, or a gap is open, the index says "unsynced" for the backend and the
  router uses the estimate there. Without a replay endpoint a gap cannot be filled: the index
  takes it as a hole (drops the backend's blocks, resumes) — it under-counts until the
  blocks are stored again.

Errors never escape :meth:`KvEventSubscriber.run` (it runs until cancelled): a malformed
message counts as a decode error and as missing (the next batch shows the gap).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import zmq
import zmq.asyncio
from anyio.abc import TaskStatus
from zmq.utils.monitor import parse_monitor_message

from agentrt.errors import ConfigError
from agentrt_controller.backends.kv_event_wire import (
    END_OF_REPLAY,
    KvEventDecodeError,
    decode_batch,
    decode_seq,
    encode_seq,
)
from agentrt_controller.routing.kv_index import ApplyOutcome, ExactPrefixIndex

__all__ = ["KvEventSubscriber", "KvEventsEndpoint", "SubscriberStats", "check_zmq_endpoint"]

_log = logging.getLogger("agentrt.controller")


def check_zmq_endpoint(option: str, value: str) -> str:
    """``value`` when it is a ZMQ endpoint the controller can connect to
    (``tcp://host:port`` or ``ipc://path``). Raises :class:`ConfigError`."""
    parts = urlsplit(value)
    if parts.scheme == "ipc" and len(value) > len("ipc://"):
        return value
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or not parts.hostname or port is None or parts.hostname == "*":
        raise ConfigError(
            f"backend option {option} must be tcp://host:port or ipc://path, got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class KvEventsEndpoint:
    """Where one backend publishes its KV events."""

    backend_id: str
    #: The PUB endpoint, e.g. ``tcp://10.0.0.5:5557`` (vLLM's ``endpoint``, host filled in).
    events_url: str
    #: The ROUTER replay endpoint (vLLM's ``replay_endpoint``); ``None`` = no replay.
    replay_url: str | None = None
    #: vLLM's ``topic`` (``""`` = every message).
    topic: str = ""

    def __post_init__(self) -> None:
        check_zmq_endpoint("kv_events", self.events_url)
        if self.replay_url is not None:
            check_zmq_endpoint("kv_replay", self.replay_url)


@dataclass(slots=True)
class SubscriberStats:
    """What one subscriber did (the index keeps the per-batch counters)."""

    #: Replays asked for, and those that got no answer in time.
    replays: int = 0
    replay_timeouts: int = 0
    #: Messages that did not decode.
    decode_errors: int = 0
    #: Connections made and lost.
    connects: int = 0
    disconnects: int = 0


class KvEventSubscriber:
    """Feeds ``index`` from ``endpoint`` until cancelled (module docstring).

    ``on_change``: called after the index changed (synced state or blocks) — the engine
    wakes its dispatcher. ``replay_timeout_s``: longest wait for a replay's next message;
    ``settle_s``: delay of the second replay after a connect; ``retry_s``: wait before
    asking again after a replay failed (all seconds, > 0).
    """

    def __init__(
        self,
        endpoint: KvEventsEndpoint,
        index: ExactPrefixIndex,
        *,
        on_change: Callable[[], None] | None = None,
        replay_timeout_s: float = 2.0,
        settle_s: float = 0.5,
        retry_s: float = 1.0,
    ) -> None:
        for name, value in (("replay_timeout_s", replay_timeout_s), ("settle_s", settle_s),
                            ("retry_s", retry_s)):  # fmt: skip
            if not value > 0:
                raise ConfigError(f"KV event subscriber {name} must be > 0 seconds")
        self.endpoint = endpoint
        self.index = index
        self.stats = SubscriberStats()
        self._on_change = on_change or (lambda: None)
        self._replay_timeout_s = replay_timeout_s
        self._settle_s = settle_s
        self._retry_s = retry_s
        self._resync = anyio.Event()
        self._context: zmq.asyncio.Context | None = None

    @property
    def backend_id(self) -> str:
        return self.endpoint.backend_id

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe and keep the index in sync until cancelled. Reports started once the
        SUB socket is connecting (not connected: the publisher may be down)."""
        self.index.disconnected(self.backend_id)  # known, unsynced until the first replay
        context = self._context = zmq.asyncio.Context()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RECONNECT_IVL, 100)
        sub.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        sub.setsockopt(zmq.SUBSCRIBE, self.endpoint.topic.encode())
        monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        try:
            sub.connect(self.endpoint.events_url)
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch, monitor, group)
                group.start_soon(self._read, sub)
                group.start_soon(self._resync_loop)
                task_status.started()
        finally:
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)
            context.term()

    # --- the three loops ----------------------------------------------------------------------

    async def _watch(self, monitor: zmq.asyncio.Socket, group: anyio.abc.TaskGroup) -> None:
        """Connection events: a connect asks for a replay now and another after ``settle_s``;
        a disconnect makes the backend unsynced."""
        while True:
            frames = await monitor.recv_multipart()
            event = parse_monitor_message(frames)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.stats.connects += 1
                self._resync.set()
                group.start_soon(self._settle)
            elif event == zmq.EVENT_DISCONNECTED:
                self.stats.disconnects += 1
                self.index.disconnected(self.backend_id)
                self._on_change()

    async def _settle(self) -> None:
        await anyio.sleep(self._settle_s)
        self._resync.set()

    async def _read(self, sub: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sub.recv_multipart()
            if len(frames) != 3:
                self.stats.decode_errors += 1
                continue
            try:
                batch = decode_batch(decode_seq(frames[1]), frames[2])
            except KvEventDecodeError as exc:
                self.stats.decode_errors += 1
                _log.warning("backend %s: KV event dropped: %s", self.backend_id, exc)
                continue
            outcome = self.index.apply(self.backend_id, batch)
            if outcome is ApplyOutcome.HELD or not self.index.is_synced(self.backend_id):
                self._resync.set()
            self._on_change()

    async def _resync_loop(self) -> None:
        """Replays, one at a time, whenever asked (connect, settle, gap)."""
        while True:
            await self._resync.wait()
            self._resync = anyio.Event()
            if self.stats.connects == 0:
                continue  # not connected yet: the connect asks again
            # Synced or not, from the first batch not applied: after a connect this brings
            # what the live stream missed before the subscription took effect.
            if await self._replay(self.index.replay_from(self.backend_id)):
                self.index.replay_done(self.backend_id)
                self._on_change()
            else:
                await anyio.sleep(self._retry_s)
                if not self.index.is_synced(self.backend_id):
                    self._resync.set()

    # --- the replay ---------------------------------------------------------------------------

    async def _replay(self, start: int) -> bool:
        """Ask the replay socket for every batch from ``start``; apply them. ``True`` when
        the end marker came (or there is no replay socket: nothing more can be had)."""
        replay_url = self.endpoint.replay_url
        if replay_url is None:
            return True
        assert self._context is not None
        self.stats.replays += 1
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        try:
            dealer.connect(replay_url)
            await dealer.send_multipart([b"", encode_seq(start)])
            while True:
                frames: list[bytes] | None = None
                with anyio.move_on_after(self._replay_timeout_s):
                    frames = await dealer.recv_multipart()
                if frames is None:
                    self.stats.replay_timeouts += 1
                    _log.info("backend %s: KV event replay timed out", self.backend_id)
                    return False
                if self._replayed(frames):
                    return True
        finally:
            dealer.close(linger=0)

    def _replayed(self, frames: list[bytes]) -> bool:
        """Apply one replay message; ``True`` at the end marker. vLLM sends ``[b"", topic,
        seq, payload]`` (older releases ``[b"", seq, payload]``)."""
        if len(frames) not in (3, 4) or frames[0]:
            self.stats.decode_errors += 1
            return False
        seq_frame, payload = frames[-2], frames[-1]
        try:
            seq = decode_seq(seq_frame)
            if seq == END_OF_REPLAY:
                return True
            batch = decode_batch(seq, payload)
        except KvEventDecodeError as exc:
            self.stats.decode_errors += 1
            _log.warning("backend %s: replayed KV event dropped: %s", self.backend_id, exc)
            return False
        self.index.apply(self.backend_id, batch, replayed=True)
        return False
