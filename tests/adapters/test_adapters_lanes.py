"""Thread assignment of framework work (agentrt_adapters._lanes): sequential work stays in one
thread,
concurrent work gets forked threads, and what follows depends on every branch."""

from __future__ import annotations

import math

from agentrt.program.chain import Chain
from agentrt.program.model import Node, ProgramGraph
from agentrt.runtime.frame import Frame
from agentrt_adapters._lanes import Lanes


def _program() -> Frame:
    graph = ProgramGraph("p-lanes", "lanes", "s-1", math.inf, 0.0)
    return Frame(None, graph, graph.threads["main"], Chain())


def _step(frame: Frame, name: str) -> Node:
    """One finished node on ``frame`` (what an LLM call or tool run leaves behind)."""
    node = frame.graph.add_node(frame.thread.id, "llm", name, frame.chain.parents())
    node.finish("ok", 0.0)
    frame.chain.on_done(node)
    return node


def test_sequential_tasks_and_units_stay_in_the_main_thread() -> None:
    root = _program()
    lanes = Lanes(root)
    names = []
    for step in range(3):
        namespace = f"agent:{step}"
        lane = lanes.open_task(namespace)
        unit = lanes.begin_unit(lanes.lane_for(namespace))
        assert unit.frame is root and not unit.forked and lane.direct
        names.append(_step(unit.frame, f"n{step}").id)
        lanes.end_unit(unit)
        lanes.close_task(namespace)
    assert names == ["main:0", "main:1", "main:2"]
    assert [n.parent_ids for n in root.graph.nodes.values()] == [(), ("main:0",), ("main:1",)]
    assert list(root.graph.threads) == ["main"]
    assert lanes.root.idle


def test_concurrent_tasks_fork_threads_and_the_next_step_joins_them() -> None:
    root = _program()
    lanes = Lanes(root)
    plan = _step(root, "plan")
    tasks = [f"map:{i}" for i in range(3)]
    for namespace in tasks:  # all tasks of one superstep start before any call ends
        lanes.open_task(namespace)
    units = [lanes.begin_unit(lanes.lane_for(ns)) for ns in tasks]
    assert [u.frame.thread.id for u in units] == ["main", "main.0", "main.1"]
    mapped = [_step(u.frame, f"map{i}") for i, u in enumerate(units)]
    assert all(n.parent_ids == (plan.id,) for n in mapped)
    # They finish in another order than they started.
    for index in (2, 0, 1):
        lanes.end_unit(units[index])
        lanes.close_task(tasks[index])
    assert lanes.root.idle
    reduce = _step(lanes.begin_unit(lanes.lane_for("reduce:0")).frame, "reduce")
    assert sorted(reduce.parent_ids) == sorted(n.id for n in mapped)


def test_parallel_units_of_one_task_get_threads_of_their_own() -> None:
    root = _program()
    lanes = Lanes(root)
    lane = lanes.open_task("tools:1")
    first, second = lanes.begin_unit(lane), lanes.begin_unit(lane)
    assert not first.forked and second.forked
    assert second.frame.thread.id == "main.0"
    a, b = _step(first.frame, "a"), _step(second.frame, "b")
    lanes.end_unit(second)
    lanes.end_unit(first)
    lanes.close_task("tools:1")
    after = lanes.begin_unit(lanes.root)
    assert not after.forked
    assert sorted(_step(after.frame, "next").parent_ids) == sorted([a.id, b.id])


def test_a_subgraph_task_nests_under_its_parent_task() -> None:
    root = _program()
    lanes = Lanes(root)
    outer = lanes.open_task("sub:1")
    inner = lanes.open_task("sub:1|inner:2")
    assert inner.parent is outer and inner.direct and inner.frame is root
    # An unknown namespace under an open task falls back to that task's lane.
    assert lanes.lane_for("sub:1|other:3") is outer
    assert lanes.lane_for(None) is lanes.root
    lanes.close_task("sub:1|inner:2")
    lanes.close_task("sub:1")
    lanes.close_task("never-opened")  # harmless
    assert lanes.root.idle and outer.idle


def test_a_task_started_while_the_root_is_busy_gets_a_thread() -> None:
    root = _program()
    lanes = Lanes(root)
    busy = lanes.begin_unit(lanes.root)  # e.g. a call made directly in the program
    lane = lanes.open_task("side:1")
    assert not lane.direct and lane.frame.thread.id == "main.0"
    node = _step(lane.frame, "side")
    lanes.close_task("side:1")
    lanes.end_unit(busy)
    assert node.id in root.chain.leaves
