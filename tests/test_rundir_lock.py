"""One process per run directory: a second run or resume is refused, naming the holder.

The lock is flock(2) on RUN_DIR/.popula.lock, so it dies with its holder: after a kill -9
the next resume runs at once. The slow tests below use real `popula run` processes on the
quickly built tiny base (as test_run_e2e does).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popula.config import load_config
from popula.errors import PopulaError
from popula.run.metrics import read_metrics
from popula.run.rundir import LOCK_NAME, RunDirLock, prepare_run_dir

HOLD = """
import sys, time
from pathlib import Path
from popula.run.rundir import RunDirLock
lock = RunDirLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def hold_in_another_process(run_dir: Path) -> subprocess.Popen:
    """A real second process holding the lock (started, and holding, when this returns)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_resume_is_refused_while_another_process_holds_the_run_and_the_message_names_it(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    config = (tmp_path / "config.yaml").read_text()
    holder = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(PopulaError, match=rf"in use by another popula process \(pid {holder.pid} on "):
            prepare_run_dir(tmp_path, load_config(None, ["run.steps=7"]), resume=True)
        with pytest.raises(PopulaError, match=rf"pid {holder.pid}"):
            prepare_run_dir(tmp_path, load_config(None), resume=False)
        assert (tmp_path / "config.yaml").read_text() == config, "a refused process changes nothing"
    finally:
        holder.kill()
        holder.wait()


LATE_WRITER = """
import fcntl, os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(0.5)  # the window between taking the lock and writing the holder's line
os.ftruncate(fd, 0)
os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since now: late writer\\n".encode())
time.sleep(600)
"""


def test_a_refusal_in_the_moment_before_the_holder_writes_its_line_names_the_holder_not_the_last_one(tmp_path):
    lock_file = tmp_path / LOCK_NAME
    lock_file.write_text(f"pid {ended_pid()} on {os.uname().nodename}, since yesterday: an ended run\n")
    holder = subprocess.Popen([sys.executable, "-c", LATE_WRITER, str(lock_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(PopulaError, match=rf"pid {holder.pid} on .*late writer"):
            RunDirLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()


def ended_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_kill_9_of_the_holder_never_leaves_a_stale_lock(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    holder = hold_in_another_process(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert f"pid {holder.pid}" in (tmp_path / LOCK_NAME).read_text()  # the file stays, the lock does not
    lock = prepare_run_dir(tmp_path, load_config(None, ["run.steps=7"]), resume=True)
    try:
        assert f"pid {os.getpid()}" in (tmp_path / LOCK_NAME).read_text()
        assert load_config(tmp_path / "config.yaml").run.steps == 7
    finally:
        lock.release()


def test_the_lock_excludes_a_second_holder_in_the_same_process_until_released(tmp_path):
    first = RunDirLock(tmp_path).acquire()
    with pytest.raises(PopulaError, match="in use"):
        RunDirLock(tmp_path).acquire()
    first.release()
    with RunDirLock(tmp_path) as again:
        assert again.held
    assert not again.held


def test_a_refused_config_releases_the_lock(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    with pytest.raises(PopulaError, match="another config"):
        prepare_run_dir(tmp_path, load_config(None, ["seed=9"]), resume=True)
    RunDirLock(tmp_path).acquire().release()


# -- real runs ---------------------------------------------------------------------------------------

SMALL = ["population.teachers=2", "population.students=2", "tasks.proposals_per_type=1",
         "tasks.seed_tasks=6", "generation.rollouts=2", "generation.teacher_max_tokens=24",
         "generation.student_max_tokens=12", "evolution.enabled=false", "run.checkpoint_every=1"]


def popula_run(base: Path, out: Path, steps: int, *extra: str) -> list[str]:
    sets = [f"--set={s}" for s in [f"base_model={base}", *SMALL]]
    return [sys.executable, "-m", "popula", "run", "configs/tiny-cpu.yaml", "--out", str(out),
            "--steps", str(steps), *sets, *extra]


def steps_of(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def one_step_run(quick_base, tmp_path_factory) -> Path:
    """A run directory after its first step, made once for this module's runs."""
    out = tmp_path_factory.mktemp("lock") / "run"
    assert subprocess.run(popula_run(quick_base, out, 1), capture_output=True).returncode == 0
    return out


@pytest.fixture()
def run_at_step_1(one_step_run, tmp_path) -> Path:
    """A copy of the one-step run for one test to resume (a run directory names no path of its own)."""
    return Path(shutil.copytree(one_step_run, tmp_path / "run"))


@pytest.mark.slow
def test_two_resumes_started_together_one_runs_the_other_exits_2_and_every_step_is_written_once(
        quick_base, run_at_step_1):
    out = run_at_step_1
    procs = [subprocess.Popen(popula_run(quick_base, out, 3, "--resume"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    done = sorted((p.returncode, p.pid, err) for p, err in zip(procs, errs))
    assert [rc for rc, _, _ in done] == [0, 2], done
    (_, winner, _), (_, _, refusal) = done
    assert f"in use by another popula process (pid {winner} on " in refusal
    assert "Traceback" not in refusal
    assert steps_of(out) == [1, 2, 3]


@pytest.mark.slow
def test_a_resume_waits_for_no_one_after_a_kill_9_of_the_holder_and_writes_each_step_once(quick_base, run_at_step_1):
    out = run_at_step_1
    holder = subprocess.Popen(popula_run(quick_base, out, 100_000, "--resume"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while f"pid {holder.pid} " not in (out / LOCK_NAME).read_text():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        refused = subprocess.run(popula_run(quick_base, out, 3, "--resume"), capture_output=True, text=True)
        assert refused.returncode == 2
        assert f"pid {holder.pid} on " in refused.stderr and "Traceback" not in refused.stderr
        while len(steps_of(out)) < 3:  # the holder goes on writing after the refusal
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    last = steps_of(out)[-1]
    assert subprocess.run(popula_run(quick_base, out, last + 1, "--resume"), capture_output=True).returncode == 0
    assert steps_of(out) == list(range(1, last + 2))
