"""Monte-Carlo tree search over reasoning steps, LATS style (Zhou et al., "Language Agent
Tree Search"), built on the public primitives.

Each iteration: **select** a leaf by UCT from the root; **expand** it into ``n`` children in
parallel — each child a thread of the program that proposes the next step with the LLM and
then **evaluates** the partial solution with the LLM (``response_format`` JSON schema →
score in [0, 1] and ``solved``); a terminal child that failed is **reflected** upon (a short
lesson fed into later proposals); scores are **backpropagated** to the root. The search stops
at a solved node or after ``iterations`` expansions.

UCT(child) = mean value + exploration · sqrt(ln(parent visits) / child visits); unvisited
children first.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrt.runtime.chat import ModelChoice, chat
from agentrt.runtime.flow import gather
from agentrt.runtime.frame import CURRENT_FRAME
from agentrt.runtime.runtime import current_runtime

__all__ = ["MctsResult", "mcts"]

Verify = Callable[[Sequence[str]], bool | Awaitable[bool]]

_EVALUATION_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "evaluation",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "solved": {"type": "boolean"},
            },
            "required": ["score", "solved"],
            "additionalProperties": False,
        },
    },
}
_MAX_REFLECTIONS = 5


@dataclass(slots=True, eq=False)
class _TreeNode:
    steps: tuple[str, ...]
    parent: _TreeNode | None = None
    children: list[_TreeNode] = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    score: float = 0.0
    terminal: bool = False
    solved: bool = False

    @property
    def mean(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    def uct(self, exploration: float) -> float:
        if self.visits == 0:
            return math.inf
        parent_visits = self.parent.visits if self.parent is not None else self.visits
        return self.mean + exploration * math.sqrt(math.log(max(parent_visits, 1)) / self.visits)


@dataclass(slots=True)
class MctsResult:
    """Outcome of a search."""

    #: Steps of the best trajectory found (the solved one, if any).
    steps: list[str]
    #: Its evaluation score in [0, 1].
    score: float
    solved: bool
    #: Expansions done.
    iterations: int
    #: Tree nodes created (without the root).
    tree_size: int
    #: Lessons drawn from failed trajectories.
    reflections: list[str] = field(default_factory=list)


async def mcts(
    task: str,
    *,
    n: int = 3,
    depth: int = 4,
    iterations: int = 8,
    exploration: float = 1.0,
    model: ModelChoice | None = None,
    evaluator_model: ModelChoice | None = None,
    verify: Verify | None = None,
    solved_threshold: float = 0.9,
    temperature: float = 0.8,
) -> MctsResult:
    """Search for a solution of ``task`` with LATS (see the module docstring).

    ``n``: children per expansion (parallel threads); ``depth``: maximum steps in a
    trajectory; ``iterations``: expansions; ``verify(steps)``: optional exact check of a
    terminal trajectory (e.g. a puzzle checker), used instead of the LLM's ``solved``;
    ``solved_threshold``: LLM score at which an unverified terminal trajectory counts as
    solved. ``model``: the proposing model (or an ordered list of candidates, as
    :func:`~agentrt.chat` takes it); ``evaluator_model``: the one that grades partial solutions
    and writes reflections — often a smaller, cheaper verifier (default: ``model``). Runs in
    the current program or a new ``mcts`` program.
    """
    if CURRENT_FRAME.get() is None:
        async with current_runtime().program("mcts"):
            return await mcts(
                task,
                n=n,
                depth=depth,
                iterations=iterations,
                exploration=exploration,
                model=model,
                evaluator_model=evaluator_model,
                verify=verify,
                solved_threshold=solved_threshold,
                temperature=temperature,
            )
    if n < 1 or depth < 1 or iterations < 1:
        raise ValueError("n, depth and iterations must be >= 1")
    evaluator = evaluator_model if evaluator_model is not None else model
    search = _Search(task, depth, model, evaluator, verify, solved_threshold, temperature)
    root = _TreeNode(())
    done = 0
    while done < iterations:
        done += 1
        leaf = root
        while leaf.children and not leaf.terminal:
            leaf = max(leaf.children, key=lambda c: c.uct(exploration))
        if leaf.terminal:
            _backpropagate(leaf, leaf.score)
            continue
        children = await gather(*[_bind(search.grow, leaf, i) for i in range(n)])
        leaf.children.extend(children)
        for child in children:
            _backpropagate(child, child.score)
        if any(c.solved for c in children):
            break
    best = _best(root)
    return MctsResult(
        steps=list(best.steps),
        score=best.score,
        solved=best.solved,
        iterations=done,
        tree_size=_size(root) - 1,
        reflections=list(search.reflections),
    )


def _bind(fn: Callable[[_TreeNode, int], Awaitable[_TreeNode]], leaf: _TreeNode, i: int) -> Any:
    async def call() -> _TreeNode:
        return await fn(leaf, i)

    return call


class _Search:
    def __init__(
        self,
        task: str,
        depth: int,
        model: ModelChoice | None,
        evaluator_model: ModelChoice | None,
        verify: Verify | None,
        solved_threshold: float,
        temperature: float,
    ) -> None:
        self.task = task
        self.depth = depth
        self.model = model
        #: Grades partial solutions and writes reflections (``mcts(evaluator_model=)``).
        self.evaluator_model = evaluator_model
        self.verify = verify
        self.solved_threshold = solved_threshold
        self.temperature = temperature
        self.reflections: list[str] = []

    async def grow(self, leaf: _TreeNode, index: int) -> _TreeNode:
        """Propose one child of ``leaf``, evaluate it, reflect if it failed (one thread)."""
        step = await self._propose(leaf.steps, index)
        child = _TreeNode((*leaf.steps, step), parent=leaf)
        score, llm_solved = await self._evaluate(child.steps)
        child.score = score
        child.terminal = len(child.steps) >= self.depth or step.lower().startswith("answer")
        if self.verify is not None:
            if child.terminal:
                verdict = self.verify(child.steps)
                child.solved = bool(await verdict if inspect.isawaitable(verdict) else verdict)
        else:
            child.solved = llm_solved and score >= self.solved_threshold
        if child.solved:
            child.terminal, child.score = True, max(score, self.solved_threshold)
        elif child.terminal:
            child.score = min(score, 0.5 * self.solved_threshold)
            await self._reflect(child.steps)
        return child

    async def _propose(self, steps: Sequence[str], index: int) -> str:
        lessons = "\n".join(f"- {r}" for r in self.reflections[-_MAX_REFLECTIONS:]) or "none"
        done = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(steps)) or "(none yet)"
        completion = await chat(
            [
                {
                    "role": "system",
                    "content": "You solve tasks one step at a time. Reply with the next step "
                    "only. When the solution is complete, reply 'Answer: <answer>'.",
                },
                {
                    "role": "user",
                    "content": f"Task: {self.task}\nSteps so far:\n{done}\n"
                    f"Lessons from failed attempts:\n{lessons}\n"
                    f"Next step (variant {index + 1}):",
                },
            ],
            model=self.model,
            temperature=self.temperature,
        )
        text = (completion.choices[0].message.content or "").strip()
        return text.splitlines()[0][:500] if text else "(empty step)"

    async def _evaluate(self, steps: Sequence[str]) -> tuple[float, bool]:
        trajectory = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(steps))
        completion = await chat(
            [
                {
                    "role": "system",
                    "content": "You grade partial solutions. score: how likely they lead to a "
                    "correct solution (0 to 1); solved: true only for a complete correct one.",
                },
                {"role": "user", "content": f"Task: {self.task}\nSolution:\n{trajectory}"},
            ],
            model=self.evaluator_model,
            response_format=_EVALUATION_FORMAT,
            temperature=0.0,
        )
        return _parse_evaluation(completion.choices[0].message.content or "")

    async def _reflect(self, steps: Sequence[str]) -> None:
        trajectory = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(steps))
        completion = await chat(
            [
                {
                    "role": "user",
                    "content": f"Task: {self.task}\nThis attempt failed:\n{trajectory}\n"
                    "In one sentence: what should the next attempt do differently?",
                }
            ],
            model=self.evaluator_model,
            temperature=0.0,
        )
        lesson = (completion.choices[0].message.content or "").strip()
        if lesson:
            self.reflections.append(lesson.splitlines()[0][:300])


def _parse_evaluation(text: str) -> tuple[float, bool]:
    """Score in [0, 1] and solved flag; tolerant of replies that ignore the schema."""
    try:
        data = json.loads(text)
        score = float(data.get("score", 0.0))
        solved = bool(data.get("solved", False))
    except (ValueError, AttributeError, TypeError):
        match = re.search(r"\d*\.?\d+", text)
        score, solved = (float(match.group()) if match else 0.0), False
    if math.isnan(score):
        score = 0.0
    return min(1.0, max(0.0, score)), solved


def _backpropagate(node: _TreeNode | None, value: float) -> None:
    while node is not None:
        node.visits += 1
        node.value_sum += value
        node = node.parent


def _walk(root: _TreeNode) -> list[_TreeNode]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def _size(root: _TreeNode) -> int:
    return len(_walk(root))


def _best(root: _TreeNode) -> _TreeNode:
    nodes = [n for n in _walk(root) if n is not root] or [root]
    return max(nodes, key=lambda n: (n.solved, n.terminal and n.score, n.score, len(n.steps)))
