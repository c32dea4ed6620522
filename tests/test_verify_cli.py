"""`popula verify TASKS.jsonl [--out FILE] [--workers N]` (docs/design.md § Commands, § Task records)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from popula.cli import main

SAMPLE = Path(__file__).parent.parent / "samples" / "tasks.jsonl"


@pytest.mark.slow
def test_the_shipped_sample_verifies_with_one_line_per_record_in_order(tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    assert main(["verify", str(SAMPLE), "--out", str(out), "--workers", "2"]) == 0
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in results] == [r["id"] for r in records]
    for row in results:
        assert {"id", "valid", "reason", "detail", "outputs", "correct"} <= row.keys()
    by_id = {r["id"]: r for r in results}
    assert by_id["o-reverse-words"]["correct"] is True
    assert by_id["o-wrong-answer"]["correct"] is False
    assert by_id["i-any-input"]["correct"] is True
    assert by_id["f-double"]["correct"] is True
    assert by_id["bad-import-os"]["reason"] == "forbidden"
    assert by_id["bad-set-order"]["reason"] == "nondeterministic"
    assert by_id["bad-infinite-loop"]["reason"] == "timeout"
    assert any(r["valid"] for r in results) and any(not r["valid"] for r in results)
    summary = capsys.readouterr().err
    valid = sum(r["valid"] for r in results)
    assert f"valid {valid}/{len(results)}" in summary and "tasks/s" in summary


def test_results_go_to_stdout_by_default(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "x", "type": "code_o", "program": "def f(a):\n    return a[::-1]", "inputs": ["'abc'"]}) + "\n")
    assert main(["verify", str(path), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "id": "x", "valid": True, "reason": None, "detail": "", "outputs": ["'cba'"], "correct": None,
        "answer_reason": None, "answer_detail": "",
    }
    assert "valid 1/1" in captured.err


def test_a_bad_record_gets_a_verdict_naming_file_line_and_field_and_the_rest_is_judged(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"id": "x", "type": "code_o", "program": "def f(a):\n    return a", "inputs": ["1"]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "y", "inputs": "1"}) + "\n")
    done = subprocess.run([sys.executable, "-m", "popula", "verify", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    judged, bad = [json.loads(line) for line in done.stdout.splitlines()]
    assert judged["valid"] and judged["outputs"] == ["1"]
    assert (bad["id"], bad["valid"], bad["reason"]) == ("y", False, "malformed")
    assert bad["detail"].startswith(f"{path}:2: ") and "'inputs'" in bad["detail"]
    assert "valid 1/2" in done.stderr and "1 bad line (malformed or too large)" in done.stderr


@pytest.mark.parametrize("args", [["--workers", "0"], ["--out", "/nonexistent-dir/x.jsonl"]])
def test_bad_options_exit_2(args, capsys):
    assert main(["verify", str(SAMPLE), *args]) == 2
    assert "popula verify: error:" in capsys.readouterr().err


def test_help_describes_the_command():
    done = subprocess.run([sys.executable, "-m", "popula", "verify", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--workers" in done.stdout and "--out" in done.stdout


@pytest.mark.slow
def test_big_files_show_a_progress_bar_on_stderr(tmp_path, capsys):
    from popula.tasks.generator import generate_tasks
    from popula.records import write_jsonl

    path = tmp_path / "big.jsonl"
    write_jsonl(path, [t.to_json() for t in generate_tasks(600, seed=3, verify=False)])
    out = tmp_path / "out.jsonl"
    assert main(["verify", str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "600/600" in err and "valid 600/600" in err
    assert len(out.read_text().splitlines()) == 600


# Lone surrogates, as JSON escapes in the task file: in an error message, a program, an input, a code_f
# and a code_i answer, an id and a message. Each used to make `popula verify` crash (UnicodeEncodeError,
# exit 1, nothing written).
_SURROGATE_RECORDS = [
    {"id": "message", "type": "code_o", "program": "def f(x):\n    raise ValueError('\\ud800' + x)", "inputs": ["'a'"]},
    {"id": "program", "type": "code_o", "program": "def f(x):\n    return '\ud800' + x", "inputs": ["'a'"]},
    {"id": "input", "type": "code_o", "program": "def f(x):\n    return x", "inputs": ["'\udc80'"]},
    {"id": "code_f", "type": "code_f", "program": "def f(x):\n    return x", "inputs": ["1", "2"], "outputs": ["1", "2"],
     "answer": "def f(x):\n    return '\ud800'"},
    {"id": "code_i", "type": "code_i", "program": "def f(x):\n    return x", "inputs": ["1"], "outputs": ["1"], "answer": "'\udfff'"},
    {"id": "id \ud800", "type": "code_o", "program": "def f(x):\n    return x", "inputs": ["1"], "message": "hint \udfff"},
]


def _surrogate_tasks(tmp_path):
    path = tmp_path / "surrogates.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _SURROGATE_RECORDS))  # ASCII: \ud800 escapes
    return path


def _check_surrogate_results(lines):
    results = [json.loads(line) for line in lines]
    assert [r["id"] for r in results] == [r["id"] for r in _SURROGATE_RECORDS]
    by_id = {r["id"]: r for r in results}
    assert by_id["message"]["reason"] == "runtime_error" and by_id["message"]["detail"] == "ValueError: \ud800a"
    assert by_id["program"]["valid"] is False and by_id["input"]["valid"] is False
    assert by_id["code_f"]["valid"] is True and by_id["code_f"]["correct"] is False
    assert by_id["code_i"]["valid"] is True and by_id["code_i"]["correct"] is False
    assert by_id["id \ud800"]["valid"] is True and by_id["id \ud800"]["outputs"] == ["1"]


def test_lone_surrogates_are_written_escaped_to_stdout(tmp_path, capsys):
    assert main(["verify", str(_surrogate_tasks(tmp_path)), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    captured.out.encode("utf-8")  # strict: nothing unencodable reached the stream
    _check_surrogate_results(captured.out.splitlines())
    assert "valid 3/6, correct 0/2" in captured.err


def test_lone_surrogates_are_written_escaped_to_out(tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    assert main(["verify", str(_surrogate_tasks(tmp_path)), "--out", str(out), "--workers", "1"]) == 0
    _check_surrogate_results(out.read_text(encoding="utf-8").splitlines())
    assert "\\ud800" in out.read_text(encoding="utf-8")
    assert "valid 3/6, correct 0/2" in capsys.readouterr().err


def test_json_line_escapes_only_what_the_encoding_cannot_hold():
    from popula.records import json_line

    row = {"text": "caf\u00e9 \ud800", "ok": "\u00e9"}
    assert json_line({"ok": "\u00e9"}) == '{"ok": "\u00e9"}'
    assert json_line(row) == '{"text": "caf\u00e9 \\ud800", "ok": "\u00e9"}'
    assert json.loads(json_line(row)) == row
    assert json.loads(json_line(row, "ascii")) == row and json_line(row, "ascii").isascii()
