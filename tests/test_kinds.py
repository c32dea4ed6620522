"""The task-kind registry (popula/kinds): the built-in kinds and what registering checks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from popula.errors import PopulaError
from popula.kinds import KINDS, TaskKind, get_kind, register, task_types
from popula.kinds.code_o import CodeOutput
from popula.records import TaskRecord


def test_the_built_in_kinds_in_their_order():
    assert task_types()[:3] == ("code_o", "code_i", "code_f")  # a kind registered later comes after them
    assert [get_kind(t).answer for t in task_types()[:3]] == ["value", "arguments", "program"]
    assert (get_kind("code_f").proposal_inputs, get_kind("code_f").min_inputs, get_kind("code_f").hint) == (10, 2, True)


def test_a_name_registers_once_and_an_unknown_one_is_named():
    with pytest.raises(PopulaError, match="already registered"):
        register(get_kind("code_o"))
    with pytest.raises(PopulaError, match=f"'code_x' is unknown; expected one of {', '.join(task_types())}$"):
        get_kind("code_x")

    class Odd(CodeOutput):
        name = "code_odd"
        answer = "eval"  # type: ignore[assignment]  # not a form the sandbox judges

    with pytest.raises(PopulaError, match="answer form 'eval'"):
        register(Odd())
    assert "code_odd" not in KINDS


def test_no_production_code_branches_on_a_kind_name():
    # Outside popula/kinds a kind's name is data only in the cold-start corpus (its pool of code_f
    # tasks) and recipe (the digest's record of build version 4's kinds); anywhere else it would
    # be a branch the registry should answer. Docstrings and comments may name kinds.
    root = Path(__file__).resolve().parent.parent / "popula"
    named = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "kinds" or path.relative_to(root).as_posix() in ("model/corpus.py", "model/recipe.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in task_types():
                named.append(f"{path.relative_to(root)}:{node.lineno} {node.value}")
    assert not named, named


def test_every_kind_states_its_texts():
    for kind in KINDS.values():
        assert isinstance(kind, TaskKind) and kind.name in KINDS
        assert all(getattr(kind, a) for a in ("description", "label", "compact_head", "direct_ask"))
        assert 1 <= kind.min_inputs <= kind.proposal_inputs


@pytest.mark.parametrize("kind, inputs, outputs, trivial", [
    ("code_o", ["3"], ["3"], "copying"),  # the answer is the input, copied
    ("code_o", ["3"], ["4"], None),
    ("code_i", ["'ab'"], ["'ab'"], "copying"),  # the answer is the output, copied
    ("code_f", ["1", "2", "3", "4"], ["1", "2", "3", "4"], "copying"),  # `return x`
    ("code_f", ["1", "2", "3", "4"], ["7", "7", "7", "7"], "constant"),  # read off the first example
    ("code_f", ["1", "2", "3", "4"], ["1", "2", "3", "5"], None),  # a hidden input differs
    ("code_f", ["1, 2", "3, 4"], ["(1, 2)", "(3, 4)"], None),  # packing its arguments reads them
])
def test_a_task_is_trivial_when_a_student_can_answer_it_without_reading_it(kind, inputs, outputs, trivial):
    task = TaskRecord(id="t", type=kind, program="def f(x):\n    return x", inputs=inputs, outputs=outputs)
    fault = get_kind(kind).trivial_fault(task)
    assert (fault is None) if trivial is None else (trivial in fault)
