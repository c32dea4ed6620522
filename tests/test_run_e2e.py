"""`popula run` end to end on a quickly built tiny base: files, resume, and a SIGKILL.

These are the slowest tests of the suite (a real tiny base, the real engine, sandbox,
learner and league), so the run is as small as a run can be.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popula.cli import main
from popula.run.checkpoint import Checkpoints
from popula.run.metrics import read_metrics

pytestmark = pytest.mark.slow

SMALL = ["population.teachers=2", "population.students=2", "tasks.proposals_per_type=1",
         "tasks.seed_tasks=6", "generation.rollouts=2", "generation.teacher_max_tokens=24",
         "generation.student_max_tokens=12", "evolution.every=1", "evolution.min_age=0", "run.checkpoint_every=1"]


@pytest.fixture(scope="module")
def base(quick_base) -> Path:
    return quick_base


def args(base: Path, out: Path, steps: int, *extra: str) -> list[str]:
    sets = [f"--set={s}" for s in [f"base_model={base}", *SMALL]]
    return ["run", "configs/tiny-cpu.yaml", "--out", str(out), "--steps", str(steps), *sets, *extra]


def test_a_run_writes_the_run_directory_and_resumes(base, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert main(args(base, out, 2)) == 0
    import gc

    assert gc.get_freeze_count() == 0  # the run hands its frozen objects back (frozen at exit, they are never freed)
    # the first line names where it runs; config.yaml holds the runtime as resolved (auto device -> cpu here)
    import torch
    import yaml

    device, dtype = ("cuda:0" if torch.cuda.is_available() else "cpu"), "float32"  # the config asks for fp32
    assert capsys.readouterr().out.splitlines()[0] == f"popula run: engine torch on device {device}, dtype {dtype}"
    saved = yaml.safe_load((out / "config.yaml").read_text())["runtime"]
    assert (saved["device"], saved["dtype"]) == (device, dtype)
    for name in ("config.yaml", "metrics.jsonl", "league.json", "tasks.jsonl", "checkpoints", "tensorboard"):
        assert (out / name).exists(), name
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    required = {"step", "wall_s", "valid_rate", "solve_rate", "teacher_reward_mean", "student_reward_mean",
                "tasks_by_type", "ast_depth", "cyclomatic", "loc", "n_vars", "tokens_generated",
                "verify_per_s", "evolved"}
    assert required <= set(rows[0])
    # step 1 is an evolution step: one teacher and one student replaced, lineage recorded;
    # step 2, the run's last, is not: a child born there would never train
    assert {e["role"] for e in rows[0]["evolved"]} == {"teacher", "student"}
    assert rows[1]["evolved"] == []
    league = json.loads((out / "league.json").read_text())
    assert sum(1 for m in league["members"] if not m["alive"]) == 2

    # every alive member has a PEFT adapter that PEFT itself loads
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    alive = [m["name"] for m in league["members"] if m["alive"]]
    for name in alive:
        assert (out / "adapters" / name / "adapter_model.safetensors").exists(), name
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(out / "adapters" / alive[0]))
    assert model.peft_config["default"].r == 8
    # the files hold the last step's weights: the versions written in the background were all written
    from safetensors.torch import load_file

    last = out / "checkpoints" / "step-000002"
    learner = torch.load(last / "learner.pt", weights_only=False)["adapters"]
    for adapter in json.loads((last / "state.json").read_text())["roster"].values():
        on_disk = load_file(str(out / "adapters" / adapter / "adapter_model.safetensors"))
        assert on_disk.keys() == learner[adapter]["weights"].keys(), adapter
        assert all(torch.equal(on_disk[k], learner[adapter]["weights"][k]) for k in on_disk), adapter

    # each checkpoint names the arithmetic that computed it ...
    from popula.run import arithmetic

    assert json.loads((last / "state.json").read_text())["arithmetic"] == arithmetic.fingerprint(device, dtype)
    capsys.readouterr()
    assert main(args(base, out, 3, "--resume")) == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert main(["leaderboard", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    assert "resumed" in printed and "will not repeat" not in printed  # ... and the same machine says nothing
    # ... while a resume on other kernels says, in one line, that its steps will not repeat to the bit
    monkeypatch.setattr(arithmetic, "fingerprint", lambda device, dtype: {"torch": "0.0", "kernels": "cpu OTHER", "dtype": dtype})
    assert main(args(base, out, 4, "--resume")) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "will not repeat" in line]
    assert len(notes) == 1 and "kernels cpu OTHER" in notes[0]


def test_teachers_sampled_at_their_own_temperature_are_trained_at_it(base, tmp_path):
    """Teacher rollouts carry the temperature they were drawn at: a learner computing another
    temperature's policy would show a log-prob gap of order 1e-1, not fp32 rounding."""
    out = tmp_path / "run"
    assert main(args(base, out, 1, "--set=generation.teacher_temperature=0.6")) == 0
    row = read_metrics(out / "metrics.jsonl")[0]
    assert row["logprob_gap_max"] <= 1e-4


def test_a_decaying_rate_is_each_steps_own_and_logged(base, tmp_path):
    out = tmp_path / "run"
    assert main(args(base, out, 3, "--set=learner.lr=2e-3", "--set=learner.lr_decay=linear",
                     "--set=learner.lr_final=1e-3")) == 0
    assert [r["lr"] for r in read_metrics(out / "metrics.jsonl")] == pytest.approx([2e-3, 1.5e-3, 1e-3])


def test_a_run_killed_mid_step_resumes_from_its_last_checkpoint(base, tmp_path):
    out = tmp_path / "run"
    # far more steps than it can finish before the kill; checkpoints keep only the newest two,
    # so the wait is for any whole checkpoint, not for step 1's (pruned on a fast machine)
    cmd = [sys.executable, "-m", "popula", *args(base, out, 100_000)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while Checkpoints(out / "checkpoints").latest_step() is None:
            assert proc.poll() is None, "the run died on its own"
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.5)
        time.sleep(1.0)  # somewhere inside a later step
    finally:
        if proc.poll() is None:  # a run that died on its own leaves nothing to kill and its own failure
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # however far it got, the newest whole checkpoint is where the run continues
    last = Checkpoints(out / "checkpoints").latest_step()
    assert main(args(base, out, last + 1, "--resume")) == 0
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, last + 2))
    assert not list((out / "checkpoints").glob(".*partial"))


def test_the_heldout_probe_scores_the_live_students_and_leaves_training_alone(base, tmp_path):
    from popula.league import League

    assert main(args(base, tmp_path / "plain", 3)) == 0
    probe = ["--set=heldout.every=2", "--set=heldout.tasks=6", "--set=heldout.samples=2"]
    assert main(args(base, tmp_path / "probed", 3, *probe)) == 0
    plain, probed = read_metrics(tmp_path / "plain" / "metrics.jsonl"), read_metrics(tmp_path / "probed" / "metrics.jsonl")
    # due every 2 steps and at the run's last step
    assert ["heldout" in r for r in probed] == [False, True, True]
    assert all("heldout" not in r for r in plain)
    league = League.load(tmp_path / "probed" / "league.json")
    last = probed[-1]["heldout"]
    assert (last["tasks"], last["samples"]) == (6, 2)
    assert set(last["students"]) == {m.name for m in league.alive("student")}
    assert last["best"] == league.ranked("student")[0].name
    assert last["best_pass1"] == last["students"][last["best"]]["pass1"]
    assert all(0 <= s["pass1"] <= s["passk"] <= 1 for s in last["students"].values())
    assert "heldout_s" in probed[-1]["phases"]
    # sampling for the probe is seeded per request: the run plays and trains as it would without it
    same = ("valid_rate", "solve_rate", "teacher_reward_mean", "tasks_by_type", "tokens_generated", "evolved")
    assert [{k: r[k] for k in same} for r in probed] == [{k: r[k] for k in same} for r in plain]


def test_evolution_by_probe_replaces_the_student_that_scored_lowest_on_its_own_tasks(base, tmp_path):
    """evolution.fitness=probe: at each evolution step every live student answers the selection
    set, and the one with the lowest pass@1 (ties by name) is the student replaced."""
    out = tmp_path / "probe"
    sets = ["--set=evolution.fitness=probe", "--set=evolution.probe.tasks=6", "--set=evolution.probe.samples=2"]
    assert main(args(base, out, 3, *sets)) == 0
    rows = read_metrics(out / "metrics.jsonl")
    # evolution every step (SMALL), never at the run's last
    assert ["selection" in r for r in rows] == [True, True, False]
    alive = {"S0", "S1"}
    for row in rows[:2]:
        selection = row["selection"]
        assert (selection["tasks"], selection["samples"]) == (6, 2)
        assert set(selection["students"]) == alive
        pass1 = {m: s["pass1"] for m, s in selection["students"].items()}
        [replaced] = [e for e in row["evolved"] if e["role"] == "student"]
        assert replaced["replaced"] == min(pass1, key=lambda m: (pass1[m], m))
        assert replaced["parents"] == [m for m in alive if m != replaced["replaced"]]
        assert "selection_s" in row["phases"]
        alive = alive - {replaced["replaced"]} | {replaced["child"]}


def test_resuming_with_another_config_is_refused_and_changes_nothing(base, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(args(base, out, 1)) == 0
    before = (out / "metrics.jsonl").read_text()
    assert main(args(base, out, 2, "--resume", "--set=lora.rank=4")) == 2
    assert "belongs to another config" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("override, message", [
    ("lora.rank=100000", "lora.rank=100000 is above the smallest dimension"),
    ("lora.target_modules=[no_such_proj]", "matches target_modules ['no_such_proj']"),
])
def test_impossible_lora_is_refused_before_the_run_directory_is_touched(base, tmp_path, capsys, override, message):
    out = tmp_path / "run"
    assert main(args(base, out, 1, f"--set={override}")) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def _run_past_its_first_step(base, out, poll_s: float) -> subprocess.Popen:
    """`popula run` in a process of its own, for steps it never finishes by itself, once its
    first step is in metrics.jsonl."""
    cmd = [sys.executable, "-m", "popula", *args(base, out, 100_000, "--set=run.checkpoint_every=100")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not (out / "metrics.jsonl").exists() or not read_metrics(out / "metrics.jsonl"):
        assert proc.poll() is None, "the run died on its own"
        assert time.monotonic() < deadline, "no step within 10 minutes"
        time.sleep(poll_s)
    return proc


def test_ctrl_c_finishes_the_step_checkpoints_and_exits_cleanly(base, tmp_path):
    out = tmp_path / "run"
    proc = _run_past_its_first_step(base, out, poll_s=0.5)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, output  # a script tells an interrupted run from a finished one
    assert "stopping after this step" in output
    last = read_metrics(out / "metrics.jsonl")[-1]["step"]
    assert last < 100_000
    assert f"interrupted at step {last}; continue with: popula run configs/tiny-cpu.yaml --out {out} --resume" in output
    assert "Traceback" not in output and "done" not in output
    # the checkpoint at exit holds the last finished step, though the schedule said every 100
    assert (out / "checkpoints" / f"step-{last:06d}").exists()


def test_a_second_ctrl_c_stops_at_once_and_the_last_finished_step_resumes(base, tmp_path):
    out = tmp_path / "run"
    proc = _run_past_its_first_step(base, out, poll_s=0.2)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)  # most likely inside the next step's play, which is then abandoned
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    last = read_metrics(out / "metrics.jsonl")[-1]["step"]
    assert f"interrupted at step {last};" in output
    assert (out / "checkpoints" / f"step-{last:06d}").exists()
    assert not list((out / "checkpoints").glob(".*partial"))
    assert main(args(base, out, last + 1, "--resume", "--set=run.checkpoint_every=100")) == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, last + 2))


def test_a_ratchet_run_logs_its_reference_tilt_and_carries_it_across_a_resume(base, tmp_path):
    """Each step logs the tilt its references were drawn with, and the resumed step continues
    from the checkpoint's tilt, not from 0 (floor 0: the tilt climbs every step, valid or not)."""
    out = tmp_path / "run"
    ratchet = ["--set=tasks.reference_weighting=ratchet", "--set=tasks.ratchet_step=0.5",
               "--set=tasks.ratchet_floor=0"]
    assert main(args(base, out, 2, *ratchet)) == 0
    assert main(args(base, out, 3, *ratchet, "--resume")) == 0
    assert [r["reference_tilt"] for r in read_metrics(out / "metrics.jsonl")] == [0.0, 0.5, 1.0]


def test_run_keeps_the_checkpoints_asked_for_and_resumes_from_any_kept_step(base, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(args(base, out, 3, "--set=run.keep_checkpoints=3")) == 0
    assert Checkpoints(out / "checkpoints").steps() == [1, 2, 3]
    capsys.readouterr()
    assert main(args(base, out, 2, "--set=run.keep_checkpoints=3", "--resume", "1")) == 0
    said = capsys.readouterr().out
    assert "resuming from step 1 replaces the checkpoints of steps 2, 3" in said and "resumed" in said
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert Checkpoints(out / "checkpoints").steps() == [1, 2]


def test_an_adapter_is_exported_as_any_kept_checkpoint_held_it(base, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(args(base, out, 2, "--set=run.keep_checkpoints=3")) == 0
    from safetensors.torch import load_file

    # the newest checkpoint holds what the run's adapters/ holds: the same folder, tensor for tensor
    assert main(["export", str(out), str(tmp_path / "live")]) == 0
    assert main(["export", str(out), str(tmp_path / "last"), "--step", "2"]) == 0
    live, last = (load_file(tmp_path / d / "adapter_model.safetensors") for d in ("live", "last"))
    assert live.keys() == last.keys() and all(bool((live[k] == last[k]).all()) for k in live)
    assert ((tmp_path / "live" / "adapter_config.json").read_text()
            == (tmp_path / "last" / "adapter_config.json").read_text())

    # a student evolution replaced at step 1 is still there as the checkpoint before it held it
    gone = next(e["replaced"] for e in read_metrics(out / "metrics.jsonl")[0]["evolved"] if e["role"] == "student")
    assert main(["export", str(out), str(tmp_path / "then"), "--adapter", gone, "--step", "0"]) == 0
    assert f"{gone} as of step 0" in capsys.readouterr().out
    assert "steps trained by the run: 0" in (tmp_path / "then" / "README.md").read_text()
    assert load_file(tmp_path / "then" / "adapter_model.safetensors").keys() == live.keys()

    # what cannot be exported says why in one line, and writes nothing
    assert main(["export", str(out), str(tmp_path / "no1"), "--adapter", gone, "--step", "1"]) == 2
    assert main(["export", str(out), str(tmp_path / "no2"), "--step", "7"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 2 and f"{gone}: not live at step 1" in said[0] and "kept: 0, 1, 2" in said[1]
    assert not (tmp_path / "no1").exists() and not (tmp_path / "no2").exists()


def test_a_branch_trains_on_from_another_runs_checkpoint_and_leaves_that_run_as_it_was(base, tmp_path, capsys,
                                                                                        one_torch_thread):
    source = tmp_path / "source"
    assert main(args(base, source, 3, "--set=run.keep_checkpoints=4")) == 0
    untouched = {p: p.read_bytes() for p in sorted(source.rglob("*")) if p.is_file() and p.name != ".popula.lock"}
    timings = {"wall_s", "phases", "verify_per_s"}

    def comparable(run: Path) -> list[dict]:
        rows = [{k: v for k, v in r.items() if k not in timings} for r in read_metrics(run / "metrics.jsonl")]
        for row in rows:  # a resume publishes each adapter once more: only the version labels move
            for adapter in row["learner"]["adapters"].values():
                adapter.pop("versions", None)
        return rows

    # the source's own settings from its step 1: runs reproduce step for step, so steps 2-3 are the source's
    same = tmp_path / "same"
    capsys.readouterr()
    assert main(args(base, same, 3, "--branch", str(source), "1", "--set=run.keep_checkpoints=4")) == 0
    said = capsys.readouterr().out
    assert f"branches from {source} at step 1; changed: nothing" in said, said
    assert comparable(same) == comparable(source)
    assert json.loads((same / "branch.json").read_text()) == {"source": str(source.resolve()), "step": 1,
                                                              "changed": []}

    # a changed setting is named, trains from the step on, and the branch resumes as any run does
    other = tmp_path / "other"
    assert main(args(base, other, 2, "--branch", str(source), "1", "--set=learner.lr=0.05")) == 0
    assert "changed: learner.lr" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(other / "metrics.jsonl")] == [1, 2]
    assert comparable(other)[0] == comparable(source)[0]
    assert main(args(base, other, 3, "--set=learner.lr=0.05", "--resume")) == 0
    assert [r["step"] for r in read_metrics(other / "metrics.jsonl")] == [1, 2, 3]
    capsys.readouterr()
    assert main(["leaderboard", str(other)]) == 0  # the leaderboard names where a branch came from
    assert f"branched from {source.resolve()} at step 1 (changed: learner.lr, run.keep_checkpoints, run.steps)" in capsys.readouterr().out

    # what cannot be branched says why in one line, and leaves no run behind
    refused = [(["--branch", str(source), "7"], "keeps no checkpoint of step 7"),
               (["--branch", str(source), "1", "--set=population.students=3"], "fixes population.students"),
               (["--branch", str(source), "1", "--resume"], "give one of them"),
               (["--branch", str(tmp_path / "nothing"), "1"], "not a run directory")]
    for extra, why in refused:
        assert main(args(base, tmp_path / "no", 3, *extra)) == 2
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and why in said[0], said
        assert not (tmp_path / "no" / "config.yaml").exists()
    assert main(args(base, same, 3, "--branch", str(source), "1")) == 2  # a directory that holds a run
    assert "already holds a run" in capsys.readouterr().err

    assert {p: p.read_bytes() for p in sorted(source.rglob("*"))
            if p.is_file() and p.name != ".popula.lock"} == untouched
