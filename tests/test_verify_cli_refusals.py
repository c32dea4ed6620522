"""`popula verify` refuses what it cannot do right, says where, and leaves no trace; a bad
record is that record's problem.

Every refusal of the whole run (options, --out, a file without a record) is exit 2 with one
message naming the file, never a traceback, and nothing written or overwritten: not the
input, not --out, not a temporary file. A line that is no record (not JSON, a key twice, a
field missing or wrong, an id already taken: reason "malformed") or is over the sandbox's
caps (bytes per record, inputs per task: "too_large") is refused alone: it gets an invalid
result whose detail names its line and why, in its place, and every other record is judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from popula.cli import main
from popula.records import read_records, write_jsonl
from popula.sandbox import Limits

GOOD = {"id": "x", "type": "code_o", "program": "def f(a):\n    return a + 1", "inputs": ["1"]}
CODE_F = {"id": "fx", "type": "code_f", "program": "def f(a):\n    return a * 2", "inputs": ["1", "2"]}


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def refused(args: list[str], capsys) -> str:
    """Run `popula verify ARGS` in this process; it must exit 2 (an exception would be a traceback)."""
    assert main(["verify", *args, "--workers", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def verdicts(args: list[str], capsys) -> list[dict]:
    """Run `popula verify ARGS` in this process; it must succeed: one result per record."""
    assert main(["verify", *args, "--workers", "1"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


# -- --out ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink"])
def test_out_equal_to_the_input_is_refused_and_the_input_is_untouched(tmp_path, capsys, monkeypatch, spelling):
    tasks = write(tmp_path / "tasks.jsonl", json.dumps(GOOD))
    out = {"same": tasks, "relative": Path("./sub/../tasks.jsonl"), "symlink": tmp_path / "link.jsonl",
           "hardlink": tmp_path / "hard.jsonl"}[spelling]
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    if spelling == "symlink":
        out.symlink_to(tasks)
    if spelling == "hardlink":
        os.link(tasks, out)
    before = listing(tmp_path)
    err = refused([str(tasks), "--out", str(out)], capsys)
    assert f"--out {out} is the input file {tasks}" in err
    assert listing(tmp_path) == before


def test_out_naming_a_directory_is_refused_and_leaves_no_temporary_file(tmp_path, capsys):
    tasks = write(tmp_path / "tasks.jsonl", json.dumps(GOOD))
    somedir = tmp_path / "somedir"
    somedir.mkdir()
    err = refused([str(tasks), "--out", str(somedir)], capsys)
    assert f"--out {somedir} is a directory" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["somedir", "tasks.jsonl"]
    assert list(somedir.iterdir()) == []


def test_a_write_that_fails_removes_its_temporary_file_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "results"
    target.mkdir()  # renaming a file over a directory fails after the rows are written
    with pytest.raises(OSError):
        write_jsonl(target, [{"a": 1}])
    assert [p.name for p in tmp_path.iterdir()] == ["results"]
    existing = write(tmp_path / "old.jsonl", "keep")
    write_jsonl(existing, [{"a": 1}])
    assert existing.read_text() == '{"a": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.jsonl", "results"]


# -- the task file -------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, what", [("", "is empty"), ("\n  \n\n", "holds only blank lines")])
def test_a_file_without_records_says_so(tmp_path, capsys, content, what):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(content)
    err = refused([str(tasks)], capsys)
    assert f"{tasks}: no task records (the file {what})" in err


# -- a bad record is that record's problem ------------------------------------------------------------

def test_a_duplicate_id_is_refused_on_its_later_line_naming_both(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps(GOOD), "", json.dumps({**GOOD, "id": "y"}), json.dumps(GOOD))
    out = tmp_path / "out.jsonl"
    assert main(["verify", str(tasks), "--out", str(out), "--workers", "1"]) == 0
    first, other, again = [json.loads(line) for line in out.read_text().splitlines()]
    assert first["valid"] and other["valid"]
    assert (again["id"], again["valid"], again["reason"]) == ("x", False, "malformed")
    assert again["detail"] == f"{tasks}:4: id 'x' is already the id of line 1; every record needs its own id"


def test_an_integer_id_and_its_string_are_the_same_id(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**GOOD, "id": 7}), json.dumps({**GOOD, "id": "7"}))
    assert verdicts([str(tasks)], capsys)[1]["detail"].startswith(f"{tasks}:2: id '7' is already the id of line 1")


@pytest.mark.parametrize("line", [
    '{"id": "x", "id": "y", "type": "code_o", "program": "def f(a):\\n    return a", "inputs": ["1"]}',
    '{"id": "x", "type": "code_o", "program": "def f(a):\\n    return a", "inputs": ["1"], "extra": {"k": 1, "k": 2}}',
])
def test_a_key_given_twice_is_refused_naming_the_line_and_key(tmp_path, capsys, line):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**GOOD, "id": "first"}), line)
    first, bad = verdicts([str(tasks)], capsys)
    assert first["valid"] and bad["reason"] == "malformed"
    assert bad["detail"].startswith(f"{tasks}:2: key ") and "appears twice in one object" in bad["detail"]


@pytest.mark.parametrize("inputs", [["1"]])
def test_code_f_needs_a_shown_and_a_hidden_input_and_says_how_it_splits(tmp_path, capsys, inputs):
    tasks = write(tmp_path / "t.jsonl", json.dumps(GOOD), json.dumps({**CODE_F, "inputs": inputs}))
    bad = verdicts([str(tasks)], capsys)[1]
    assert (bad["id"], bad["reason"]) == ("fx", "malformed")
    assert bad["detail"].startswith(f"{tasks}:2: field 'inputs' of a code_f task holds 1 input; it needs at least 2")
    assert "first half (n // 2) is shown" in bad["detail"]


def test_a_file_mixing_good_and_bad_records_gets_a_verdict_for_each_and_a_reason_for_each_bad_one(tmp_path, capsys):
    oversized = {**CODE_F, "id": "oversized", "inputs": ["'" + "x" * 16_000 + "'"] * 1200}  # 20 MB
    lines = [
        json.dumps(GOOD),
        json.dumps({**GOOD, "id": "two-inputs", "inputs": ["1", "2"]}),  # a code_o record holds one
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({**GOOD, "id": "no-program", "program": None}),
        json.dumps(oversized),
        json.dumps({**CODE_F, "id": "many-inputs", "inputs": [str(i) for i in range(1200)]}),
        json.dumps({**CODE_F, "answer": "def f(a):\n    return a + a"}),
        json.dumps({**GOOD, "id": "code-o", "answer": "2"}),
    ]
    tasks = write(tmp_path / "t.jsonl", *lines)
    with tasks.open("ab") as fh:
        fh.write(b'{"id": "latin-1", "program": "caf\xe9"}\n')
    rows = verdicts([str(tasks)], capsys)
    assert [(r["id"], r["valid"], r["reason"]) for r in rows] == [
        ("x", True, None), ("two-inputs", False, "malformed"), (None, False, "malformed"), (None, False, "malformed"),
        ("no-program", False, "malformed"), (None, False, "too_large"), ("many-inputs", False, "too_large"),
        ("fx", True, None), ("code-o", True, None), (None, False, "malformed"),
    ]
    assert rows[0]["outputs"] == ["2"] and rows[7]["correct"] is True and rows[8]["correct"] is True
    details = [r["detail"] for r in rows if not r["valid"]]
    assert all(d and "\n" not in d for d in details)
    assert details[0] == f"{tasks}:2: field 'inputs' of a code_o task must hold exactly one input"
    assert details[1].startswith(f"{tasks}:3: not valid JSON")
    assert details[2] == f"{tasks}:4: a task record must be a JSON object, got list"
    assert details[3] == f"{tasks}:5: field 'program' must be str, got NoneType"
    assert details[4].startswith(f"{tasks}:6: the record is ") and "bytes long (limit 1048576)" in details[4]
    assert details[5] == "the task has 1200 inputs (limit 100)"
    assert details[6].startswith(f"{tasks}:10: not UTF-8 text")


def test_an_oversized_record_is_skipped_unparsed_and_never_held_whole(tmp_path):
    # once: 20 MB of 1,200 inputs took the trusted process 19 s and 1.6 GB before a refusal
    import time
    import tracemalloc

    from popula.records import RecordFault, scan_records

    oversized = {**CODE_F, "inputs": ["'" + "x" * 16_000 + "'"] * 1200}
    tasks = write(tmp_path / "t.jsonl", json.dumps(GOOD), json.dumps(oversized), json.dumps({**GOOD, "id": "y"}))
    cap = Limits().max_record_bytes
    start = time.monotonic()
    tracemalloc.start()
    try:
        entries = scan_records(tasks, max_line_bytes=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 2
    assert [type(e).__name__ for e in entries] == ["TaskRecord", "RecordFault", "TaskRecord"]
    assert isinstance(entries[1], RecordFault) and entries[1].reason == "too_large"
    assert peak < 4 * cap  # buffers for about a cap's worth of the line, not its 20 MB


def test_the_caps_are_far_above_what_tasks_carry():
    from popula.kinds import get_kind, task_types
    from popula.tasks.generator import generate_tasks

    limits = Limits()
    assert max(get_kind(name).proposal_inputs for name in task_types()) * 5 <= limits.max_inputs
    tasks = generate_tasks(200, seed=5, verify=False)
    assert max(len(json.dumps(t.to_json()).encode()) for t in tasks) * 50 <= limits.max_record_bytes


def test_a_null_message_and_a_null_answer_mean_none(tmp_path):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**CODE_F, "message": None, "answer": None}))
    (record,) = read_records(tasks)
    assert record.message == "" and record.answer is None


def test_a_wrongly_typed_message_still_names_what_is_accepted(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**CODE_F, "message": 3}))
    (bad,) = verdicts([str(tasks)], capsys)
    assert bad["detail"] == f"{tasks}:1: field 'message' must be str or null, got int"


# -- verdicts --------------------------------------------------------------------------------------------

def test_an_output_that_is_not_a_value_makes_the_task_invalid_with_that_reason(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl",
                  json.dumps({**GOOD, "outputs": ["<Box object at 0x7f>"], "answer": "2"}),
                  json.dumps({**CODE_F, "outputs": ["2", "four"], "message": None}),
                  json.dumps({**GOOD, "id": "ok", "outputs": ["2"], "answer": "2"}))
    assert main(["verify", str(tasks), "--workers", "1"]) == 0
    bad, named, ok = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert bad["valid"] is False and bad["reason"] == "unrepresentable" and bad["correct"] is None
    assert bad["detail"].startswith("outputs[0] ('<Box object at 0x7f>') is not a Python value")
    assert named["valid"] is False and named["detail"].startswith("outputs[1] ('four') is not a Python value")
    assert ok["valid"] is True and ok["correct"] is True


def test_refusals_reach_the_shell_as_exit_2_and_one_line_without_a_traceback(tmp_path):
    tasks = write(tmp_path / "t.jsonl", json.dumps(GOOD), json.dumps(GOOD))
    done = subprocess.run([sys.executable, "-m", "popula", "verify", str(tasks), "--out", str(tasks)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("popula verify: error: --out ")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = subprocess.run([sys.executable, "-m", "popula", "verify", str(empty)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (f"popula verify: error: {empty}: no task records (the file is empty); "
                           "write one JSON object per line\n")


@pytest.mark.parametrize("task_type, field", [("code_o", "answer"), ("code_i", "answer")])
def test_an_answer_beyond_the_parsers_nesting_limit_is_told_the_limit(tmp_path, capsys, task_type, field):
    deep = "-" * 19990 + "42"  # under the length limit, far over Python's nesting limits
    tasks = write(tmp_path / "t.jsonl", json.dumps({**GOOD, "type": task_type, field: deep}))
    assert main(["verify", str(tasks), "--workers", "1"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["correct"] is False and row["answer_reason"] == "not_a_value"
    assert "nested too deeply to read (MemoryError)" in row["answer_detail"]


def test_an_output_beyond_the_nesting_limit_names_the_limit_too(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**GOOD, "outputs": ["-" * 7000 + "2"]}))
    assert main(["verify", str(tasks), "--workers", "1"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["reason"] == "unrepresentable" and "nested too deeply to read (MemoryError): at most about 3000" in row["detail"]
