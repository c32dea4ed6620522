"""benchmarks/compare_learning.py: two settings' runs compared on the same tasks, best student by rating."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from popula.eval.evaluate import TaskScore
from popula.league import League

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("learning_benchmark", ROOT / "benchmarks" / "learning.py")
learning = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = learning  # dataclasses look their module up
spec.loader.exec_module(learning)


def write_report(path: Path, correct: dict[str, int]) -> None:
    tasks = [asdict(TaskScore(t, "code_o", 4, 4, c)) for t, c in correct.items()]
    overall = {"pass_at_1": sum(correct.values()) / (4 * len(correct))}
    path.write_text(json.dumps({"model": "m", "adapter": "x", "k": 4, "overall": overall,
                                "by_type": {"code_o": overall}, "per_task": tasks}))


def folder(root: Path, scores: dict[str, dict[str, int]], best: str) -> Path:
    """A learning.py-shaped folder: one population run (seed 0) whose best-rated student is `best`."""
    run = root / "population-s0"
    run.mkdir(parents=True)
    league = League()
    for name in scores:
        league.add_member(name, "student")
    league.members[best].mu += 10  # the top conservative rating
    league.save(run / "league.json")
    (root / "scores").mkdir()
    for name, correct in scores.items():
        write_report(root / "scores" / f"population-s0-{name}.json", correct)
    write_report(root / "scores" / "base.json", {"t1": 0, "t2": 1})
    return root


def compared(a: Path, b: Path, pick: str, *flags: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_learning.py"), str(a), str(b),
                           "--seeds", "0", "--labels", "population", "--pick", pick, *flags],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["results"]["population"]


def test_each_setting_is_judged_by_its_best_rated_student_on_the_same_tasks(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 4}, "S1": {"t1": 0, "t2": 0}}, best="S0")
    b = folder(tmp_path / "b", {"S0": {"t1": 4, "t2": 4}, "S1": {"t1": 2, "t2": 2}}, best="S1")
    figures = compared(a, b, "best")
    assert figures["pass@1 A - B"]["mean"] == 0.5  # 1.0 against S1's 0.5, not against B's S0
    assert figures["pass@k A - B"]["mean"] == 0.0  # both solve each task at least once
    assert figures["pass@1 A - base"]["mean"] == 1 - 1 / 8


def test_an_ablation_is_judged_by_the_population_mean_and_its_weakest(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 4}, "S1": {"t1": 0, "t2": 0}}, best="S0")
    b = folder(tmp_path / "b", {"S0": {"t1": 4, "t2": 4}, "S1": {"t1": 2, "t2": 2}}, best="S0")

    assert compared(a, b, "best")["pass@1 A - B"]["mean"] == 0.0  # both pick S0: the ablation's loss is hidden
    mean = compared(a, b, "mean")
    assert mean["pass@1 A - B"]["mean"] == -0.25  # 0.5 against 0.75
    assert mean["pass@k A - B"]["mean"] == -0.5  # S1 of A never solves; S1 of B solves at least once
    assert mean["pass@1 B - base"]["mean"] == 0.75 - 1 / 8
    assert compared(a, b, "weakest")["pass@1 A - B"]["mean"] == -0.5  # S1 against S1: 0 against 0.5


def test_greedy_scores_are_compared_apart_from_the_sampled_ones(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 0}}, best="S0")
    b = folder(tmp_path / "b", {"S0": {"t1": 0, "t2": 0}}, best="S0")
    for root in (a, b):  # greedy, each answers t1 alone (one answer, written as 4 of 4)
        write_report(root / "scores" / "greedy-population-s0-S0.json", {"t1": 4, "t2": 0})
        write_report(root / "scores" / "greedy-base.json", {"t1": 4, "t2": 0})

    assert compared(a, b, "mean")["pass@1 A - B"]["mean"] == 0.5  # sampled, A solves t1 where B never does
    greedy = compared(a, b, "mean", "--decoding", "greedy")
    assert greedy["pass@1 A - B"]["mean"] == 0.0  # greedy, both answer t1: the base's first choice
    assert greedy["pass@1 A - base"]["mean"] == 0.0
    (a / "scores" / "greedy-population-s0-S0.json").unlink()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_learning.py"), str(a), str(b), "--seeds",
                           "0", "--labels", "population", "--decoding", "greedy"], capture_output=True, text=True)
    assert done.returncode == 2 and "--samples 1 --temperature 0" in done.stderr


def test_a_missing_score_is_a_clear_error_naming_the_command(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 4}}, best="S0")
    (a / "scores" / "population-s0-S0.json").unlink()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_learning.py"), str(a), str(a),
                           "--seeds", "0", "--labels", "population"], capture_output=True, text=True)
    assert done.returncode == 2 and "popula eval" in done.stderr and "S0" in done.stderr


def test_a_report_cut_short_is_a_one_line_error_naming_it(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 4}}, best="S0")
    (a / "scores" / "population-s0-S0.json").write_text("")  # the scorer was stopped before it wrote
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_learning.py"), str(a), str(a),
                           "--seeds", "0", "--labels", "population"], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "population-s0-S0.json" in done.stderr
    write_report(a / "scores" / "population-s0-S0.json", {"t1": 4, "t2": 4})
    (a / "scores" / "base.json").write_text("{")  # the base's report, cut short the same way
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_learning.py"), str(a), str(a),
                           "--seeds", "0", "--labels", "population"], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "base.json" in done.stderr


def test_a_study_published_without_its_runs_compares_as_the_runs_did(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 4}, "S1": {"t1": 0, "t2": 0}}, best="S0")
    b = folder(tmp_path / "b", {"S0": {"t1": 4, "t2": 4}, "S1": {"t1": 2, "t2": 2}}, best="S1")
    published = tmp_path / "published"
    published.mkdir()
    learning.publish_scores(b / "scores", {("population", 0): b / "population-s0"}, published)

    assert json.loads((published / "live_students.json").read_text()) == {"population-s0": ["S1", "S0"]}
    for pick in ("best", "mean", "weakest"):  # the best-rated student too: the order was kept
        assert compared(a, published, pick) == compared(a, b, pick)


def test_a_published_study_without_the_run_is_a_clear_error(tmp_path):
    a = folder(tmp_path / "a", {"S0": {"t1": 4, "t2": 4}}, best="S0")
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "live_students.json").write_text('{"population-s1": ["S0"]}')
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_learning.py"), str(a),
                           str(tmp_path / "published"), "--seeds", "0", "--labels", "population"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "population-s0" in done.stderr and "live_students.json" in done.stderr
