"""benchmarks/curriculum_variety.py reads a run's task log: variety, repeats and line counts per window."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from popula.complexity import ast_depth

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "curriculum_variety.py"
ONE = "def f(a):\n    return a + 1"
ONE_AGAIN = "def f(x):\n    return x + 5"  # the same form
LOOP = "def f(a):\n    t = 0\n    for x in a:\n        t += x\n    return t"


def write_run(run_dir: Path, steps: dict[int, list[str]]) -> Path:
    run_dir.mkdir()
    with (run_dir / "tasks.jsonl").open("w") as log:
        for step, programs in steps.items():
            for p in programs:
                log.write(json.dumps({"id": "t", "type": "code_o", "program": p, "inputs": ["1"], "step": step}) + "\n")
    return run_dir


def figures(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_run_that_repeats_one_liners_shows_it(tmp_path):
    run = write_run(tmp_path / "run", {0: [LOOP], 1: [ONE, ONE_AGAIN], 2: [ONE, LOOP]})
    got = figures(str(run), "--windows", "1-1", "2-2")["windows"]
    assert got["1-1"] == {"distinct": 0.5, "repeated": 0.0, "multiline": 0.0, "depth": float(ast_depth(ONE))}
    assert got["2-2"]["distinct"] == 1.0 and got["2-2"]["repeated"] == 1.0  # both forms were posed before
    assert got["2-2"]["multiline"] == 0.5


def test_a_window_without_tasks_reports_none_and_bad_input_says_what_is_wrong(tmp_path):
    run = write_run(tmp_path / "run", {1: [ONE]})
    assert figures(str(run), "--windows", "5-9")["windows"]["5-9"]["distinct"] is None
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode != 0 and "no tasks.jsonl" in bad.stderr


def test_a_reference_task_file_reports_the_distribution_the_students_are_scored_on(tmp_path):
    run = write_run(tmp_path / "run", {1: [ONE]})
    tasks = tmp_path / "heldout.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"h{i}", "type": "code_o", "program": p, "inputs": ["[1]"]}) + "\n"
                             for i, p in enumerate((ONE, LOOP, LOOP))))
    got = figures(str(run), "--reference", str(tasks))
    assert got["reference"] == {"tasks": 3, "multiline": round(2 / 3, 4),
                                "depth": round((ast_depth(ONE) + 2 * ast_depth(LOOP)) / 3, 4)}
    assert "reference" not in figures(str(run))
    tasks.write_text("not json\n")
    bad = subprocess.run([sys.executable, str(SCRIPT), str(run), "--reference", str(tasks)], capture_output=True, text=True)
    assert bad.returncode != 0 and "heldout.jsonl:1: not valid JSON" in bad.stderr
