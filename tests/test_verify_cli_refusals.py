"""`popula verify` refuses what it cannot do right, says where, and leaves no trace.

Every refusal is exit 2 with one message naming the file (and the line, where a line is at
fault), never a traceback, and nothing written or overwritten: not the input, not --out, not
a temporary file.
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


def test_duplicate_ids_are_an_error_naming_both_lines(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps(GOOD), "", json.dumps({**GOOD, "id": "y"}), json.dumps(GOOD))
    out = tmp_path / "out.jsonl"
    err = refused([str(tasks), "--out", str(out)], capsys)
    assert f"{tasks}:4: id 'x' is already the id of line 1" in err
    assert not out.exists()


def test_an_integer_id_and_its_string_are_the_same_id(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**GOOD, "id": 7}), json.dumps({**GOOD, "id": "7"}))
    assert f"{tasks}:2: id '7' is already the id of line 1" in refused([str(tasks)], capsys)


@pytest.mark.parametrize("line", [
    '{"id": "x", "id": "y", "type": "code_o", "program": "def f(a):\\n    return a", "inputs": ["1"]}',
    '{"id": "x", "type": "code_o", "program": "def f(a):\\n    return a", "inputs": ["1"], "extra": {"k": 1, "k": 2}}',
])
def test_a_key_given_twice_is_an_error_naming_the_line_and_key(tmp_path, capsys, line):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**GOOD, "id": "first"}), line)
    err = refused([str(tasks)], capsys)
    assert f"{tasks}:2: key " in err and "appears twice in one object" in err


@pytest.mark.parametrize("inputs", [["1"]])
def test_code_f_needs_a_shown_and_a_hidden_input_and_says_how_it_splits(tmp_path, capsys, inputs):
    tasks = write(tmp_path / "t.jsonl", json.dumps(GOOD), json.dumps({**CODE_F, "inputs": inputs}))
    err = refused([str(tasks)], capsys)
    assert f"{tasks}:2: field 'inputs' of a code_f task holds 1 input; it needs at least 2" in err
    assert "first half (n // 2) is shown" in err


def test_a_null_message_and_a_null_answer_mean_none(tmp_path):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**CODE_F, "message": None, "answer": None}))
    (record,) = read_records(tasks)
    assert record.message == "" and record.answer is None


def test_a_wrongly_typed_message_still_names_what_is_accepted(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", json.dumps({**CODE_F, "message": 3}))
    assert f"{tasks}:1: field 'message' must be str or null, got int" in refused([str(tasks)], capsys)


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
    done = subprocess.run([sys.executable, "-m", "popula", "verify", str(tasks)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and f"{tasks}:2: id 'x'" in done.stderr


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
