"""``BackendPool.abortable``: a call waiting for its answer's start is aborted when its
backend fails meanwhile, by cancelling the call's task (not a cancel scope per call:
docs/controller.md, "Performance notes"). The abort's own cancellation ends at the block;
any other one (the client gone, the deadline) goes on up."""

from __future__ import annotations

import asyncio

import pytest

from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.service.core.pool import Abortable, BackendPool

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def _answer(request: object) -> FakeResponse:
    raise AssertionError("no request is sent here")


async def _healthy_pool() -> BackendPool:
    pool = BackendPool([FakeBackend("b0", _answer)], on_change=lambda: None, clock=lambda: 0.0)
    await pool.refresh()
    assert pool.states["b0"].healthy
    return pool


async def test_a_backend_marked_down_aborts_the_block_and_the_task_goes_on() -> None:
    pool = await _healthy_pool()
    reached: list[str] = []

    async def call() -> None:
        with pool.abortable("b0") as block:
            await asyncio.sleep(30)  # the backend's answer that never starts
        reached.append("after the block")
        assert block.aborted and block.cancelled_caught
        await asyncio.sleep(0)  # no cancellation is left pending for the task
        reached.append("awaited again")

    task = asyncio.get_running_loop().create_task(call())
    await asyncio.sleep(0)
    pool.mark_down("b0", "probe failed")
    await task
    assert reached == ["after the block", "awaited again"]
    assert task.cancelling() == 0 and not pool.states["b0"].abortable


async def test_a_backend_already_out_gives_an_aborted_block_and_cancels_nothing() -> None:
    pool = await _healthy_pool()
    pool.mark_down("b0", "probe failed")
    with pool.abortable("b0") as block:
        assert block.aborted
        await asyncio.sleep(0)  # not cancelled: the caller checks ``aborted`` before sending
    assert not block.cancelled_caught


async def test_a_cancellation_of_the_task_itself_is_not_stopped_by_the_block() -> None:
    pool = await _healthy_pool()
    inside = asyncio.Event()

    async def call() -> None:
        with pool.abortable("b0"):
            inside.set()
            await asyncio.sleep(30)

    task = asyncio.get_running_loop().create_task(call())
    await inside.wait()
    task.cancel()  # the client left ...
    pool.mark_down("b0", "probe failed")  # ... and the backend failed in the same turn
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_block_left_normally_is_no_longer_aborted_by_its_backend() -> None:
    pool = await _healthy_pool()
    with pool.abortable("b0") as block:
        await asyncio.sleep(0)
    pool.mark_down("b0", "probe failed")
    assert not block.aborted
    await asyncio.sleep(0)  # nothing was cancelled


async def test_a_block_finds_its_task_with_the_pool_s_loop_cached_or_another_loop() -> None:
    pool = await _healthy_pool()
    other = asyncio.new_event_loop()  # a loop the pool once ran on, not this one
    try:
        for cached in (asyncio.get_running_loop(), other):
            pool.loop = cached
            block = pool.abortable("b0")

            async def call(block: Abortable = block) -> None:
                with block:
                    await asyncio.sleep(30)

            task = asyncio.get_running_loop().create_task(call())
            await asyncio.sleep(0)
            assert block._task is task  # the abort cancels the block's own task
            pool.mark_down("b0", "probe failed")
            await task
            assert block.cancelled_caught
            pool.states["b0"] = pool._new_state(pool.states["b0"].backend)  # up again
    finally:
        other.close()
