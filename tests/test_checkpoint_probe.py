"""benchmarks/checkpoint_probe.py: a run's curve from its checkpoints, paired task by task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def report(path: Path, adapter: str | None, correct: list[int], samples: int = 2,
           types: list[str] | None = None) -> Path:
    """A `popula eval --per-task --json` report: task i, of type `types[i]` (code_o by default),
    answered right `correct[i]` times of `samples`."""
    types = types or ["code_o"] * len(correct)
    per_task = [{"id": f"t{i}", "type": types[i], "samples": samples, "answered": samples, "correct": c}
                for i, c in enumerate(correct)]
    path.write_text(json.dumps({"adapter": adapter, "per_task": per_task}))
    return path


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "benchmarks/checkpoint_probe.py", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_each_step_is_its_students_mean_paired_with_the_base_and_the_reference_step(tmp_path):
    base = report(tmp_path / "base.json", None, [0, 0, 1, 2])
    a90 = report(tmp_path / "a90.json", "S0", [2, 0, 1, 2])
    b90 = report(tmp_path / "b90.json", "S1", [2, 2, 1, 2])
    a99 = report(tmp_path / "a99.json", "S0", [0, 0, 1, 2])
    done = probe("--base", base, "--first", 2, "--plot", tmp_path / "curve.png", f"90={a90}", f"90={b90}", f"99={a99}")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = json.loads(done.stdout.splitlines()[-1])
    s90, s99 = fig["steps"]["90"], fig["steps"]["99"]
    assert fig["base_pass1"] == 0.375 and fig["from"] == "90" and fig["first"] == 2
    assert s90["members"] == {"S0": 0.625, "S1": 0.875}
    assert s90["mean_pass1"] == 0.75 and s90["mean_pass1_first"] == 0.75  # tasks t0, t1: (1 + 0.5) / 2
    assert s90["over_base"] == 0.375 and "from_ref" not in s90
    # step 99 against step 90, task by task: -1, -0.5, 0, 0
    assert s99["from_ref"] == -0.375 and abs(s99["from_ref_se"] - 0.2394) < 1e-3
    assert "| 99 | S0 0.375 | 0.375 | 0.000 | +0.000 (0.000) | -0.375 (0.239) |" in done.stdout  # the same as the base


def test_each_step_is_also_split_by_task_type(tmp_path):
    types = ["code_f", "code_o", "code_f", "code_i"]
    base = report(tmp_path / "base.json", None, [0, 1, 2, 2], types=types)
    a = report(tmp_path / "a.json", "S0", [2, 1, 1, 0], types=types)
    done = probe("--base", base, f"5={a}")
    assert done.returncode == 0, done.stderr
    fig = json.loads(done.stdout.splitlines()[-1])
    assert fig["base_by_type"] == {"code_f": 0.5, "code_i": 1.0, "code_o": 0.5}
    assert fig["steps"]["5"]["by_type"] == {"code_f": 0.75, "code_i": 0.0, "code_o": 0.5}
    assert "| 5 | 0.750 | 0.000 | 0.500 |" in done.stdout


def test_a_report_on_other_tasks_is_refused_in_one_line(tmp_path):
    base = report(tmp_path / "base.json", None, [0, 1])
    other = report(tmp_path / "other.json", "S0", [0, 1, 2])
    done = probe("--base", base, f"5={other}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "checkpoint_probe: error: step 5 S0: its report holds other tasks than the base's"


def test_two_runs_at_one_step_compare_by_label_in_the_order_given(tmp_path):
    base = report(tmp_path / "base.json", None, [0, 0])
    t = report(tmp_path / "t.json", "S0", [2, 2])
    u = report(tmp_path / "u.json", "S0", [2, 0])
    done = probe("--base", base, "--from", "T", f"U={u}", f"T={t}")
    assert done.returncode == 0, done.stderr
    fig = json.loads(done.stdout.splitlines()[-1])
    assert list(fig["steps"]) == ["U", "T"] and fig["steps"]["U"]["from_ref"] == -0.5


def test_a_reader_that_goes_away_ends_it_quietly(tmp_path):
    base = report(tmp_path / "base.json", None, [0, 1])
    a = report(tmp_path / "a.json", "S0", [1, 1])
    proc = subprocess.Popen([sys.executable, "benchmarks/checkpoint_probe.py", "--base", str(base), f"5={a}"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # `| head` that has had enough before the table
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
