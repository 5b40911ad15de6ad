"""The KV-event subscriber against a fake vLLM publisher on loopback ZMQ: the controller's
exact index converges through gaps, replays after later live batches, a restarted publisher
and a publisher that is down; meanwhile the index says "unsynced" (the router's estimate)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio
import pytest

from agentrt_controller.backends.kv_events import KvEventsEndpoint, KvEventSubscriber
from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_controller.routing.kv_index import ExactPrefixIndex
from tests.backends.kv_event_publisher import (
    AllBlocksCleared,
    BlockRemoved,
    FakeKvPublisher,
    stored,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BS = 16
BACKEND = "fake-vllm"
PROMPT = list(range(1000, 1000 + 4 * BS))
CHAIN = token_block_hashes(PROMPT, BS, salt="tenant-a")


async def eventually(check: Callable[[], bool], what: str, limit_s: float = 15.0) -> None:
    """Wait until ``check()`` holds (polling; generous limit for a busy machine)."""
    with anyio.move_on_after(limit_s):
        while not check():  # noqa: ASYNC110 - polling the index, which has no event
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out waiting until {what}")


@pytest.fixture
def publisher() -> Iterator[FakeKvPublisher]:
    fake = FakeKvPublisher()
    fake.bind()
    try:
        yield fake
    finally:
        fake.close()


async def subscribed(
    publisher: FakeKvPublisher, index: ExactPrefixIndex, group: anyio.abc.TaskGroup
) -> KvEventSubscriber:
    group.start_soon(publisher.serve_replays)
    endpoint = KvEventsEndpoint(BACKEND, publisher.events_url, publisher.replay_url, topic="kv")
    subscriber = KvEventSubscriber(endpoint, index, replay_timeout_s=1.0, settle_s=0.2,
                                   retry_s=0.2)  # fmt: skip
    await group.start(subscriber.run)
    return subscriber


def block(i: int) -> list[int]:
    return PROMPT[i * BS : (i + 1) * BS]


async def test_joins_late_replays_history_and_follows_live(publisher: FakeKvPublisher) -> None:
    # Published before the controller subscribed: only a replay can bring these.
    await publisher.publish(stored(block(0) + block(1), [11, 12], None, BS, salt="tenant-a"))
    await publisher.publish(stored(block(2), [13], 12, BS))
    index = ExactPrefixIndex()
    async with anyio.create_task_group() as group:
        subscriber = await subscribed(publisher, index, group)
        assert index.match(BACKEND, CHAIN, BS) is None  # unsynced: the router's estimate
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 3, "history replayed")
        await publisher.publish(stored(block(3), [14], 13, BS))
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 4, "live batch applied")
        await publisher.publish(BlockRemoved([12], "GPU"))
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 1, "removal applied")
        assert subscriber.stats.replays >= 1 and subscriber.stats.decode_errors == 0
        group.cancel_scope.cancel()


async def test_a_dropped_batch_is_a_gap_filled_by_replay(publisher: FakeKvPublisher) -> None:
    publisher.replay_topic = False  # older vLLM's replay framing
    index = ExactPrefixIndex()
    async with anyio.create_task_group() as group:
        subscriber = await subscribed(publisher, index, group)
        await eventually(lambda: index.is_synced(BACKEND), "synced on an empty publisher")
        await publisher.publish(stored(block(0), [11], None, BS, salt="tenant-a"))
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 1, "first block")
        # Lost on the live stream: the next batch reveals the gap, a replay fills it (the
        # replayed batch arrives after the later live one).
        publisher.answer_replays = False
        await publisher.publish(stored(block(1), [12], 11, BS), drop=True)
        await publisher.publish(stored(block(2), [13], 12, BS))
        await eventually(lambda: not index.is_synced(BACKEND), "the gap seen")
        assert index.match(BACKEND, CHAIN, BS) is None  # fallback while the gap is open
        assert index.stats(BACKEND).gaps == 1
        publisher.answer_replays = True
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 3, "gap filled")
        assert index.stats(BACKEND).holes == 0
        assert subscriber.stats.replay_timeouts >= 1
        group.cancel_scope.cancel()


async def test_a_restarted_publisher_starts_the_backend_over(publisher: FakeKvPublisher) -> None:
    index = ExactPrefixIndex()
    async with anyio.create_task_group() as group:
        await subscribed(publisher, index, group)
        await publisher.publish(stored(block(0) + block(1), [11, 12], None, BS, salt="tenant-a"))
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 2, "first life's blocks")
        await publisher.restart()  # a new vLLM: empty cache, numbering from 0, same ports
        await eventually(lambda: not index.is_synced(BACKEND), "disconnect seen")
        assert index.match(BACKEND, CHAIN, BS) is None
        # The new process stores one block; the controller reconnects and replays from where
        # it was (2): a hole, or (when the live batch 0 arrives first) a restart — either way
        # the old life's blocks are gone and the new one's are there.
        await anyio.sleep(0.3)
        await publisher.publish(stored(block(0), [21], None, BS, salt="tenant-a"))
        await publisher.publish(stored(block(1), [22], 21, BS))
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 2, "second life's blocks")
        stats = index.stats(BACKEND)
        assert stats.holes + stats.restarts >= 1
        await publisher.publish(AllBlocksCleared())
        await eventually(lambda: index.match(BACKEND, CHAIN, BS) == 0, "cleared")
        group.cancel_scope.cancel()


async def test_a_publisher_that_is_down_leaves_the_backend_unsynced() -> None:
    index = ExactPrefixIndex()
    endpoint = KvEventsEndpoint(BACKEND, "tcp://127.0.0.1:9", "tcp://127.0.0.1:9")
    async with anyio.create_task_group() as group:
        await group.start(KvEventSubscriber(endpoint, index, retry_s=0.1).run)
        await anyio.sleep(0.5)
        assert not index.is_synced(BACKEND)
        assert index.match(BACKEND, CHAIN, BS) is None
        group.cancel_scope.cancel()
