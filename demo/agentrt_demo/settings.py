"""The demo's options, validated at construction (``agentrt demo --help`` lists them).

The controller runs the product defaults (``agentrt_controller.defaults``: what ``agentrt
controller serve --backend URL`` runs) unless a field below names a choice: ``None`` in
``policy``, ``router`` and ``retention`` means "the controller's default", and so does
``"default"`` in ``admission_window`` (whose ``None`` is the controller's own: unlimited).

Times that shape the workload (arrivals, tool durations) are in **model seconds**: the engines
run ``time_scale`` times faster than the modelled GPU, and so do the arrivals and the tools, so
changing ``time_scale`` changes only how long the demo takes on the wall clock (and how much
CPU per wall second it needs), not the shape of the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from agentrt.errors import ConfigError
from agentrt_controller.admission_window import AdmissionWindow, window_label

__all__ = ["DEMO_MODELS", "POLICIES", "DemoSettings", "ProgressMode"]

#: ``agentrt demo --models``: a planner model and a small verifier / summariser model.
DEMO_MODELS = ("demo/planner-8b", "demo/verifier-1b")

#: Controller policies the demo offers (``srpt`` is simulator-only).
POLICIES = ("atlas", "plas", "mlfq", "fcfs")

#: ``auto``: a live display on a terminal, plain lines otherwise; ``off``: nothing.
ProgressMode = Literal["auto", "live", "plain", "off"]


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """Everything one ``agentrt demo`` run needs."""

    #: SDK agent programs per phase (50 % ReAct, 20 % map-reduce, 15 % MCTS, 15 % coding),
    #: >= 1. The LangGraph and AutoGen programs (when their extras are installed) come on top.
    programs: int = 70
    #: Seed of the program plan, the tool durations and the engines' scripted model.
    seed: int = 7
    #: Where traces, timelines and the summary are written.
    out_dir: Path = Path("agentrt-demo-out")
    #: The engines run this many times faster than the modelled GPU (> 0).
    time_scale: float = 1.5
    #: Run the baseline phase (the same programs straight to fresh FCFS engines).
    direct: bool = True
    #: Controller scheduling policy (one of ``POLICIES``); None = the controller's default.
    policy: str | None = None
    #: Controller router; None = the controller's default.
    router: str | None = None
    #: KV retention during tool waits at the controller; None = the controller's default.
    retention: bool | None = None
    #: Send the controller's priority to the engines, which then run ``--scheduling-policy
    #: priority`` (a stock vLLM runs FCFS and refuses a priority, so the controller's default
    #: is off and the demo's engines run FCFS in both phases).
    priority: bool = False
    #: Emulated engines (>= 2 for routing to matter).
    engines: int = 2
    #: The models the engines serve, one engine per model in turn (engine ``i`` of a group
    #: serves ``models[i % len(models)]``; docs/routing.md, "Several models"); ``()`` = every
    #: engine serves the emulator's default model. The controller routes each call to the
    #: engines of its model. The first model is the planner (every call that names no
    #: other), the second the small model the ReAct agents verify their answers with and the
    #: map-reduce agents summarise with (:mod:`agentrt_demo.models`); further ones get no
    #: call.
    models: tuple[str, ...] = ()
    #: Program arrivals per model second (a Poisson process), > 0: with the batch below, the
    #: engines of an otherwise idle 2-core machine run near saturation while the programs
    #: arrive (docs/demo.md, "Why these settings").
    arrival_rate: float = 4.5
    #: Sequences an engine runs at once (vLLM ``--max-num-seqs``): small, so that this
    #: machine's CPU can drive the engines to saturation.
    max_num_seqs: int = 4
    #: KV cache size of each engine in 16-token blocks; None = the hardware profile's.
    num_gpu_blocks: int | None = 4096
    #: Controller admission window per engine (the controller's type: ``None`` = unlimited);
    #: ``"default"`` = the controller's default (adaptive, at most the engine's batch plus two).
    admission_window: AdmissionWindow | Literal["default"] = "default"
    #: Hard wall-clock bound of one phase (seconds): programs still running are cancelled
    #: and reported as unfinished, so the demo always ends.
    phase_budget_s: float = 50.0
    #: Program deadline (model seconds): a program running longer is cancelled.
    program_timeout_s: float = 120.0
    #: Small programs, fast engines: the end-to-end test's setting.
    quick: bool = False
    #: Run the LangGraph / AutoGen programs when their extras are installed.
    frameworks: bool = True
    progress: ProgressMode = "auto"
    #: Timeline pictures to write: ``html``, ``png`` or both.
    timeline_formats: tuple[str, ...] = ("html", "png")

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.programs < 1:
            problems.append("programs must be >= 1")
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            problems.append("time_scale must be a positive number")
        if self.policy is not None and self.policy not in POLICIES:
            problems.append(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.engines < 1:
            problems.append("engines must be >= 1")
        if not all(isinstance(m, str) and m for m in self.models):
            problems.append(f"models must be non-empty names, got {list(self.models)}")
        elif len(set(self.models)) != len(self.models):
            problems.append(f"models must differ, got {list(self.models)}")
        elif self.engines < len(self.models):
            problems.append(f"engines must be >= the number of models ({len(self.models)})")
        if not (self.arrival_rate > 0 and math.isfinite(self.arrival_rate)):
            problems.append("arrival_rate must be a positive number of programs per second")
        if self.max_num_seqs < 1:
            problems.append("max_num_seqs must be >= 1")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 64:
            problems.append("num_gpu_blocks must be >= 64 or None")
        window = self.admission_window
        if window not in (None, "adaptive", "default") and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            problems.append("admission_window must be >= 1, adaptive, None (unlimited) or default")
        for name in ("phase_budget_s", "program_timeout_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0 seconds")
        if self.progress not in ("auto", "live", "plain", "off"):
            problems.append(f"progress must be auto, live, plain or off, got {self.progress!r}")
        unknown = sorted(set(self.timeline_formats) - {"html", "png"})
        if unknown:
            problems.append(f"timeline formats must be html or png, got {unknown}")
        if problems:
            raise ConfigError("invalid demo settings: " + "; ".join(problems))

    def quick_variant(self) -> DemoSettings:
        """The ``--quick`` setting: six small programs on fast engines (a few seconds)."""
        return replace(
            self,
            quick=True,
            programs=min(self.programs, 6),
            time_scale=max(self.time_scale, 6.0),
            arrival_rate=4.0,
            phase_budget_s=min(self.phase_budget_s, 40.0),
        )

    def window_choice(self) -> int | str | None:
        """The admission window as chosen, in the words the controller's config and the report
        take: ``None`` = not chosen (the controller's default), ``"unlimited"``, ``"adaptive"``
        or the number of calls."""
        window = self.admission_window
        if window == "default":
            return None
        return window if isinstance(window, int) else window_label(window)

    def wall_s(self, model_s: float) -> float:
        """Wall seconds of ``model_s`` model seconds."""
        return model_s / self.time_scale
