"""benchmarks/learning.py reports a population as PopuLoRA does: the mean of its live students
with the weakest beside it, compared task by task with the single agent and the bare base."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from popula.config import load_config
from popula.eval.evaluate import TaskScore
from popula.league import League

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("learning_benchmark", ROOT / "benchmarks" / "learning.py")
learning = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = learning  # dataclasses look their module up
spec.loader.exec_module(learning)


def report(correct: dict[str, int], samples: int = 4) -> dict:
    tasks = [asdict(TaskScore(t, "code_o", samples, samples, c)) for t, c in correct.items()]
    n = len(tasks)
    pass1 = sum(c / samples for c in correct.values()) / n
    passk = sum(c > 0 for c in correct.values()) / n
    return {"model": "m", "k": samples, "per_task": tasks, "overall": {"pass_at_1": pass1, "pass_at_k": passk},
            "by_type": {"code_o": {"pass_at_1": pass1}}}


def run_dir(root: Path, name: str, students: dict[str, float]) -> Path:
    """A run folder whose league rates its students in the given order of mu."""
    path = root / name
    path.mkdir()
    league = League()
    for member, mu in students.items():
        league.add_member(member, "student")
        league.members[member].mu = mu
    league.save(path / "league.json")
    return path


def test_the_population_is_its_students_mean_with_the_weakest_beside_it(tmp_path):
    args = argparse.Namespace(seeds=[0], heldout=2, heldout_seed=9, samples=4, temperature=0.8, max_tokens=96)
    runs = {("population", 0): run_dir(tmp_path, "population-s0", {"S0": 30.0, "S1": 20.0}),
            ("single", 0): run_dir(tmp_path, "single-s0", {"S0": 25.0})}
    T = learning.Target
    reports = {
        T("base", None, "base"): report({"t1": 0, "t2": 1}),
        T("population", 0, "run", "S0"): report({"t1": 1, "t2": 1}),  # rated best, weaker on the held-out set
        T("population", 0, "run", "S1"): report({"t1": 4, "t2": 3}),
        T("single", 0, "run", "S0"): report({"t1": 2, "t2": 2}),
    }
    curves = {"population": [[{"step": 1}]], "single": [[{"step": 1}]]}
    summary = learning._summarize(args, reports, runs, curves)
    assert summary["population"]["pass1"]["mean"] == pytest.approx((2 / 8 + 7 / 8) / 2)
    assert summary["weakest"]["pass1"]["mean"] == pytest.approx(2 / 8)
    assert summary["strongest"]["pass1"]["mean"] == pytest.approx(7 / 8)
    assert summary["rating"]["models"] == ["population-s0/S0"]  # the rating's pick is not the headline
    paired = summary["paired"]
    assert paired["population mean - single"]["mean"] == pytest.approx(9 / 16 - 4 / 8)
    assert paired["population weakest - single"]["mean"] == pytest.approx(2 / 8 - 4 / 8)
    assert paired["population mean - base"]["mean"] == pytest.approx(9 / 16 - 1 / 8)
    assert summary["population_beats_single"] == {"seeds": 1, "of": 1, "mean_diff": pytest.approx(9 / 16 - 4 / 8)}
    table = learning.format_table(summary)
    assert "population: mean of the live students | 0.562" in table and "weakest live student | 0.250" in table
    json.dumps(summary)  # learning.json


def test_every_model_is_also_scored_greedy_so_sharpening_is_told_from_solving_more(tmp_path, monkeypatch):
    args = argparse.Namespace(seeds=[0], heldout=2, heldout_seed=9, samples=4, temperature=0.8, max_tokens=96, jobs=1)
    runs = {("population", 0): run_dir(tmp_path, "population-s0", {"S0": 30.0, "S1": 20.0}),
            ("single", 0): run_dir(tmp_path, "single-s0", {"S0": 25.0})}
    T = learning.Target
    targets = [T("base", None, "base"), T("population", 0, "run", "S0"), T("population", 0, "run", "S1"),
               T("single", 0, "run", "S0")]
    sampled = dict(zip(targets, [report({"t1": 0, "t2": 1}), report({"t1": 1, "t2": 1}), report({"t1": 4, "t2": 3}),
                                 report({"t1": 2, "t2": 2})]))
    summary = learning._summarize(args, sampled, runs, {"population": [[{"step": 1}]], "single": [[{"step": 1}]]})
    greedy = dict(zip(targets, [report({"t1": 1, "t2": 0}, 1), report({"t1": 1, "t2": 0}, 1),
                                report({"t1": 1, "t2": 1}, 1), report({"t1": 0, "t2": 0}, 1)]))
    scored = []

    def run_all(jobs, parallel):  # what `popula eval` would write for each job
        for job in jobs:
            scored.append(job.argv)
            target = next(t for t in targets if job.stdout.name == f"greedy-{t.file_name}")
            job.stdout.write_text(json.dumps(greedy[target]))
    monkeypatch.setattr(learning, "run_all", run_all)

    out = learning._greedy(args, tmp_path / "heldout.jsonl", targets, summary, tmp_path)

    assert len(scored) == 4 and all(a[a.index("--samples") + 1] == "1" and a[a.index("--temperature") + 1] == "0.0"
                                    for a in scored)
    assert out["pass1"]["base"] == [0.5] and out["pass1"]["population"] == [pytest.approx(0.75)]
    assert out["pass1"]["weakest"] == [0.5]  # the member the sampled score named weakest, S0
    assert out["paired"]["population mean - base"]["mean"] == pytest.approx(0.25)
    assert out["paired"]["single - base"]["mean"] == pytest.approx(-0.5)
    summary["greedy"] = out
    assert "greedy pass@1 population mean - base: +0.250" in learning.format_table(summary)
    assert learning._greedy(args, tmp_path / "heldout.jsonl", targets, summary, tmp_path) == out  # kept, not rescored
    assert len(scored) == 4


def test_the_in_run_probe_reports_the_mean_and_the_weakest_student_at_each_probed_step():
    def probe(step: int, s0: float, s1: float) -> dict:
        return {"step": step, "heldout": {"tasks": 100, "samples": 2, "students": {"S0": {"pass1": s0}, "S1": {"pass1": s1}}}}

    runs = [[probe(15, 0.2, 0.4), {"step": 16}, probe(30, 0.3, 0.5)], [probe(15, 0.1, 0.1), probe(30, 0.2, 0.4)]]
    trend = learning._trend_summary(runs)
    assert trend["steps"] == [15, 30] and (trend["tasks"], trend["samples"]) == (100, 2)
    assert trend["mean_pass1"] == [[pytest.approx(0.3), pytest.approx(0.1)], [pytest.approx(0.4), pytest.approx(0.3)]]
    assert trend["weakest_pass1"] == [[0.2, 0.1], [0.3, 0.2]]


def test_a_ranking_signal_is_scored_against_held_out_and_against_the_held_out_sets_own_halves():
    """benchmarks/ranking_signal.py: Spearman of rating and exam with held-out pass@1, and the
    held-out set's split-half agreement, its ceiling."""
    spec = importlib.util.spec_from_file_location("ranking_signal", ROOT / "benchmarks" / "ranking_signal.py")
    ranking = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ranking
    spec.loader.exec_module(ranking)

    def member(name: str, correct: list[int], conservative: float, exam: float) -> tuple[dict, dict]:
        held = {**report({f"t{i}": c for i, c in enumerate(correct)}), "member": name,
                "rating": {"conservative": conservative}}
        return held, {"member": name, "overall": {"pass_at_1": exam}}

    # three students, clearly apart on every task: the held-out set agrees with itself
    members = [member("S0", [0] * 10, 3.0, 0.5), member("S1", [2] * 10, 2.0, 0.1), member("S2", [4] * 10, 1.0, 0.9)]
    row = ranking.measure(Path("run"), {"members": [h for h, _ in members]}, {"members": [e for _, e in members]})
    assert row["rating"] == pytest.approx(-1.0)  # the rating orders them backwards
    assert row["exam"] == pytest.approx(0.5)
    assert row["split_half"] == pytest.approx(1.0)
    assert row["spread"]["strongest_minus_weakest"] == pytest.approx(1.0) and row["spread"]["se"] == 0.0


def test_an_ablation_reuses_the_single_agent_scored_on_the_same_tasks(tmp_path):
    earlier, out = tmp_path / "earlier", tmp_path / "out"
    for folder in (earlier, out):
        folder.mkdir()
        (folder / "heldout.jsonl").write_text('{"id": "t1"}\n')
    run_dir(earlier, "single-s0", {"S0": 25.0})
    (earlier / "scores").mkdir()
    tiny = load_config(learning.RUNS["population"]).base_model
    base = {**report({"t1": 1}), "model": tiny, "samples": 4, "temperature": 0.8, "max_tokens": 96}
    humaneval = {**report({"h1": 1}), "max_tokens": 256}
    for name, data in {"base.json": base, "single-s0-S0.json": report({"t1": 2}), "greedy-base.json": {**report({"t1": 1}, 1), "max_tokens": 96},
                       "humaneval-single-s0-S0.json": humaneval, "humaneval-base.json": {**humaneval, "max_tokens": 128},
                       "population-s0-S1.json": report({"t1": 0})}.items():
        (earlier / "scores" / name).write_text(json.dumps(data))
    args = argparse.Namespace(seeds=[0], out=out, reuse_single=earlier, samples=4, temperature=0.8, max_tokens=96,
                              humaneval_max_tokens=256, overrides=[])

    runs = learning._reuse_single(args, out / "heldout.jsonl")

    assert runs == {("single", 0): earlier / "single-s0"}
    assert sorted(p.name for p in (out / "scores").iterdir()) == [
        "base.json", "greedy-base.json", "humaneval-single-s0-S0.json", "single-s0-S0.json"]  # never the earlier population's,
    # nor a HumanEval score made with another token limit (it is scored again)

    with pytest.raises(SystemExit, match="--max-tokens"):
        learning._reuse_single(argparse.Namespace(**{**vars(args), "max_tokens": 128}), out / "heldout.jsonl")
    with pytest.raises(SystemExit, match="base model"):
        learning._reuse_single(argparse.Namespace(**{**vars(args), "overrides": ["base_model=other"]}),
                               out / "heldout.jsonl")
    (out / "heldout.jsonl").write_text('{"id": "t2"}\n')
    with pytest.raises(SystemExit, match="differs"):
        learning._reuse_single(args, out / "heldout.jsonl")
