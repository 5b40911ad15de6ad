"""Prompt token ids share exactly what real agents share."""

from __future__ import annotations

import itertools

import pytest
from simtest_helpers import react_program

from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_sim.plan import compile_program
from agentrt_sim.tokens import ProgramTokens, TokenSpace
from agentrt_sim.workloads.generate import build_generator

pytestmark = pytest.mark.timeout(30)


def _run_chain(tokens: ProgramTokens, plan_nodes: int, is_llm: tuple[bool, ...]) -> list[list[int]]:
    prompts = []
    for node in range(plan_nodes):
        if is_llm[node]:
            prompt, output, hashes = tokens.prompt_and_output(node)
            prompts.append(prompt + output)
            tokens.finish_call(node, prompt, output, hashes)
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


def test_mcts_branches_share_their_tree_path() -> None:
    import random

    program = build_generator("mcts").draw(random.Random(3), "m", 0.0)
    plan = compile_program(program)
    tokens = ProgramTokens(plan, TokenSpace())
    prompts: dict[str, list[int]] = {}
    for node, spec in enumerate(program.nodes):
        if plan.is_llm[node]:
            prompt, output, _ = tokens.prompt_and_output(node)
            prompts[spec.node_id] = prompt
            tokens.finish_call(node, prompt, output)
        else:
            tokens.finish_wait(node)
    # the five first-iteration expansions share the system prompt + question, then differ
    root = program.system_prompt_tokens + program.root_prompt_tokens
    firsts = [prompts[f"i0e{c}"] for c in range(5)]
    assert all(p[:root] == firsts[0][:root] for p in firsts)
    # an evaluation extends its own expansion's prompt + output + observation
    assert prompts["i0v0"][: len(prompts["i0e0"])] == prompts["i0e0"]
    # kept prefixes are released once no later node needs them
    assert tokens.kept_prefixes == 0


def test_incremental_hash_chains_equal_hashing_each_prompt_whole() -> None:
    program = react_program(outputs=(30, 17, 9), observation=45, system=64, root=21)
    plan = compile_program(program)
    tokens = ProgramTokens(plan, TokenSpace(), block_size=16)
    for node in range(len(program.nodes)):
        if plan.is_llm[node]:
            prompt, output, hashes = tokens.prompt_and_output(node)
            assert hashes == token_block_hashes(prompt, 16)
            tokens.finish_call(node, prompt, output, hashes)
        else:
            tokens.finish_wait(node)
