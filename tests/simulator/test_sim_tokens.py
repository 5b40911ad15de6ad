"""Prompt token ids share exactly what real agents share."""

from __future__ import annotations

import itertools

import pytest
from simtest_helpers import react_program

from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_emulator.core.engine import EngineCore
from agentrt_emulator.core.profiles import get_profile
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.plan import compile_program
from agentrt_sim.tokens import ProgramTokens, TokenSpace
from agentrt_sim.workloads.generate import build_generator
from agentrt_sim.workloads.program import LLMNode, Program

pytestmark = pytest.mark.timeout(30)

_ENGINE = EngineCore(EngineConfig(num_gpu_blocks=64), get_profile("a100-llama3-8b"))


def _engine_chain(prompt: list[int]) -> list[int]:
    """The chain the engine computes itself for an unsalted prompt (block size 16)."""
    return _ENGINE.prefix_hashes(prompt, None)


def _run_chain(tokens: ProgramTokens, plan_nodes: int, is_llm: tuple[bool, ...]) -> list[list[int]]:
    prompts = []
    for node in range(plan_nodes):
        if is_llm[node]:
            prompt, output, hashes, engine = tokens.prompt_and_output(node)
            prompts.append(prompt + output)
            tokens.finish_call(node, prompt, output, hashes, engine)
        else:
            tokens.finish_wait(node)
    return prompts


def test_react_context_grows_by_output_and_observation() -> None:
    program = react_program(outputs=(5, 7, 3), observation=40, system=64, root=20)
    plan = compile_program(program)
    space = TokenSpace()
    full = _run_chain(ProgramTokens(plan, space), len(program.nodes), plan.is_llm)
    assert len(full[0]) == 64 + 20 + 5
    for earlier, later in itertools.pairwise(full):
        assert later[: len(earlier)] == earlier  # the next prompt extends prompt + output
    assert len(full[1]) == len(full[0]) + 40 + 7


def test_programs_of_a_kind_share_only_the_system_prompt() -> None:
    space = TokenSpace()
    one = compile_program(react_program("a", system=64, root=20))
    two = compile_program(react_program("b", system=64, root=20))
    first = ProgramTokens(one, space).prompt_and_output(0)[0]
    second = ProgramTokens(two, space).prompt_and_output(0)[0]
    assert first[:64] == second[:64]
    assert not set(first[64:]) & set(second[64:])


def _mcts_prompts(
    layout: str, seed: int = 3, block_size: int | None = None
) -> tuple[object, dict[str, list[int]], dict[str, list[int]], ProgramTokens]:
    import random

    overrides = {"mcts": {"prompt_layout": layout}}
    program = build_generator("mcts", overrides).draw(random.Random(seed), "m", 0.0)
    plan = compile_program(program)
    tokens = ProgramTokens(plan, TokenSpace(), block_size=block_size)
    prompts: dict[str, list[int]] = {}
    outputs: dict[str, list[int]] = {}
    for node, spec in enumerate(program.nodes):
        if plan.is_llm[node]:
            prompt, output, hashes, engine = tokens.prompt_and_output(node)
            assert len(prompt) == plan.prompt_len[node]
            assert engine == _engine_chain(prompt)
            if block_size is not None:
                assert hashes == tuple(token_block_hashes(prompt, block_size))
            prompts[spec.node_id] = prompt
            outputs[spec.node_id] = output
            kept = tokens.finish_call(node, prompt, output, hashes, engine)
            if block_size is not None:
                assert kept == tuple(token_block_hashes(prompt + output, block_size))
        else:
            tokens.finish_wait(node)
    return program, prompts, outputs, tokens


def test_mcts_branches_share_their_tree_path_in_the_path_layout() -> None:
    program, prompts, _, tokens = _mcts_prompts("path")
    assert isinstance(program, Program)
    # the five first-iteration expansions share the system prompt + question, then differ
    root = program.system_prompt_tokens + program.root_prompt_tokens
    firsts = [prompts[f"i0e{c}"] for c in range(5)]
    assert all(p[:root] == firsts[0][:root] for p in firsts)
    # an evaluation extends its own expansion's prompt + output + observation
    assert prompts["i0v0"][: len(prompts["i0e0"])] == prompts["i0e0"]
    # kept prefixes are released once no later node needs them
    assert tokens.kept_prefixes == 0


def test_mcts_lats_layout_puts_each_call_types_template_and_reflections_first() -> None:
    program, prompts, outputs, tokens = _mcts_prompts("lats", block_size=16)
    assert isinstance(program, Program)
    nodes = {n.node_id: n for n in program.nodes if isinstance(n, LLMNode)}
    system = program.system_prompt_tokens
    expand, value = nodes["i0e0"], nodes["i0v0"]
    assert expand.template == "mcts-expand" and value.template == "mcts-value"
    head_e = prompts["i0e0"][: system + expand.template_tokens]
    head_v = prompts["i0v0"][: system + value.template_tokens]
    # same system prompt, then different templates: a value call does not extend its expansion
    assert head_e[:system] == head_v[:system]
    assert head_e[system : system + 8] != head_v[system : system + 8]
    # ... but it carries the expansion's body: question, instruction, output, observation
    body_e = prompts["i0e0"][system + expand.template_tokens :] + outputs["i0e0"]
    body_v = prompts["i0v0"][system + value.template_tokens :]
    assert body_v[: len(body_e)] == body_e
    # every expansion of iteration 0 shares system + template + question
    shared = system + expand.template_tokens + program.root_prompt_tokens
    assert all(prompts[f"i0e{c}"][:shared] == prompts["i0e0"][:shared] for c in range(5))
    # after a reflection, later expand and value prompts carry its output after the template
    later = [n for n in nodes.values() if n.memory]
    assert later, "seed 3 should reflect at least once"
    call = later[-1]
    (memory,) = call.memory
    start = system + call.template_tokens
    assert prompts[call.node_id][start : start + len(outputs[memory])] == outputs[memory]
    assert tokens.kept_prefixes == 0


def test_lats_templates_are_shared_across_programs() -> None:
    import random

    space = TokenSpace()
    generator = build_generator("mcts")
    heads = []
    for seed in (1, 2):
        program = generator.draw(random.Random(seed), f"m{seed}", 0.0)
        plan = compile_program(program)
        node = next(i for i, n in enumerate(program.nodes) if isinstance(n, LLMNode))
        spec = program.nodes[node]
        assert isinstance(spec, LLMNode)
        prompt = ProgramTokens(plan, space).prompt_and_output(node)[0]
        heads.append(prompt[: program.system_prompt_tokens + spec.template_tokens + 1])
    assert heads[0][:-1] == heads[1][:-1]  # system prompt + template
    assert heads[0][-1] != heads[1][-1]  # then each program's own question


def test_incremental_hash_chains_equal_hashing_each_prompt_whole() -> None:
    program = react_program(outputs=(30, 17, 9), observation=45, system=64, root=21)
    plan = compile_program(program)
    tokens = ProgramTokens(plan, TokenSpace(), block_size=16)
    for node in range(len(program.nodes)):
        if plan.is_llm[node]:
            prompt, output, hashes, engine = tokens.prompt_and_output(node)
            assert hashes == token_block_hashes(prompt, 16)
            assert engine == _engine_chain(prompt)
            tokens.finish_call(node, prompt, output, hashes, engine)
        else:
            tokens.finish_wait(node)


@pytest.mark.parametrize(("kind", "seed"), [("coding", 1), ("research", 2), ("mcts", 4)])
def test_engine_chains_handed_to_the_engine_equal_its_own(kind: str, seed: int) -> None:
    """Programs sharing system prompts and templates in one token space, every call's engine
    chain (kept per header, extended over new blocks only) equals the engine hashing the
    whole prompt; so does the router chain."""
    import random

    space = TokenSpace()
    generator = build_generator(kind)
    for index in range(3):
        program = generator.draw(random.Random(seed + index), f"p{index}", 0.0)
        plan = compile_program(program)
        tokens = ProgramTokens(plan, space, block_size=16)
        for node in range(len(program.nodes)):  # node order is a topological order
            if plan.is_llm[node]:
                call = tokens.prompt_and_output(node)
                assert call.engine_hashes == _engine_chain(call.prompt)
                assert call.hashes == token_block_hashes(call.prompt, 16)
                tokens.finish_call(node, call.prompt, call.output, call.hashes, call.engine_hashes)
            else:
                tokens.finish_wait(node)
        assert tokens.kept_prefixes == 0


@pytest.mark.parametrize(("kind", "seed"), [("coding", 1), ("mcts", 4), ("react", 3)])
def test_a_waits_pin_prefix_is_what_the_engine_cached(kind: str, seed: int) -> None:
    """The prefix a wait's retention pins is its parent call's prompt + output as the engine
    saw them — for a templated call (the coding workload's repository, LATS's call types)
    with the template after the system prompt, which the kept body form leaves out; before,
    such a pin matched the engine's cache over the system prompt only. Every later call of
    the thread under the same header extends it."""
    import random

    space = TokenSpace()
    program = build_generator(kind).draw(random.Random(seed), "p0", 0.0)
    plan = compile_program(program)
    tokens = ProgramTokens(plan, space, block_size=16)
    seen: dict[int, list[int]] = {}  # LLM node -> prompt + output as sent
    checked = 0
    for node in range(len(program.nodes)):
        if plan.is_llm[node]:
            call = tokens.prompt_and_output(node)
            seen[node] = call.prompt + call.output
            tokens.finish_call(node, call.prompt, call.output, call.hashes, call.engine_hashes)
            continue
        pinned = tokens.pin_prefix(node)
        parents = [p for p in plan.parents[node] if p in seen]
        if pinned is not None and parents:
            assert pinned == seen[parents[0]]
            checked += 1
        tokens.finish_wait(node)
    assert checked > 0
