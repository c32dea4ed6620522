"""Real-world programs (string/list/dict/set/tuple work, nesting, comprehensions, loops,
slicing, methods of built-in types, allowed imports, small classes) are accepted, and the
sandbox computes exactly the outputs the same code computes in a normal interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox, read_value, values_equal

PROGRAMS = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "sandbox" / "realworld.jsonl").read_text().splitlines()
]


def _expected(program: str, inputs: list[str]) -> list[object]:
    """The outputs computed the ordinary way (these test programs are benign)."""
    outputs = []
    for text in inputs:
        scope: dict = {"__name__": "expected"}
        exec(program, scope)
        args, kwargs = eval(f"(lambda *a, **k: (a, k))({text})", scope)
        outputs.append(scope["f"](*args, **kwargs))
    return outputs


@pytest.fixture(scope="module")
def results():
    records = [
        TaskRecord(id=f"rw{i}", type="code_f" if len(p["inputs"]) > 1 else "code_o", program=p["program"], inputs=p["inputs"])
        for i, p in enumerate(PROGRAMS)
    ]
    with Sandbox(workers=2, limits=Limits()) as sandbox:
        return sandbox.verify(records)


def test_the_set_is_varied_enough():
    assert len(PROGRAMS) >= 40


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
def test_program_is_accepted_with_exact_outputs(results, index):
    program = PROGRAMS[index]
    result = results[index]
    assert result.valid, f"{result.reason}: {result.detail}\n{program['program']}"
    expected = _expected(program["program"], program["inputs"])
    assert len(result.outputs) == len(expected)
    for text, value in zip(result.outputs, expected):
        assert values_equal(read_value(text), value), (text, value)
