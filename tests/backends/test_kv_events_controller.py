"""The controller routes by vLLM's KV events where they are in sync: two engine emulators (real
HTTP servers on loopback, ``/tokenize`` included) behind a controller whose backends name a
fake KV-event publisher each. The events say the prompt is cached on the second backend — the
controller's own history says nothing — so the call goes there; with that backend's stream
out of sync the estimate decides (the tie goes to the first backend)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio
import httpx
import pytest

from agentrt_controller.backends import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.backends.kv_event_publisher import FakeKvPublisher, stored

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

BS = 16
MESSAGES = [{"role": "user", "content": "agentrt exact prefix index " * 40}]


async def eventually(check: Callable[[], bool], what: str, limit_s: float = 20.0) -> None:
    with anyio.move_on_after(limit_s):
        while not check():  # noqa: ASYNC110 - polling the controller's index
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out waiting until {what}")


@pytest.fixture
def publishers() -> Iterator[list[FakeKvPublisher]]:
    fakes = [FakeKvPublisher(), FakeKvPublisher()]
    for fake in fakes:
        fake.bind()
    try:
        yield fakes
    finally:
        for fake in fakes:
            fake.close()


async def test_calls_follow_the_kv_events_and_fall_back_when_unsynced(
    publishers: list[FakeKvPublisher],
) -> None:
    engine = EngineConfig()
    async with (
        serve_engine(EmulatorConfig(engine=engine, time_scale=200.0)) as first,
        serve_engine(EmulatorConfig(engine=engine, time_scale=200.0)) as second,
        anyio.create_task_group() as group,
    ):
        for fake in publishers:
            group.start_soon(fake.serve_replays)
        specs = tuple(
            BackendSpec(emulator.base_url, kind="emulator", backend_id=name,
                        kv_events=fake.events_url, kv_replay=fake.replay_url, kv_topic="kv")
            for name, emulator, fake in zip(("a", "b"), (first, second), publishers, strict=True)
        )  # fmt: skip
        apps: list[ControllerApp] = []
        config = ControllerConfig(port=0, backends=specs, router="prefix")
        async with serve_controller(config, on_app=apps.append) as url:
            feed = apps[0].core.kv_events
            assert feed is not None
            index, states = feed.index, apps[0].core.pool.states
            await eventually(lambda: index.is_synced("a") and index.is_synced("b"), "synced")
            async with httpx.AsyncClient(timeout=30.0) as http:
                tokens = (
                    await http.post(
                        second.base_url + "/tokenize",
                        json={
                            "model": DEFAULT_MODEL_NAME,
                            "messages": MESSAGES,
                            "add_generation_prompt": True,
                        },
                    )
                ).json()["tokens"]
                blocks = len(tokens) // BS
                assert blocks >= 4
                # Backend b cached the prompt (another client sent it); a cached nothing.
                await publishers[0].publish(stored([7] * BS, [900], None, BS))
                hashes = list(range(1, blocks + 1))
                await publishers[1].publish(stored(tokens[: blocks * BS], hashes, None, BS))
                await eventually(lambda: index.cached_blocks("b") == blocks, "b's blocks")

                async def served_by() -> str:
                    before = {b: s.admitted_total for b, s in states.items()}
                    body = {"model": DEFAULT_MODEL_NAME, "messages": MESSAGES, "max_tokens": 2}
                    answer = await http.post(url + "/v1/chat/completions", json=body)
                    assert answer.status_code == 200, answer.text
                    (served,) = [b for b, s in states.items() if s.admitted_total > before[b]]
                    return served

                assert await served_by() == "b"
                assert feed.scorer is not None and feed.scorer.lookups["exact"] >= 2
                # b's stream loses a batch and its replays go unanswered: unsynced, and the
                # estimate — which now remembers the call it sent to b — decides.
                publishers[1].answer_replays = False
                await publishers[1].publish(stored([5] * BS, [800], None, BS), drop=True)
                await publishers[1].publish(stored([6] * BS, [801], None, BS))
                await eventually(lambda: not index.is_synced("b"), "b unsynced")
                estimate_before = feed.scorer.lookups["estimate"]
                assert await served_by() == "b"  # the estimate remembers b
                assert feed.scorer.lookups["estimate"] > estimate_before
                metrics = (await http.get(url + "/metrics")).text
                assert 'agentrt_kv_events_synced{backend="b"} 0.0' in metrics
                assert 'agentrt_kv_events_synced{backend="a"} 1.0' in metrics
                assert 'agentrt_kv_event_gaps_total{backend="b"} 1.0' in metrics
                # Subscribers start with the controller: adding one later is refused, not
                # silently routed without its events.
                added = await http.post(
                    url + "/agentrt/v1/backends",
                    json={"spec": "http://127.0.0.1:9,kind=vllm,kv_events=tcp://127.0.0.1:9"},
                )
                assert added.status_code == 400, added.text
                assert "kv_events" in added.text
            group.cancel_scope.cancel()


def test_kv_event_options_are_validated() -> None:
    from agentrt.errors import ConfigError

    spec = BackendSpec.parse(
        "http://gpu1:8000,kind=vllm,kv_events=tcp://gpu1:5557,kv_replay=tcp://gpu1:5558,kv_topic=kv"
    )
    assert (spec.kv_events, spec.kv_replay, spec.kv_topic, spec.options) == (
        "tcp://gpu1:5557", "tcp://gpu1:5558", "kv", {}
    )  # fmt: skip
    table = BackendSpec.from_mapping({"url": "http://gpu1:8000", "kv_events": "ipc:///tmp/kv"})
    assert table.kv_events == "ipc:///tmp/kv" and table.kv_replay is None
    for bad in (
        "http://h:8000,kv_events=tcp://*:5557",  # vLLM's bind address, not one to connect to
        "http://h:8000,kv_events=http://h:5557",
        "http://h:8000,kv_events=tcp://h",
        "http://h:8000,kv_replay=tcp://h:5558",  # a replay without events
        "http://h:8000,kv_topic=kv",
    ):
        with pytest.raises(ConfigError):
            BackendSpec.parse(bad)
