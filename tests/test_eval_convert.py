"""Specification of scripts/convert_benchmark.py: benchmark files become task records `popula eval` reads.

The shipped sample (samples/humaneval_style.jsonl) is exactly what the converter makes of
samples/humaneval_style_source.jsonl, every converted task is valid in the sandbox, and
each problem's own reference solution passes it as a code_f answer.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from popula.records import read_records
from popula.sandbox import Sandbox

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("convert_benchmark", ROOT / "scripts" / "convert_benchmark.py")
convert_benchmark = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(convert_benchmark)


def test_the_shipped_sample_is_the_conversion_of_its_source(tmp_path):
    out = tmp_path / "tasks.jsonl"
    assert convert_benchmark.main(["--format", "humaneval", str(ROOT / "samples/humaneval_style_source.jsonl"),
                                   str(out)]) == 0
    assert out.read_text() == (ROOT / "samples/humaneval_style.jsonl").read_text()


def test_a_gzipped_source_as_benchmarks_publish_it_converts_the_same(tmp_path):
    source = tmp_path / "HumanEval.jsonl.gz"
    source.write_bytes(gzip.compress((ROOT / "samples/humaneval_style_source.jsonl").read_bytes()))
    assert convert_benchmark.main(["--format", "humaneval", str(source), str(tmp_path / "tasks.jsonl")]) == 0
    assert (tmp_path / "tasks.jsonl").read_text() == (ROOT / "samples/humaneval_style.jsonl").read_text()
    (tmp_path / "cut.jsonl.gz").write_bytes(source.read_bytes()[:40])  # a truncated download
    assert convert_benchmark.main(["--format", "humaneval", str(tmp_path / "cut.jsonl.gz"), str(tmp_path / "o.jsonl")]) == 2


def test_converted_tasks_are_valid_and_their_reference_solutions_pass():
    tasks = read_records(ROOT / "samples/humaneval_style.jsonl")
    assert len(tasks) == 6 and {t.type for t in tasks} == {"code_f"}
    with Sandbox(workers=1) as sb:
        verdicts = sb.verify(tasks)
        assert all(v.valid for v in verdicts), [v for v in verdicts if not v.valid]
        solved = [dataclasses.replace(t, outputs=v.outputs, answer=t.program) for t, v in zip(tasks, verdicts)]
        assert [v.correct for v in sb.verify(solved)] == [True] * len(tasks)


def test_a_problem_without_two_exact_tests_is_skipped_with_its_line(tmp_path, capsys):
    lines = (ROOT / "samples/humaneval_style_source.jsonl").read_text().splitlines()
    records, skipped = convert_benchmark.convert(iter(lines), "humaneval", "he.jsonl")
    assert len(records) == len(lines) - 1
    assert skipped == [f"he.jsonl:{len(lines)}: skipped (only 1 test(s) of the form `assert f(...) == value`; "
                       "a code_f task needs at least 2)"]


def test_the_entry_function_is_renamed_to_f_including_recursive_calls():
    source = "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)\n\ndef helper():\n    return fact(3)\n"
    renamed = convert_benchmark.rename_entry(source, "fact")
    assert "def f(n)" in renamed and "n * f(n - 1)" in renamed and "return f(3)" in renamed
    assert "fact" not in renamed
    with pytest.raises(convert_benchmark.ConversionError, match="already uses the name 'f'"):
        convert_benchmark.rename_entry("def g(x):\n    f = 1\n    return x + f\n", "g")
    with pytest.raises(convert_benchmark.ConversionError, match="no top-level function 'h'"):
        convert_benchmark.rename_entry("def g(x):\n    return x\n", "h")


def test_only_exact_equality_asserts_on_the_entry_become_inputs():
    tests = (
        "def check(candidate):\n"
        "    assert candidate(1, [2]) == 3\n"
        "    assert candidate(a=1, b=2) == 3, 'keywords'\n"
        "    assert candidate(1, [2]) == 3\n"  # a duplicate would be shown and hidden at once
        "    assert abs(candidate(0.5, []) - 1) < 1e-6\n"
        "    assert candidate(4, [])\n"
        "    assert other(5) == 5\n"
    )
    assert convert_benchmark.assert_inputs(tests, {"candidate"}) == ["1, [2]", "a=1, b=2"]


def test_mbpp_and_cruxeval_rows():
    mbpp = {"task_id": 11, "text": "Write a function  to add\n two numbers.", "code": "def add_two(a, b):\n    return a + b",
            "test_list": ["assert add_two(1, 2) == 3", "assert add_two(0, 0) == 0", "assert add_two(-1, 5) == 4"]}
    crux = {"id": "sample_3", "code": "def f(s):\n    return s.upper()", "input": "'ab'", "output": "'AB'"}
    records, skipped = convert_benchmark.convert(iter([json.dumps(mbpp)]), "mbpp")
    assert skipped == []
    assert records == [{"id": "11", "type": "code_f", "program": "def f(a, b):\n    return a + b",
                        "inputs": ["1, 2", "0, 0", "-1, 5"], "message": "Write a function to add two numbers."}]
    records, _ = convert_benchmark.convert(iter([json.dumps(crux)]), "cruxeval")
    assert [(r["id"], r["type"], r["inputs"]) for r in records] == [("sample_3-o", "code_o", ["'ab'"]),
                                                                     ("sample_3-i", "code_i", ["'ab'"])]


def test_bad_lines_are_named_and_a_missing_file_exits_2(tmp_path, capsys):
    _, skipped = convert_benchmark.convert(iter(["{not json", "[1]", json.dumps({"task_id": 1})]), "humaneval", "x.jsonl")
    assert [s.split(" (")[0] for s in skipped] == ["x.jsonl:1: skipped", "x.jsonl:2: skipped", "x.jsonl:3: skipped"]
    assert "field 'entry_point' is missing" in skipped[2]
    assert convert_benchmark.main(["--format", "mbpp", str(tmp_path / "none.jsonl"), str(tmp_path / "o.jsonl")]) == 2
    assert "none.jsonl" in capsys.readouterr().err
