"""Every mistake a user can make at the command line ends in one line on stderr and a
non-zero exit code, never a traceback, and loses nothing that was there before."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from popula import __version__
from popula.cli import COMMANDS
from popula.config import Config

ROOT = Path(__file__).resolve().parent.parent


def popula(*argv: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "popula", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})}, **kwargs)


def refused(done: subprocess.CompletedProcess, says: str, code: int = 2) -> None:
    """The command failed with `code` and said `says` in its one line on stderr."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, done.stderr
    assert says in lines[0], lines[0]


def finished_run(path: Path, steps: int = 3) -> Path:
    """A run directory as a finished run leaves it (its checkpoints' contents are not read here)."""
    path.mkdir()
    (path / "config.yaml").write_text(Config().model_copy(update={"run": Config().run.model_copy(
        update={"steps": steps})}).to_yaml())
    (path / "checkpoints" / f"step-{steps:06d}").mkdir(parents=True)
    return path


# -- conventions ------------------------------------------------------------------------------------


def test_a_bare_popula_lists_the_commands_and_version_says_which():
    done = popula()
    assert done.returncode == 0 and all(name in done.stdout for name in COMMANDS)
    assert popula("--version").stdout.strip() == f"popula {__version__}"


@pytest.mark.parametrize("command", [*COMMANDS, "models fetch", "models list"])
def test_every_commands_help_shows_an_example_and_cites_no_section_or_issue(command):
    text = popula(*command.split(), "--help").stdout
    assert re.search(r"^examples?:\n  popula ", text, re.M), text
    assert not re.search(r"\bsection \d|\bissue \d|§", text, re.I), text


# A mistyped flag or name is refused before torch or transformers load (they take seconds to import):
# the command's answer to a typo is immediate.
BAD_FLAGS = [
    (["pretrain", "--out", "never", "--layers", "0"], "--layers must be at least 1"),
    (["pretrain", "--out", "never", "--hidden-size", "100", "--heads", "3"], "hidden_size 100 is not a multiple of heads 3"),
    (["pretrain", "--minutes", "0"], "--minutes must be positive"),
    (["pretrain", "--steps", "0"], "--steps must be at least 1"),
    (["pretrain", "--programs", "0"], "--programs must be at least 1"),
    (["eval", "runs/a", "--tasks", "nope.jsonl"], "nope.jsonl: no such task file"),
    (["eval", "runs/a", "--tasks", "nope.jsonl", "--samples", "0"], "--samples must be at least 1"),
    (["eval", "tiny", "--tasks", "nope.jsonl", "--top-p", "2"], "--top-p must be in (0, 1]"),
    (["tasks", "--n", "0", "--out", "t.jsonl"], "--n must be at least 1"),
    (["models", "fetch", "smollm2-135"], "'smollm2-135' is neither a registry model"),
    (["export", "runs/none", "out"], "runs/none: not a run directory"),
    (["run", str(ROOT / "configs/tiny-cpu.yaml"), "--out", "r", "--set", "base_model=./no-model"],
     "base_model './no-model': no such model directory"),
]


def test_a_bad_flag_is_refused_before_any_model_code_loads(tmp_path):
    probe = (
        "import contextlib, io, json, sys\n"
        "from popula.cli import main\n"
        "results = []\n"
        f"for argv, _ in {BAD_FLAGS!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        code = main(argv)\n"
        "    results.append((code, err.getvalue(), sorted(m for m in ('torch', 'transformers') if m in sys.modules)))\n"
        "print(json.dumps(results))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    for (argv, says), (code, err, loaded) in zip(BAD_FLAGS, json.loads(done.stdout)):
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert loaded == [], (argv, loaded)
    assert list(tmp_path.iterdir()) == [], "a refused command writes nothing"


# -- popula run -------------------------------------------------------------------------------------


def test_run_out_naming_a_file_is_refused_before_anything_loads(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    refused(popula("run", "configs/tiny-cpu.yaml", "--out", str(target)), "exists and is not a directory")
    assert target.read_text() == "mine"


def test_a_bad_override_is_blamed_on_the_override_not_the_config_file(tmp_path):
    done = popula("run", "configs/tiny-cpu.yaml", "--out", str(tmp_path / "r"), "--set", "nokey.x=1")
    refused(done, "--set nokey.x=1: nokey: Extra inputs are not permitted")
    assert "configs/tiny-cpu.yaml" not in done.stderr and not (tmp_path / "r").exists()


def test_an_unknown_metric_sink_is_refused_in_one_line_naming_the_known_ones(tmp_path):
    done = popula("run", "configs/tiny-cpu.yaml", "--out", str(tmp_path / "r"), "--set", "logging.report_to=[tb]")
    refused(done, "--set logging.report_to=[tb]: logging.report_to: Value error, unknown metric sinks ['tb']; "
                  "expected some of tensorboard, wandb")
    assert not (tmp_path / "r").exists()


def test_a_usage_mistake_is_one_line_that_points_at_the_help(tmp_path):
    refused(popula("run", "configs/tiny-cpu.yaml", "--resume", "soon"), "see `popula run --help`")


def test_resuming_a_finished_run_says_it_is_finished(tmp_path):
    run = finished_run(tmp_path / "r")
    done = popula("run", "configs/tiny-cpu.yaml", "--out", str(run), "--resume", "--steps", "3")
    assert done.returncode == 0, done.stderr
    assert f"{run} is finished (step 3 of 3)" in done.stdout and "done" not in done.stdout


def test_resuming_from_a_step_no_checkpoint_keeps_names_the_kept_ones(tmp_path):
    run = finished_run(tmp_path / "r")
    refused(popula("run", "configs/tiny-cpu.yaml", "--out", str(run), "--resume", "1"),
            "keeps no checkpoint of step 1 (it keeps steps 3;")


def test_an_unknown_hub_id_offline_fails_in_seconds(tmp_path):
    done = popula("run", "configs/tiny-cpu.yaml", "--out", str(tmp_path / "r"), "--set", "base_model=nobody/none",
                  env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    refused(done, "not in the local Hugging Face cache and HF_HUB_OFFLINE is set")
    assert not (tmp_path / "r").exists()


# -- outputs of the other commands --------------------------------------------------------------------


def test_tasks_out_into_a_missing_folder_is_refused_before_generating(tmp_path):
    refused(popula("tasks", "--n", "2", "--out", str(tmp_path / "no" / "tasks.jsonl")), "does not exist")


def test_plot_out_naming_a_file_is_refused(tmp_path):
    target = tmp_path / "figure.png"
    target.write_bytes(b"mine")
    refused(popula("plot", str(tmp_path), "--out", str(target)), "is a file, not a folder")
    assert target.read_bytes() == b"mine"


def test_leaderboard_plot_under_a_file_is_refused(tmp_path):
    (tmp_path / "notes").write_text("mine")
    refused(popula("leaderboard", str(tmp_path), "--plot", str(tmp_path / "notes" / "r.png")), "is a file, not a folder")
    assert (tmp_path / "notes").read_text() == "mine"


def test_export_into_a_folder_that_holds_files_is_refused_and_leaves_them(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    refused(popula("export", str(tmp_path), str(out)), "is not empty")
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("argv", [["verify", "samples/tasks.jsonl"], ["models", "list"]])
def test_output_into_a_closed_pipe_ends_quietly(argv):
    proc = subprocess.Popen([sys.executable, "-m", "popula", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader went away before a line was written (`| head` that has had enough)
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_every_benchmark_exits_as_a_popula_command_does():
    """`python3 benchmarks/X.py | head` ends as `popula leaderboard RUN | head` does (141, no traceback):
    each benchmark's entry point runs its `main` through `run_script`."""
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        entry = [node for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"]
        assert [ast.unparse(s) for e in entry for s in e.body] == ["run_script(main)"], path.name


# -- a full disk ------------------------------------------------------------------------------------


def _small_filesystem_usable() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _small_filesystem_usable(), reason="needs unshare and a tmpfs mount in a user namespace")
def test_a_full_disk_says_so_and_leaves_no_partial_checkpoint(quick_base, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    # 3 MB hold the run's config and its adapters but not its first checkpoint (weights and optimiser state)
    script = (f"mount -t tmpfs -o size=3m tmpfs {disk} && {sys.executable} -m popula run configs/tiny-cpu.yaml "
              f"--out {run} --steps 1 --set base_model={quick_base} --set population.teachers=4 "
              f"--set population.students=4 --set sandbox.isolation=none; "
              f"status=$?; ls -a {run}/checkpoints >&2; exit $status")
    # no jail can be built inside this namespace (the run's pool and the seed tasks' are told so
    # apart); the generated seed tasks are all that this run executes
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "POPULA_SANDBOX_ISOLATION": "none"})
    lines = [line for line in done.stderr.splitlines() if ": error:" in line]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    assert ".partial" not in done.stderr  # the listing of checkpoints/ after the failure
