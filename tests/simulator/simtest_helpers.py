"""Small builders shared by the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence

from agentrt_controller.process_table import ProcessTable
from agentrt_controller.retention import RetentionPolicy
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.basic import FcfsScheduler, FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.srpt import OracleBook, OracleFigures
from agentrt_sim.plan import compile_program
from agentrt_sim.retention import NoRetention
from agentrt_sim.sim import Policies, SimConfig, Simulation
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode


class RecordingFcfs(FcfsScheduler):
    """FCFS that remembers every submitted call and every charged service (test seam)."""

    def __init__(self, oracle: OracleBook | None = None) -> None:
        super().__init__(ProcessTable())
        self.submitted: list[CallEntry] = []
        self.charged: dict[str, float] = {}
        #: The simulation's oracle, read at each submission into :attr:`figures`.
        self.oracle = oracle
        self.figures: list[OracleFigures | None] = []

    def submit(self, call: CallEntry, now_s: float) -> None:
        self.submitted.append(call)
        if self.oracle is not None:
            self.figures.append(self.oracle(call.facts.call_id))
        super().submit(call, now_s)

    def on_finish(self, call: CallEntry, service_s: float, now_s: float) -> None:
        self.charged[call.facts.call_id] = service_s
        super().on_finish(call, service_s, now_s)


class RecordingDispatcher(Dispatcher):
    """Dispatcher that remembers every submitted call, whichever queue it went to."""

    submitted: list[CallEntry]

    def submit(
        self, facts: CallFacts, now_s: float, *, retained_backend: str | None = None
    ) -> CallEntry:
        entry = super().submit(facts, now_s, retained_backend=retained_backend)
        self.submitted.append(entry)
        return entry


def simulate(
    programs: Sequence[Program],
    config: SimConfig,
    *,
    window: int | None = None,
    scheduler: FcfsScheduler | None = None,
    retention: RetentionPolicy | None = None,
    oracle: OracleBook | None = None,
) -> Simulation:
    """Run ``programs`` with FCFS (or ``scheduler``), round robin and a fixed window."""
    dispatcher = RecordingDispatcher(
        scheduler or FcfsScheduler(ProcessTable()), RoundRobinRouter(), FixedWindowAdmission(window)
    )
    dispatcher.submitted = []
    sim = Simulation(
        [compile_program(p) for p in programs],
        config,
        Policies(
            dispatcher=dispatcher,
            retention=retention or NoRetention(),
            oracle=oracle if oracle is not None else OracleBook(),
        ),
    )
    sim.run()
    return sim


def react_program(
    program_id: str = "p",
    *,
    arrival_s: float = 0.0,
    outputs: Sequence[int] = (5, 7, 3),
    tool_s: Sequence[float] = (0.5, 1.25),
    observation: int = 40,
    system: int = 64,
    root: int = 20,
) -> Program:
    """call → tool → call → tool → call, each call extending the previous context."""
    nodes: list[LLMNode | WaitNode] = []
    previous: str | None = None
    for index, output in enumerate(outputs):
        parents: tuple[str, ...] = ()
        context = previous
        if previous is not None:
            tool = WaitNode(
                f"t{index}",
                (previous,),
                "main",
                "tool",
                "search",
                tool_s[index - 1],
                context=previous,
                result_tokens=observation,
            )
            nodes.append(tool)
            parents, context = (tool.node_id,), tool.node_id
        call = LLMNode(f"c{index}", parents, "main", context, 0, output)
        nodes.append(call)
        previous = call.node_id
    return Program(program_id, "react", arrival_s, "react", system, root, tuple(nodes))
