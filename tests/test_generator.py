"""The program generator writes valid, deterministic, typed programs and tasks from them."""

from __future__ import annotations

import ast
import random

import pytest

from popula.errors import PopulaError
from popula.tasks.generator import (
    HELDOUT_NAMESPACE,
    PRESETS,
    Difficulty,
    generate_program,
    generate_tasks,
    random_input,
)


def _depth(node: ast.AST, level: int = 0) -> int:
    blocks = (ast.For, ast.While, ast.If, ast.FunctionDef)
    children = [_depth(c, level + isinstance(c, blocks)) for c in ast.iter_child_nodes(node)]
    return max(children, default=level)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_programs_parse_and_define_only_f_at_top_level(preset: str) -> None:
    rng = random.Random(preset)
    for _ in range(200):
        program = generate_program(rng, PRESETS[preset])
        tree = ast.parse(program.source)
        assert [type(n) for n in tree.body] == [ast.FunctionDef]
        assert tree.body[0].name == "f"
        assert len(tree.body[0].args.args) == len(program.param_types)


def test_same_seed_same_programs_and_difficulty_knobs_grow_programs() -> None:
    def sources(preset: str) -> list[str]:
        rng = random.Random(7)
        return [generate_program(rng, PRESETS[preset]).source for _ in range(150)]

    assert sources("hard") == sources("hard")
    easy, hard = sources("easy"), sources("hard")
    lines = lambda progs: sum(p.count("\n") + 1 for p in progs) / len(progs)  # noqa: E731
    depth = lambda progs: sum(_depth(ast.parse(p)) for p in progs) / len(progs)  # noqa: E731
    assert lines(easy) == 2  # `def f(...):` and one return
    assert lines(hard) > 6
    assert depth(hard) > depth(easy) + 1
    assert len(set(hard)) > 140  # random programs, not a handful of templates


def test_random_inputs_match_the_signature() -> None:
    rng = random.Random(3)
    for _ in range(100):
        program = generate_program(rng, PRESETS["hard"])
        args = eval(f"({random_input(rng, program.param_types)},)")  # literals only
        assert len(args) == len(program.param_types)
        kinds = {"int": int, "str": str, "list": list, "tuple": tuple, "dict": dict}
        assert all(isinstance(a, kinds[k]) for a, k in zip(args, program.param_types))


def test_nearly_all_generated_programs_pass_the_sandbox() -> None:
    drafts = generate_tasks(120, seed=11, difficulty="hard", verify=False)
    assert all(not d.outputs for d in drafts)
    from popula.sandbox import Sandbox

    with Sandbox(workers=2) as sandbox:
        results = sandbox.verify(drafts)
    valid = [r for r in results if r.valid]
    assert len(valid) >= 0.95 * len(drafts), [r.reason for r in results if not r.valid]


def test_generate_tasks_gives_verified_tasks_of_the_requested_types() -> None:
    tasks = generate_tasks(30, seed=5, types=["code_o", "code_f"])
    assert len(tasks) == 30
    assert {t.type for t in tasks} == {"code_o", "code_f"}
    for task in tasks:
        assert len(task.outputs) == len(task.inputs)
        assert len(task.inputs) == (10 if task.type == "code_f" else 1)
        assert bool(task.message) == (task.type == "code_f")
    assert [t.to_json() for t in tasks] == [t.to_json() for t in generate_tasks(30, seed=5, types=["code_o", "code_f"])]


def test_namespaces_keep_held_out_tasks_apart_from_other_streams() -> None:
    held = generate_tasks(20, seed=1, difficulty="hard", namespace=HELDOUT_NAMESPACE, verify=False)
    corpus = generate_tasks(20, seed=1, difficulty="hard", namespace="corpus", verify=False)
    assert {t.program for t in held}.isdisjoint(t.program for t in corpus)


def test_bad_arguments_are_reported() -> None:
    with pytest.raises(PopulaError, match="difficulty"):
        generate_tasks(3, seed=0, difficulty="brutal", verify=False)
    with pytest.raises(PopulaError, match="task types"):
        generate_tasks(3, seed=0, types=["code_x"], verify=False)
    with pytest.raises(PopulaError, match="params"):
        Difficulty(params=0)
