"""Specification of `popula eval` and `popula.eval.evaluate`.

pass@k is the unbiased estimator; the sandbox decides what is correct; tasks without
outputs get them (invalid ones are skipped and counted); a real model that knows an
answer is scored as knowing it; a run directory means its population (every live student,
their mean, weakest, strongest and the rating's pick, all scored alike in one generate call)
unless --adapter names one member or --pick rating asks for the best-rated student alone;
every bad input is refused naming the file, line or adapter.

The model is a 2-layer Llama trained here for a few seconds to memorise the answers of
two tasks, so the whole path (prompt, engine, parsing, sandbox, counting) runs for real.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import popula.cli
from conftest import memorising_base
from popula.adapters.store import AdapterStore
from popula.run.rundir import run_adapter
from popula.engines.torch_engine import TorchEngine
from popula.errors import PopulaError
from popula.eval.evaluate import (EvalReport, TaskScore, evaluate, evaluate_adapters, judge, pass_at_k,
                                  prepare_tasks, summarize)
from popula.eval.correlation import rank_correlation
from popula.eval.population import MemberEval, population_report
from popula.eval.settings import EvalSettings
from popula.kinds import task_types
from popula.league import League
from popula.lora import peft_key
from popula.model.tokenizer import train_tokenizer
from popula.records import TaskRecord
from popula.sandbox import Sandbox
from popula.tasks.encoding import encode_prompt
from popula.tasks.prompts import CompactFormat

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # every test here trains or samples a small model

# The two tasks the test model memorises (prompt -> answer), and one it was never shown.
KNOWN = [
    (TaskRecord("triple", "code_o", "def f(x):\n    return x * 3", ["4"], ["12"]), "12"),
    (TaskRecord("reverse", "code_i", "def f(s):\n    return s[::-1]", ["'abc'"], ["'cba'"]), "'abc'"),
]
UNKNOWN = TaskRecord("add", "code_f", "def f(a, b):\n    return a + b", ["1, 2", "3, 4", "5, 6", "7, 8"],
                     message="adds")
UNKNOWN_SOLVED = dataclasses.replace(UNKNOWN, outputs=["3", "7", "11", "15"])
FORBIDDEN = {"id": "bad", "type": "code_o", "program": "import os\ndef f(x):\n    return os.getpid()", "inputs": ["1"]}


def task_lines() -> list[dict]:
    """The evaluation file: the known tasks without outputs (the sandbox fills them), plus two more."""
    rows = []
    for task, _ in KNOWN:
        row = task.to_json()
        del row["outputs"]
        rows.append(row)
    return rows + [UNKNOWN.to_json(), FORBIDDEN]


def write_tasks(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in task_lines()))
    return path


def make_memorising_base(path: Path) -> Path:
    """A tiny Llama (with the compact tokenizer) trained until greedy decoding answers KNOWN
    (about 40 Adam steps, under a second)."""
    fmt = CompactFormat()
    texts = [fmt.student_prompt(t) + fmt.answer_completion(t, a) + "<|end|>" for t, a in KNOWN]
    tok = train_tokenizer(texts * 20 + [fmt.student_prompt(UNKNOWN_SOLVED)], 300, max_length=128)
    return memorising_base(path, tok, [(fmt.student_prompt(t), fmt.answer_completion(t, a)) for t, a in KNOWN],
                           max_positions=128, stop_loss=None, steps=300)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    return make_memorising_base(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


@pytest.fixture(scope="module")
def engine(base_dir):
    return TorchEngine(base_dir, max_adapters=2, max_rank=4, seed=0)


@pytest.fixture(scope="module")
def tokenizer(base_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_dir))


@pytest.fixture(scope="module")
def run_dir(base_dir, tmp_path_factory) -> Path:
    """A run directory as `popula run` leaves it: config, adapters (S0, S1, T0) and a league where S1 leads."""
    run = tmp_path_factory.mktemp("run")
    (run / "config.yaml").write_text(f"base_model: {base_dir}\nengine: torch\nlora:\n  rank: 4\n  alpha: 8\n"
                                     "generation:\n  student_max_tokens: 16\n")
    store = AdapterStore(run / "adapters", base_dir, rank=4, alpha=8.0, seed=0)
    for name in ("T0", "S0", "S1"):
        store.create(name)  # B = 0: each adapter still answers what the base answers
    league = League()
    league.add_member("T0", "teacher")
    league.add_member("S0", "student")
    league.add_member("S1", "student")
    league.members["S1"].mu, league.members["S1"].sigma = 30.0, 2.0  # best conservative rating
    league.save(run / "league.json")
    return run


@pytest.fixture(autouse=True)
def _only_this_command(monkeypatch):
    monkeypatch.setattr(popula.cli, "COMMANDS", ["eval"])


# -- pass@k --------------------------------------------------------------------------------------


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))  # 0.7
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # only 2 wrong samples: any 3 include a right one
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_1_is_the_fraction_correct_and_pass_at_n_is_any_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 0, 8) == 0.0


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_summary_averages_tasks_per_type_and_overall():
    scores = [TaskScore("a", "code_o", 4, 4, 2), TaskScore("b", "code_o", 4, 2, 0), TaskScore("c", "code_f", 4, 3, 1)]
    overall, by_type = summarize(scores, k=4)
    assert list(by_type) == ["code_o", "code_f"]
    assert by_type["code_o"].tasks == 2
    assert by_type["code_o"].pass_at_1 == pytest.approx((0.5 + 0.0) / 2)
    assert by_type["code_o"].pass_at_k == pytest.approx((1.0 + 0.0) / 2)
    assert by_type["code_f"].pass_at_1 == pytest.approx(0.25)
    assert overall.tasks == 3
    assert overall.pass_at_1 == pytest.approx((0.5 + 0 + 0.25) / 3)
    assert overall.pass_at_k == pytest.approx(2 / 3)
    assert overall.answered_rate == pytest.approx(9 / 12)


# -- the sandbox steps --------------------------------------------------------------------------


def test_prepare_fills_missing_outputs_and_skips_invalid_tasks(sandbox):
    from popula.records import parse_record

    records = [parse_record(r, f"line {i}") for i, r in enumerate(task_lines())]
    records[0].answer = "999"  # an answer in the file is not the model's: ignored
    ready, skipped = prepare_tasks(records, sandbox)
    assert [t.id for t in ready] == ["triple", "reverse", "add"], skipped
    assert ready[0].outputs == ["12"] and ready[0].answer is None
    assert ready[1].outputs == ["'cba'"]
    assert ready[2].outputs == ["3", "7", "11", "15"]
    assert dict(skipped) == {"forbidden": 1}
    assert records[0].outputs == []  # the caller's records are not modified


def test_judge_counts_right_answers_only(sandbox):
    triple, reverse = KNOWN[0][0], KNOWN[1][0]
    add = UNKNOWN_SOLVED
    answers = [
        ["12", "13", "12.0", None],  # code_o: a literal, a wrong value, an equal value, malformed
        ["'abc'", "'cba'", "('abc')", "'ab' + 'c'"],  # code_i: literal inputs whose output matches; an expression is no value
        ["def f(a, b):\n    return a + b", "def f(a, b):\n    return 7", "def f(a, b):\n    return b + a",
         "def f(a, b):\n    import os\n    return a"],  # code_f: judged on the hidden pairs (5, 6) and (7, 8)
    ]
    assert judge([triple, reverse, add], answers, sandbox) == [
        [True, False, True, False],
        [True, False, True, False],
        [True, False, True, False],
    ]


def test_encode_prompt_puts_the_bos_token_first_once(tokenizer):
    ids = encode_prompt(tokenizer, "## output\n")
    assert ids[0] == tokenizer.bos_token_id
    assert ids[1:] == tokenizer("## output\n", add_special_tokens=False)["input_ids"]
    assert encode_prompt(tokenizer, "<|end|>## output\n").count(tokenizer.bos_token_id) == 1


# -- the whole loop on a real engine ------------------------------------------------------------


def _records(tmp_path: Path):
    from popula.records import read_records

    return read_records(write_tasks(tmp_path / "tasks.jsonl"))


def test_a_model_that_knows_two_answers_scores_them_and_only_them(engine, tokenizer, sandbox, tmp_path):
    report = evaluate(engine, tokenizer, _records(tmp_path), adapter=None, sandbox=sandbox,
                      settings=EvalSettings(samples=1, max_tokens=24), context=128)
    assert report.temperature == 0.0  # one sample: greedy
    assert report.tasks_in_file == 4 and report.skipped == {"forbidden": 1}
    assert {t.id: t.correct for t in report.per_task} == {"triple": 1, "reverse": 1, "add": 0}
    assert report.by_type["code_o"].pass_at_1 == 1.0
    assert report.by_type["code_i"].pass_at_1 == 1.0
    assert report.by_type["code_f"].pass_at_1 == 0.0
    assert report.overall.tasks == 3
    assert report.overall.pass_at_1 == pytest.approx(2 / 3)


def test_several_samples_give_pass_at_k_and_are_reproducible_by_seed(engine, tokenizer, sandbox, tmp_path):
    records = _records(tmp_path)
    settings = EvalSettings(samples=3, max_tokens=12, seed=5)
    first = evaluate(engine, tokenizer, records, adapter=None, sandbox=sandbox, settings=settings, context=128)
    again = evaluate(engine, tokenizer, records, adapter=None, sandbox=sandbox, settings=settings, context=128)
    assert first.temperature == 0.8 and first.k == 3
    assert all(t.samples == 3 for t in first.per_task)
    assert [(t.answered, t.correct) for t in first.per_task] == [(t.answered, t.correct) for t in again.per_task]
    for group in [first.overall, *first.by_type.values()]:
        assert 0.0 <= group.pass_at_1 <= group.pass_at_k <= 1.0


def test_a_prompt_longer_than_the_context_is_not_attempted_and_counts_as_failed(engine, tokenizer, sandbox):
    long = TaskRecord("long", "code_o", "def f(x):\n" + "    x = x + 1\n" * 60 + "    return x", ["0"], ["60"])
    report = evaluate(engine, tokenizer, [long, KNOWN[0][0]], adapter=None, sandbox=sandbox,
                      settings=EvalSettings(max_tokens=24))  # the context (128) is the engine's
    assert report.not_attempted == 1
    assert {t.id: (t.attempted, t.correct) for t in report.per_task} == {"long": (False, 0), "triple": (True, 1)}


# -- run directories ----------------------------------------------------------------------------


def test_a_league_member_resolves_to_the_adapter_it_trains(run_dir, tmp_path):
    assert run_adapter(run_dir, "S1").path == run_dir / "adapters" / "S1"
    # single-agent baseline: member S0 trains adapter A0 (the roster is in the checkpoint)
    single = tmp_path / "single"
    (single / "adapters").mkdir(parents=True)
    (single / "adapters" / "store.json").write_text(json.dumps({"next_uid": 2, "latest": {"A0": {"version": 3, "uid": 1}}}))
    (single / "checkpoints" / "step-000003").mkdir(parents=True)
    (single / "checkpoints" / "step-000003" / "state.json").write_text(
        json.dumps({"step": 3, "roster": {"T0": "A0", "S0": "A0"}}))
    ref = run_adapter(single, "S0")
    assert (ref.name, ref.version, ref.uid) == ("A0", 3, 1)


def test_pick_rating_evaluates_the_best_rated_student_alone_and_prints_json(run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert popula.cli.main(["eval", str(run_dir), "--tasks", str(tasks), "--pick", "rating", "--json",
                            "--workers", "1"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data["adapter"] == "S1" and data["engine"] == "torch" and data["model"] == str(run_dir)
    assert data["max_tokens"] == 128  # the compact format's default, as for a bare base: like with like
    assert data["by_type"]["code_o"]["pass_at_1"] == 1.0
    assert data["overall"]["pass_at_1"] == pytest.approx(2 / 3)
    assert data["skipped"] == {"forbidden": 1}
    assert set(data) >= {"samples", "k", "temperature", "overall", "by_type", "not_attempted"}
    assert "per_task" not in data and "members" not in data  # one model's report, as before populations


def test_cli_with_a_named_adapter_prints_a_table(run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert popula.cli.main(["eval", str(run_dir), "--tasks", str(tasks), "--adapter", "S0", "--workers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "(adapter S0)" in lines[0]
    assert lines[1].split() == ["type", "tasks", "pass@1", "pass@1", "answered"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["code_o"][1:3] == ["1", "1.000"]
    assert rows["overall"][1:3] == ["3", "0.667"]
    assert "forbidden 1" in lines[-1]


def test_answers_writes_what_the_model_said_with_each_verdict_beside_the_report(run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    answers = tmp_path / "answers.jsonl"
    assert popula.cli.main(["eval", str(run_dir), "--tasks", str(tasks), "--adapter", "S1", "--json", "--per-task",
                            "--workers", "1", "--answers", str(answers)]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert "answers" not in report  # the report's JSON is as before
    assert [r["id"] for r in rows] == [t["id"] for t in report["per_task"]]  # the valid tasks, in order
    for row, task in zip(rows, report["per_task"]):
        assert row["type"] == task["type"] and len(row["answers"]) == len(row["correct"]) == 1
        assert sum(row["correct"]) == task["correct"] and all(isinstance(a, str) for a in row["answers"])


def test_answers_needs_one_model_and_a_folder_to_write_in(run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    err = _fails(["eval", str(run_dir), "--tasks", str(tasks), "--answers", str(tmp_path / "a.jsonl")], capsys)
    assert "--answers" in err and "--adapter" in err
    err = _fails(["eval", str(run_dir), "--tasks", str(tasks), "--adapter", "S0",
                  "--answers", str(tmp_path / "missing" / "a.jsonl")], capsys)
    assert "no folder" in err and "missing" in err


def test_cli_on_a_bare_model_directory(base_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert popula.cli.main(["eval", str(base_dir), "--tasks", str(tasks), "--json", "--max-tokens", "16",
                            "--workers", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["adapter"] is None and data["overall"]["pass_at_1"] == pytest.approx(2 / 3)


# -- bad input ------------------------------------------------------------------------------------


def _fails(argv: list[str], capsys) -> str:
    assert popula.cli.main(argv) == 2
    return capsys.readouterr().err


def test_a_missing_tasks_file_is_named(run_dir, tmp_path, capsys):
    err = _fails(["eval", str(run_dir), "--tasks", str(tmp_path / "nope.jsonl")], capsys)
    assert "nope.jsonl: no such task file" in err


def test_a_bad_task_line_is_named_by_file_and_line(run_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(task_lines()[0]) + "\n" + '{"id": "x", "type": "code_q"}\n')
    err = _fails(["eval", str(run_dir), "--tasks", str(bad)], capsys)
    assert "bad.jsonl:2" in err and "type" in err


def test_an_unknown_adapter_is_named_with_the_known_ones(run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    err = _fails(["eval", str(run_dir), "--tasks", str(tasks), "--adapter", "S9"], capsys)
    assert "S9" in err and "S0, S1, T0" in err


def test_a_corrupt_adapter_is_refused_by_name(run_dir, tmp_path, capsys):
    import shutil

    broken = tmp_path / "run"
    shutil.copytree(run_dir, broken)
    weights = broken / "adapters" / "S1" / "adapter_model.safetensors"
    weights.unlink()  # a hard link into the version directory: replace it, do not write through it
    weights.write_bytes(b"not a safetensors file")
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    err = _fails(["eval", str(broken), "--tasks", str(tasks), "--workers", "1"], capsys)
    assert "adapter 'S1" in err and "corrupt" in err


def test_a_missing_run_dir_is_named(tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    err = _fails(["eval", str(tmp_path / "no-run"), "--tasks", str(tasks)], capsys)
    assert "no-run" in err and "no such run directory" in err


def test_a_run_dir_without_a_league_is_named(run_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    err = _fails(["eval", str(broken), "--tasks", str(tasks)], capsys)
    assert "league.json" in err


def test_bad_sampling_options_are_refused(run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert "--samples" in _fails(["eval", str(run_dir), "--tasks", str(tasks), "--samples", "0"], capsys)
    with pytest.raises(PopulaError, match="--top-p"):
        EvalSettings(top_p=0.0)


@pytest.mark.slow
@pytest.mark.vllm
def test_the_vllm_engine_scores_the_run_as_the_torch_engine_does_and_json_prints_only_the_object(run_dir, tmp_path):
    pytest.importorskip("vllm")
    from popula.apps.targets import evaluate_target

    tasks = write_tasks(tmp_path / "tasks.jsonl")
    done = subprocess.run([sys.executable, "-m", "popula", "eval", str(run_dir), "--tasks", str(tasks),
                           "--engine", "vllm", "--workers", "1", "--json", "--per-task"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # the whole of stdout: vLLM's own logs went to stderr
    assert report["engine"] == "vllm" and report["rating_pick"] == "S1"
    assert [m["member"] for m in report["members"]] == ["S1", "S0"]  # both students, one vLLM session
    assert all(m["overall"]["pass_at_1"] == pytest.approx(2 / 3) for m in report["members"])  # B = 0: the base
    by_torch = evaluate_target(str(run_dir), tasks, adapter="S1", engine="torch", workers=1)
    by_vllm = next(m for m in report["members"] if m["member"] == "S1")
    assert [(t["id"], t["answered"], t["correct"]) for t in by_vllm["per_task"]] == \
        [(t.id, t.answered, t.correct) for t in by_torch.per_task]


# -- the population of a run --------------------------------------------------------------------
#
# Three live students of unlike skill and a league whose rating gets them backwards: S_blind's
# LoRA B is loud noise (it answers worse than the base), yet it has the best rating; S_a and
# S_b keep B = 0 and answer what the base answers (2 of 3 tasks). S_old was replaced by S_b
# (retired: not evaluated) and T0 is a teacher (not evaluated).


def _save_noisy(store: AdapterStore, name: str, scale: float) -> None:
    """A new adapter whose B matrices are seeded noise of `scale`: a student that has forgotten the base's answers."""
    generator = torch.Generator().manual_seed(7)
    state = {}
    for path, (fan_in, fan_out) in sorted(store.shapes.items()):
        state[peft_key(path, "A")] = torch.randn(store.rank, fan_in, generator=generator)
        state[peft_key(path, "B")] = scale * torch.randn(fan_out, store.rank, generator=generator)
    store.save(name, state)


@pytest.fixture(scope="module")
def population_dir(base_dir, run_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("population")
    (run / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    store = AdapterStore(run / "adapters", base_dir, rank=4, alpha=8.0, seed=0)
    for name in ("T0", "S_a", "S_b"):
        store.create(name)
    _save_noisy(store, "S_blind", scale=3.0)
    league = League()
    league.add_member("T0", "teacher")
    for name in ("S_a", "S_blind", "S_old"):
        league.add_member(name, "student")
    league.replace("S_old", "S_b", ["S_a"], "svd_perturb", step=0)
    for name, mu in (("S_blind", 35.0), ("S_a", 28.0), ("S_b", 20.0)):
        league.members[name].mu, league.members[name].sigma = mu, 2.0
    league.save(run / "league.json")
    return run


def _population(run: Path, tmp_path: Path, capsys, *extra: str) -> dict:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert popula.cli.main(["eval", str(run), "--tasks", str(tasks), "--json", "--workers", "1", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_adapters_serves_every_adapter_in_one_generate_call_and_scores_each_as_alone(
        population_dir, engine, tokenizer, sandbox, tmp_path):
    refs = [run_adapter(population_dir, name) for name in ("S_a", "S_blind", "S_b")]  # 3 adapters, 2 slots: waves
    calls = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def generate(self, requests, progress=False):
            calls.append(len(requests))
            return self.inner.generate(requests, progress=progress)

    records = _records(tmp_path)
    settings = EvalSettings(samples=3, max_tokens=12, seed=4)  # sampled: seeds must match request by request
    together = evaluate_adapters(Counting(engine), tokenizer, records, adapters=refs, sandbox=sandbox,
                                 settings=settings, context=128)
    assert calls == [3 * 3]  # one call: 3 attempted tasks x 3 adapters
    for ref, report in zip(refs, together):
        alone = evaluate(engine, tokenizer, records, adapter=ref, sandbox=sandbox, settings=settings, context=128)
        assert report.adapter == ref.name
        assert [(t.id, t.answered, t.correct) for t in report.per_task] == \
            [(t.id, t.answered, t.correct) for t in alone.per_task]
        assert report.overall == alone.overall and report.by_type == alone.by_type


def test_a_run_dir_reports_every_live_student_with_mean_weakest_strongest_and_the_rating_pick(
        population_dir, tmp_path, capsys):
    data = _population(population_dir, tmp_path, capsys)
    assert data["kind"] == "population" and data["model"] == str(population_dir) and data["engine"] == "torch"
    members = {m["member"]: m for m in data["members"]}
    # every live student, best conservative rating first; the retired one and the teacher are not there
    assert [m["member"] for m in data["members"]] == ["S_blind", "S_a", "S_b"]
    assert [m["rating_rank"] for m in data["members"]] == [1, 2, 3]
    assert members["S_a"]["overall"]["pass_at_1"] == pytest.approx(2 / 3)  # B = 0: the base's answers
    assert members["S_b"]["overall"]["pass_at_1"] == pytest.approx(2 / 3)
    assert members["S_blind"]["overall"]["pass_at_1"] < 2 / 3  # the noise costs it an answer at least
    # the summary is the members' own figures
    for key in ("pass_at_1", "pass_at_k", "answered_rate"):
        assert data["mean"]["overall"][key] == pytest.approx(sum(m["overall"][key] for m in members.values()) / 3)
    for t in data["mean"]["by_type"]:
        assert data["mean"]["by_type"][t]["pass_at_1"] == \
            pytest.approx(sum(m["by_type"][t]["pass_at_1"] for m in members.values()) / 3)
    pass1 = {name: m["overall"]["pass_at_1"] for name, m in members.items()}
    assert data["weakest"] == "S_blind" and pass1["S_blind"] == min(pass1.values())
    assert data["strongest"] == "S_a" and pass1["S_a"] == max(pass1.values())  # tied with S_b: the earlier name
    assert data["rating_pick"] == "S_blind"  # the best rating, here the weakest: the report says so
    assert data["rating_spearman"] == pytest.approx(
        rank_correlation([m["rating"]["conservative"] for m in data["members"]], [m["overall"]["pass_at_1"]
                                                                                  for m in data["members"]]))
    assert data["rating_spearman"] < 0
    # paired differences task by task, with their standard errors over the 3 tasks
    gap = data["paired"]["strongest_minus_weakest"]
    assert gap["mean"] == pytest.approx(pass1["S_a"] - pass1["S_blind"]) and gap["tasks"] == 3 and gap["task_se"] >= 0
    mean1 = data["mean"]["overall"]["pass_at_1"]
    assert data["paired"]["rating_pick_minus_mean"] == members["S_blind"]["minus_mean"]
    for name, m in members.items():
        assert m["minus_mean"]["mean"] == pytest.approx(pass1[name] - mean1)
    # every member entry is that member's own one-model report: the same settings for all
    for m in data["members"]:
        assert set(m) >= {"adapter", "samples", "k", "temperature", "max_tokens", "overall", "by_type", "skipped"}
        assert (m["samples"], m["temperature"], m["max_tokens"]) == (data["samples"], data["temperature"],
                                                                     data["max_tokens"])
        assert "per_task" not in m
    assert data["skipped"] == {"forbidden": 1}


def test_each_member_of_the_population_report_is_what_adapter_name_gives_it_alone(population_dir, tmp_path, capsys):
    data = _population(population_dir, tmp_path, capsys, "--samples", "2", "--per-task")
    for member in data["members"]:
        alone = _population(population_dir, tmp_path, capsys, "--samples", "2", "--per-task",
                            "--adapter", member["member"])
        assert alone["adapter"] == member["adapter"] == member["member"]
        for key in ("overall", "by_type", "per_task", "samples", "temperature", "max_tokens", "skipped"):
            assert member[key] == alone[key], (member["member"], key)


def test_the_population_table_names_each_member_the_mean_and_the_picks(population_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert popula.cli.main(["eval", str(population_dir), "--tasks", str(tasks), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "3 live student(s)" in lines[0]
    assert lines[1].split() == ["overall", *task_types()]
    assert lines[2].split()[:7] == ["member", "mu-3sd", "rank", "pass@1", "pass@1", "pass@1", "pass@1"]
    rows = {line.split()[0]: line.split() for line in lines[3:7]}
    assert list(rows) == ["S_blind", "S_a", "S_b", "mean"]
    assert rows["S_a"][2:4] == ["2", "0.667"]  # rating rank, overall pass@1
    assert "weakest   S_blind" in out and "strongest S_a" in out
    assert "rating pick (best mu - 3 sigma) S_blind" in out and "3 of 3 by pass@1" in out
    assert "strongest minus weakest" in out and "Spearman" in out
    assert "forbidden 1" in lines[-1]


def test_a_single_agent_run_is_a_population_of_its_one_adapter(base_dir, run_dir, tmp_path, capsys):
    single = tmp_path / "single"
    single.mkdir()
    (single / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    AdapterStore(single / "adapters", base_dir, rank=4, alpha=8.0, seed=0).create("A0")
    (single / "checkpoints" / "step-000000").mkdir(parents=True)
    (single / "checkpoints" / "step-000000" / "state.json").write_text(
        json.dumps({"step": 0, "roster": {"T0": "A0", "S0": "A0"}}))
    league = League()
    league.add_member("T0", "teacher")
    league.add_member("S0", "student")
    league.save(single / "league.json")
    data = _population(single, tmp_path, capsys)
    assert [(m["member"], m["adapter"]) for m in data["members"]] == [("S0", "A0")]
    assert data["weakest"] == data["strongest"] == data["rating_pick"] == "S0"
    assert data["mean"]["overall"] == data["members"][0]["overall"]
    assert data["rating_spearman"] is None and data["paired"]["strongest_minus_weakest"] is None


def test_population_summary_breaks_ties_and_leaves_out_what_too_few_members_cannot_say():
    def member(name, conservative, corrects):
        scores = [TaskScore(f"t{i}", "code_o", 2, 2, c) for i, c in enumerate(corrects)]
        overall, by_type = summarize(scores, 2)
        report = EvalReport(model="run", adapter=name, engine="torch", samples=2, k=2, temperature=0.8, top_p=1.0,
                            max_tokens=16, tasks_file="t.jsonl", tasks_in_file=3, skipped={}, not_attempted=0,
                            overall=overall, by_type=by_type, per_task=scores)
        return MemberEval(name, conservative + 6.0, 2.0, conservative, report)

    two = population_report([member("B", 1.0, [2, 0, 1]), member("A", 5.0, [1, 1, 1])], model="run", engine="torch")
    assert [m.member for m in two.members] == ["A", "B"] and two.rating_pick == "A"
    # equal pass@1 (0.5): the higher pass@2 is the stronger (B solves 2 tasks at least once, A all 3)
    assert (two.strongest, two.weakest) == ("A", "B")
    assert two.rating_spearman is None  # two members: a rank correlation would only ever be +1 or -1
    assert two.paired["strongest_minus_weakest"].mean == pytest.approx(0.0)
    assert two.paired["strongest_minus_weakest"].better_tasks == 1 and two.paired["strongest_minus_weakest"].worse_tasks == 1
    with pytest.raises(PopulaError, match="not evaluated alike"):
        other = member("C", 0.0, [1, 1])
        population_report([member("A", 5.0, [1, 1, 1]), other], model="run", engine="torch")


def test_pick_needs_a_run_dir_and_excludes_adapter(base_dir, run_dir, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    err = _fails(["eval", str(base_dir), "--tasks", str(tasks), "--pick", "rating"], capsys)
    assert "--pick rating" in err and "not one" in err
    with pytest.raises(SystemExit):
        popula.cli.main(["eval", str(run_dir), "--tasks", str(tasks), "--pick", "rating", "--adapter", "S0"])
    assert "not allowed with" in capsys.readouterr().err


def test_a_population_report_is_refused_by_the_eval_figure_naming_the_way_to_one_member(tmp_path):
    from popula.eval.plots import read_report

    path = tmp_path / "pop.json"
    path.write_text(json.dumps({"kind": "population", "members": [{"member": "S0"}, {"member": "S1"}]}))
    with pytest.raises(PopulaError, match="population report .*--adapter NAME"):
        read_report(path)
