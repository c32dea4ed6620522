"""The direct instruction style (small models such as SmolLM2-135M): prompts and parsers.

Round trips need no model; the `realmodel` tests parse outputs SmolLM2-135M really wrote
(recorded by benchmarks/smollm2_formats.py into tests/data/smollm2/).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from popula.records import TaskRecord
from popula.tasks.prompts import InstructFormat

DATA = Path(__file__).parent / "data" / "smollm2"
DIRECT = InstructFormat(None, direct=True)
TASKS = [
    TaskRecord(id="o", type="code_o", program="def f(x):\n    return x * 2", inputs=["3"], outputs=["6"]),
    TaskRecord(id="i", type="code_i", program="def f(a, b):\n    return a + b", inputs=["1, 2"], outputs=["3"]),
    TaskRecord(id="f", type="code_f", program="def f(s):\n    return s[::-1]", inputs=["'ab'", "'c'"],
               outputs=["'ba'", "'c'"], message="reverse"),
]


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.type)
def test_the_answer_a_perfect_student_writes_parses_back(task):
    answer = {"code_o": "6", "code_i": "1, 2", "code_f": task.program}[task.type]
    completion = DIRECT.answer_completion(task, answer)
    assert DIRECT.parse_answer(completion, task.type) == answer
    # the prompt already opened the answer: the completion does not repeat it
    assert DIRECT.student_prompt(task).endswith(DIRECT._answer_prefill(task.type))
    assert not completion.startswith("<answer>")


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.type)
def test_the_task_a_perfect_teacher_writes_parses_back(task):
    parsed = DIRECT.parse_proposal(DIRECT.proposal_completion(task), task.type)
    assert parsed is not None and parsed.program == task.program and parsed.inputs == task.inputs
    assert DIRECT.teacher_prompt(task.type, TASKS).endswith("<program>\n```python\ndef f(")


def test_an_answer_ended_by_the_end_of_turn_instead_of_the_tag_is_accepted():
    assert DIRECT.parse_answer("6\nThe function doubles its input.", "code_o") == "6"
    assert DIRECT.parse_answer("x):\n    return x\n```\nThis returns x.", "code_f") == "def f(x):\n    return x"
    # the program followed by example calls, no closing fence: the leading def block
    assert DIRECT.parse_answer("x):\n    return x + 1\n\nprint(f(1))  # Output: 2", "code_f") == "def f(x):\n    return x + 1"
    assert DIRECT.parse_answer("x):\n    return (x", "code_f") is None  # cut off inside the program
    assert DIRECT.parse_answer("\n```python\ndef f(n):\n    return n\n```", "code_o") is None  # not a value
    assert DIRECT.parse_answer("", "code_i") is None


def test_a_proposal_whose_fence_closed_without_the_tag_is_accepted():
    parsed = DIRECT.parse_proposal("x):\n    return x + 1\n```\n<input>4</input>", "code_o")
    assert parsed is not None and parsed.program == "def f(x):\n    return x + 1" and parsed.inputs == ["4"]


def test_a_proposal_that_calls_its_program_instead_of_tagging_inputs_is_accepted():
    parsed = DIRECT.parse_proposal("a):\n    total = 5 % 3\n    return total\n\nf(10)\n# f will return 5\n```", "code_o")
    assert parsed is not None and parsed.program == "def f(a):\n    total = 5 % 3\n    return total"
    assert parsed.inputs == ["10"]
    assert DIRECT.parse_proposal("x):\n    return x\n# no call", "code_o") is None


def test_the_reasoning_style_is_unchanged_for_larger_models():
    reasoning = InstructFormat(None)
    assert reasoning._answer_prefill("code_o") == "" and reasoning.student_prompt(TASKS[0]).endswith("</answer>.\n\n")
    assert reasoning.parse_answer("6", "code_o") is None  # no tag, no answer: as before


def recorded(kind: str) -> list[dict]:
    path = DATA / f"{kind}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.realmodel
@pytest.mark.parametrize("row", recorded("students"), ids=lambda r: f"{r['type']}-{r['task']['id']}")
def test_recorded_smollm2_answers_parse_as_recorded(row):
    """Every recorded completion parses to the answer noted beside it (None: not parseable)."""
    assert DIRECT.parse_answer(row["texts"][0], row["type"]) == row["parsed"]


@pytest.mark.realmodel
@pytest.mark.parametrize("row", recorded("teachers"), ids=lambda r: r["type"])
def test_recorded_smollm2_proposals_parse_as_recorded(row):
    parsed = DIRECT.parse_proposal(row["texts"][0], row["type"])
    assert (None if parsed is None else {"program": parsed.program, "inputs": parsed.inputs}) == row["parsed"]
