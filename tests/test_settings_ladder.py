"""benchmarks/settings_ladder.py: each rung's probe, exploration and curriculum, read from its metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_dir(path: Path, entropy: list[float], probes: dict[int, dict[str, tuple[float, float]]],
            samples: int = 4) -> Path:
    """A metrics.jsonl of len(entropy) steps; `probes`: step -> student -> (pass@1, pass@k)."""
    path.mkdir(parents=True)
    rows = []
    for step, h in enumerate(entropy, start=1):
        row = {"step": step, "wall_s": 10.0, "phases": {}, "student_entropy": h, "signal_groups": 0.5,
               "ast_depth": 5.0, "distinct_forms": 0.8, "solve_rate": 0.3}
        if step in probes:
            row["wall_s"] += 30.0
            row["phases"]["heldout_s"] = 30.0
            row["heldout"] = {"tasks": 100, "samples": samples,
                              "students": {s: {"pass1": p1, "passk": pk} for s, (p1, pk) in probes[step].items()}}
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def ladder(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks/settings_ladder.py"), *args],
                          capture_output=True, text=True)


def test_each_rung_reports_its_probe_entropy_and_step_time_on_the_steps_all_rungs_probed(tmp_path):
    a = run_dir(tmp_path / "a", [0.5] * 2 + [0.1] * 2, {2: {"S0": (0.2, 0.4), "S1": (0.4, 0.6)}, 4: {"S0": (0.3, 0.5)}})
    b = run_dir(tmp_path / "b", [0.5] * 4, {4: {"S0": (0.25, 0.5), "S1": (0.35, 0.5)}})
    done = ladder(f"control={a}", f"kl={b}", "--window", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["probe_steps"] == [4]  # step 2 was probed by one rung only
    kl = result["rungs"]["kl"]
    assert kl["probe"]["4"] == {"set": [100, 4], "mean_pass1": 0.3, "weakest_pass1": 0.25, "mean_passk": 0.5}
    assert result["rungs"]["control"]["windows"]["student_entropy"] == {"first": 0.5, "last": 0.1}
    assert kl["step_s"] == 10.0  # the probe's 30 s are not the step's
    assert "| control | 4 |" in done.stdout


def test_rungs_probed_on_different_sets_are_refused_in_one_line(tmp_path):
    a = run_dir(tmp_path / "a", [0.5], {1: {"S0": (0.2, 0.4)}})
    b = run_dir(tmp_path / "b", [0.5], {1: {"S0": (0.2, 0.4)}}, samples=2)
    done = ladder(f"a={a}", f"b={b}")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "probes differ" in done.stderr


def test_a_folder_without_metrics_is_named(tmp_path):
    done = ladder(f"a={tmp_path}")
    assert done.returncode == 1 and str(tmp_path / "metrics.jsonl") in done.stderr


def test_until_judges_every_rung_over_the_same_steps(tmp_path):
    """A rung that ran on past the step a rule is judged at is read only up to it."""
    long = run_dir(tmp_path / "long", [0.5, 0.4, 0.3, 0.1], {2: {"S0": (0.2, 0.4)}, 4: {"S0": (0.3, 0.5)}})
    short = run_dir(tmp_path / "short", [0.5, 0.5], {2: {"S0": (0.25, 0.5)}})
    done = ladder(f"long={long}", f"short={short}", "--window", "1", "--until", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["probe_steps"] == [2]
    assert result["rungs"]["long"]["steps"] == 2
    assert result["rungs"]["long"]["windows"]["student_entropy"] == {"first": 0.5, "last": 0.4}


def test_the_identity_share_counts_teachers_code_f_tasks_that_return_their_input(tmp_path):
    """Rung R's rule reads it: over the first and last steps, how much of the `code_f`
    curriculum is an identity function; the generated seed tasks are not the teachers'."""
    a = run_dir(tmp_path / "a", [0.5] * 4, {4: {"S0": (0.3, 0.5)}})
    task = {"type": "code_f", "program": "def f(n): return n", "message": ""}
    tasks = [
        dict(task, step=0, teacher="seed", inputs=["1"], outputs=["1"]),
        dict(task, step=1, teacher="T0", inputs=["1", "2"], outputs=["1", "3"]),
        dict(task, step=1, teacher="T0", inputs=["'a'"], outputs=["'b'"]),
        dict(task, step=4, teacher="T1", inputs=["1", "2"], outputs=["1", "2"]),
        dict(task, step=4, teacher="T0", inputs=["'a'"], outputs=["'A'"]),
        dict(task, step=4, teacher="T0", type="code_o", inputs=["1"], outputs=["1"]),
    ]
    (a / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    b = run_dir(tmp_path / "b", [0.5] * 4, {4: {"S0": (0.3, 0.5)}})  # no task log: shown as "-"
    done = ladder(f"a={a}", f"b={b}", "--window", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rungs"]["a"]["windows"]["identity_code_f"] == {"first": 0.0, "last": 0.5}
    assert "identity_code_f" not in result["rungs"]["b"]["windows"]
    assert "0.000→0.500" in done.stdout


def test_the_blind_share_counts_teachers_tasks_of_any_kind_that_never_read_their_input(tmp_path):
    """Rung U's rule reads it: constants of new shapes each time, which no form penalty sees."""
    a = run_dir(tmp_path / "a", [0.5] * 4, {4: {"S0": (0.3, 0.5)}})
    tasks = [
        {"type": "code_f", "program": "def f(v):\n    return [5]", "step": 0, "teacher": "seed"},
        {"type": "code_o", "program": "def f(n):\n    return n + 1", "step": 1, "teacher": "T0"},
        {"type": "code_i", "program": "def f(n):\n    return [1, 1, 4]", "step": 4, "teacher": "T0"},
        {"type": "code_f", "program": "def f(v):\n    return [5]", "step": 4, "teacher": "T1"},
        {"type": "code_o", "program": "def f(s):\n    return s.count('b')", "step": 4, "teacher": "T1"},
        {"type": "code_i", "program": "def f(a):\n    return sorted(a)", "step": 4, "teacher": "T1"},
    ]
    (a / "tasks.jsonl").write_text("".join(json.dumps(dict(t, inputs=["1"], outputs=["2"])) + "\n" for t in tasks))
    done = ladder(f"a={a}", "--window", "2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["rungs"]["a"]["windows"]["blind"] == \
        {"first": 0.0, "last": 0.5}


def test_the_solved_shares_count_teachers_tasks_every_and_no_rollout_solved_overall_and_by_type(tmp_path):
    """Rungs V, W and X read them: a task its matched student solves every time pays its teacher
    what an unsolved one does under the design, and a task none solves gives the student no
    gradient. Seed tasks and tasks never answered (no rho) are not counted."""
    a = run_dir(tmp_path / "a", [0.5] * 4, {4: {"S0": (0.3, 0.5)}})
    tasks = [
        {"type": "code_i", "rho": 1.0, "step": 0, "teacher": "seed"},
        {"type": "code_i", "rho": 0.25, "step": 1, "teacher": "T0"},
        {"type": "code_o", "rho": None, "step": 1, "teacher": "T0"},
        {"type": "code_i", "rho": 1.0, "step": 4, "teacher": "T0"},
        {"type": "code_i", "rho": 0.0, "step": 3, "teacher": "T1"},
        {"type": "code_f", "rho": 1.0, "step": 4, "teacher": "T1"},
        {"type": "code_f", "rho": 0.5, "step": 4, "teacher": "T1"},
    ]
    logged = [dict(t, program="def f(n):\n    return n + 1", inputs=["1"], outputs=["2"]) for t in tasks]
    (a / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in logged))
    done = ladder(f"a={a}", "--window", "2")
    assert done.returncode == 0, done.stderr
    windows = json.loads(done.stdout.strip().splitlines()[-1])["rungs"]["a"]["windows"]
    assert windows["solved_by_all"] == {"first": 0.0, "last": 0.5,
                                        "last_by_type": {"code_f": 0.5, "code_i": 0.5, "code_o": None}}
    assert windows["solved_by_none"] == {"first": 0.0, "last": 0.25,
                                         "last_by_type": {"code_f": 0.0, "code_i": 0.5, "code_o": None}}
    assert "0.000→0.500" in done.stdout and "0.000→0.250" in done.stdout
