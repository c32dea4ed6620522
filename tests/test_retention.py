"""Specification of `popula retention` (popula/apps/retention.py on top of evolution.measure_retention).

A child's reward is compared with its parents' on one fixed held-out task set under the
same seeded sampling; a zero-strength mutation is the parent itself, so it keeps exactly
its parent's reward and has recovered at step 0; a crossover's parent level is the mean
of its two parents; steps to recover are the first step at 95% of the parents' level, or
null; every bad input is refused with exit code 2 and a message naming what is wrong.

The model is a 2-layer Llama trained here for a few seconds to memorise the answers of
the retention command's own held-out tasks, so the parents earn a positive reward and
the whole path (run directory, league, adapters, engine, sandbox, learner) runs for real.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

import popula.cli
from conftest import memorising_base
from popula.adapters.store import AdapterStore
from popula.league import League
from popula.model.tokenizer import train_tokenizer
from popula.apps.retention import EVAL_NAMESPACE, TRAIN_NAMESPACE
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import CompactFormat

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]  # it trains and samples small models

TASKS = 2  # --tasks and --train-tasks of every command here
SEED = 0
QUICK = ["--steps", "1", "--tasks", str(TASKS), "--train-tasks", str(TASKS), "--samples", "2", "--seed", str(SEED)]


def make_memorising_base(path: Path) -> Path:
    """A tiny Llama with its own tokenizer that answers the retention command's held-out tasks."""
    fmt = CompactFormat()
    held_out = generate_tasks(TASKS, seed=SEED, types=["code_o"], namespace=EVAL_NAMESPACE, workers=1)
    stream = generate_tasks(TASKS, seed=SEED, types=["code_o"], namespace=TRAIN_NAMESPACE, workers=1)
    texts = [fmt.student_prompt(t) + fmt.answer_completion(t, t.outputs[0]) + "<|end|>" for t in held_out]
    tok = train_tokenizer(texts * 20 + [fmt.student_prompt(t) for t in stream], 300, max_length=512)
    # until sampling at temperature 1 almost always gives the answer
    return memorising_base(path, tok, [(fmt.student_prompt(t), fmt.answer_completion(t, t.outputs[0])) for t in held_out],
                           max_positions=512, stop_loss=0.01)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    return make_memorising_base(tmp_path_factory.mktemp("base"))


def make_run(run: Path, base_dir: Path, students: tuple[str, ...] = ("S0", "S1"), strengths: str = "{}") -> Path:
    """A run directory as `popula run` leaves it: config, league (S1 leads) and trained-looking adapters."""
    (run / "config.yaml").write_text(
        f"base_model: {base_dir}\nengine: torch\nlora:\n  rank: 4\n  alpha: 8\n"
        "tasks:\n  types: [code_o]\ngeneration:\n  rollouts: 2\n  student_max_tokens: 16\n"
        f"sandbox:\n  workers: 1\nlearner:\n  lr: 1.0e-3\nevolution:\n  strengths: {strengths}\n")
    store = AdapterStore(run / "adapters", base_dir, rank=4, alpha=8.0, seed=0)
    g = torch.Generator().manual_seed(1)
    for name in ("T0", *students):
        weights = store.load(store.create(name)).state_dict
        # small non-zero B: each adapter is its own (slightly different) model that still answers
        store.save(name, {k: 1e-3 * torch.randn(v.shape, generator=g) if ".lora_B." in k else v
                          for k, v in weights.items()})
    league = League()
    league.add_member("T0", "teacher")
    for name in students:
        league.add_member(name, "student")
    league.members[students[-1]].mu, league.members[students[-1]].sigma = 30.0, 2.0  # best conservative rating
    league.save(run / "league.json")
    return run


@pytest.fixture(scope="module")
def run_dir(base_dir, tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("run"), base_dir, strengths="{gaussian: 0.0}")


@pytest.fixture(autouse=True)
def _only_this_command(monkeypatch):
    monkeypatch.setattr(popula.cli, "COMMANDS", ["retention"])


@pytest.fixture(scope="module")
def measured(run_dir) -> dict:
    """One --json measurement of a (zero-strength) mutation and a crossover, shared by the tests below."""
    out = io.StringIO()  # capsys is function-scoped: a module-scoped fixture reads stdout itself
    with contextlib.redirect_stdout(out):
        code = popula.cli.main(["retention", str(run_dir), "--operator", "gaussian", "--operator", "slot_swap",
                                *QUICK, "--json"])
    assert code == 0
    return json.loads(out.getvalue())


def test_json_is_one_object_with_the_setup_and_one_entry_per_operator(measured, run_dir):
    assert measured["run_dir"] == str(run_dir)
    assert measured["role"] == "student"
    assert measured["parents"] == ["S1", "S0"]  # best conservative rating first
    assert (measured["tasks"], measured["train_tasks"], measured["samples"], measured["steps"]) == (TASKS, TASKS, 2, 1)
    assert [op["operator"] for op in measured["operators"]] == ["gaussian", "slot_swap"]
    for op in measured["operators"]:
        assert len(op["rewards"]) == 1 + measured["steps"]
        assert op["child_reward"] == op["rewards"][0]
        assert op["levels"] == pytest.approx([r / op["parent_reward"] for r in op["rewards"]])
        assert op["initial_level"] == op["levels"][0]
        assert all(0.0 <= r <= 1.0 for r in op["rewards"])  # student rewards: 0 wrong or malformed .. 1 right
        assert op["steps_to_recover"] is None or 0 <= op["steps_to_recover"] <= measured["steps"]
        recovered = [i for i, level in enumerate(op["levels"]) if level >= op["threshold"]]
        assert op["steps_to_recover"] == (recovered[0] if recovered else None)


def test_the_memorising_parents_earn_a_positive_reward(measured):
    assert min(measured["parent_rewards"].values()) > 0.5
    assert 0.0 <= measured["base_reward"] <= 1.0
    assert set(measured["parent_delta_norms"]) == {"S1", "S0"}
    assert all(norm > 0 for norm in measured["parent_delta_norms"].values())  # not the bare base


def test_a_zero_strength_mutation_keeps_its_parents_reward_exactly(measured):
    gaussian = measured["operators"][0]
    assert (gaussian["kind"], gaussian["strength"], gaussian["parents"]) == ("mutation", 0.0, ["S1"])
    assert gaussian["parent_rewards"] == [measured["parent_rewards"]["S1"]]
    assert gaussian["child_reward"] == gaussian["parent_reward"]  # same weights, same seeded samples
    assert gaussian["initial_level"] == 1.0
    assert gaussian["steps_to_recover"] == 0


def test_a_crossover_is_measured_against_the_mean_of_its_two_parents(measured):
    swap = measured["operators"][1]
    assert (swap["kind"], swap["parents"]) == ("crossover", ["S1", "S0"])
    assert swap["parent_rewards"] == [measured["parent_rewards"]["S1"], measured["parent_rewards"]["S0"]]
    assert swap["parent_reward"] == pytest.approx(sum(swap["parent_rewards"]) / 2)
    assert swap["in_default_mix"] is True


def test_the_table_lists_every_operator_with_its_recovery(run_dir, capsys):
    assert popula.cli.main(["retention", str(run_dir), "--operator", "gaussian", "--steps", "0", "--tasks", "2",
                            "--samples", "1"]) == 0
    table = capsys.readouterr().out
    assert "parents S1" in table
    assert "gaussian" in table and "100.0%" in table  # a zero-strength child is 100% of its parent


def test_levels_above_the_bare_base_are_refused_when_the_parents_gained_nothing_over_it(run_dir, capsys):
    # The fixture's students are untrained (zero adapters): they are the bare base, so there
    # is no gain over the base to keep, and the fraction kept would be 0/0.
    assert popula.cli.main(["retention", str(run_dir), "--operator", "gaussian", "--steps", "0", "--tasks", "2",
                            "--samples", "1", "--baseline", "base", "--json"]) == 2
    err = capsys.readouterr().err
    assert "is not above the baseline" in err and "choose another --baseline" in err


def test_an_unknown_operator_is_refused_with_the_known_ones(run_dir, capsys):
    assert popula.cli.main(["retention", str(run_dir), "--operator", "shuffle"]) == 2
    err = capsys.readouterr().err
    assert "shuffle" in err and "gaussian" in err and "interpolate" in err


def test_a_missing_run_directory_or_league_is_refused(tmp_path, run_dir, capsys):
    assert popula.cli.main(["retention", str(tmp_path / "nowhere")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    assert popula.cli.main(["retention", str(tmp_path)]) == 2
    assert "league.json" in capsys.readouterr().err


def test_missing_adapters_are_refused(tmp_path, run_dir, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.yaml", "league.json"):
        (run / name).write_text((run_dir / name).read_text())
    assert popula.cli.main(["retention", str(run), "--operator", "gaussian"]) == 2
    assert "store.json" in capsys.readouterr().err


def test_a_crossover_needs_two_students(base_dir, tmp_path, capsys):
    run = make_run(tmp_path, base_dir, students=("S0",))
    assert popula.cli.main(["retention", str(run), "--operator", "splice"]) == 2
    err = capsys.readouterr().err
    assert "need 2 live students" in err and "--operator" in err
