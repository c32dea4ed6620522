"""The run directory (docs/design.md § Run directory): creating it, and refusing to mix two runs in one.

A fresh run refuses a directory that already holds a run (one that finished a step: a run
that stopped while it opened is taken over); `--resume` refuses one whose
saved config differs from the given one (except `run.steps`, which a resume may extend,
`ray.*` / `runtime.*`: a local run may continue on a cluster or another device, and what only
watches: `heldout.*`, `logging.*`), naming every key that differs.

One process at a time: `prepare_run_dir` takes an exclusive lock on `RUN_DIR/.popula.lock`
(`RunDirLock`) and the run holds it until it ends. Without it two resumes of one directory
both run, append the same steps to metrics.jsonl twice and race each other's checkpoint
renames. The lock is `flock(2)`, so the kernel drops it when the holder dies in any way
(kill -9 included): a lock file left behind never blocks the next run; the file only tells
the refused process who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

import yaml

from popula.adapters import STATE_FILE, AdapterRef
from popula.config import Config
from popula.errors import PopulaError
from popula.league import League, Member
from popula.run.checkpoint import Checkpoints

# What a resume may change: how long the run goes on and how many checkpoints it keeps, where
# its workers run (on which device: a run started on a CPU may go on where there is a GPU), and
# the held-out probe and the metric sinks, which only watch (a run trains the same with or
# without the probe: tests/test_run_e2e.py).
RESUMABLE_KEYS = {"run.steps", "run.keep_checkpoints", "ray", "runtime", "heldout", "logging"}


def _resumable(key: str) -> bool:
    return key in RESUMABLE_KEYS or key.split(".", 1)[0] in RESUMABLE_KEYS


LOCK_NAME = ".popula.lock"
CONFIG_TMP = "config.yaml.tmp"  # config.yaml while it is being written (write_config)


class RunDirLock:
    """An exclusive, process-lifetime lock on one run directory (see the module docstring).

    `flock` locks belong to the open file: a second lock attempt fails even from the same
    process, and the lock goes away when the file is closed or the holder exits. The file's
    text names the holder (pid, host, start time, command) for the refusal message.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "RunDirLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _wait_for_holder(fd)
            os.close(fd)
            raise PopulaError(
                f"{self.run_dir} is in use by another popula process ({holder}); two processes writing one "
                "run directory would write its steps twice. Wait for that process to end, or stop it (Ctrl-C) "
                "and run again; to run beside it, choose another --out"
            ) from None
        except OSError as err:
            os.close(fd)
            raise PopulaError(f"{self.path}: cannot lock the run directory ({err.strerror or err})") from None
        command = " ".join(sys.argv)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {started}: {command}\n".encode())
        self._fd = fd
        return self

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock (the file stays: removing it could let a third process lock a fresh inode)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor of the open file drops the flock

    def __enter__(self) -> "RunDirLock":
        return self if self.held else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def _wait_for_holder(fd: int, patience_s: float = 2.0) -> str:
    """The holder's line, read once the holder has written it.

    The holder locks first and writes its line just after, so a refused process can read
    the previous holder's line (a process that has ended) or nothing. Re-read for a moment
    until the line names a live process on this host (or one on another host, which cannot
    be checked from here).
    """
    deadline = time.monotonic() + patience_s
    while True:
        text = _read_holder(fd)
        if _names_live_process(text) or time.monotonic() >= deadline:
            return text or "a process that has not yet written its pid"
        time.sleep(0.02)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _names_live_process(text: str) -> bool:
    words = text.split()
    if len(words) < 4 or words[0] != "pid" or words[2] != "on" or not words[1].isdigit():
        return False
    if words[3].rstrip(",") != socket.gethostname():
        return True
    try:
        os.kill(int(words[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return True


def check_run_dir(run_dir: Path, resume: bool) -> None:
    """Refuse at once, before any model loads or any build is waited for, a run directory that
    cannot take this run: a file, a directory that holds a run (without --resume) or none (with
    it), or a place this user cannot write. `prepare_run_dir` checks again under the lock."""
    if run_dir.exists() and not run_dir.is_dir():
        raise PopulaError(f"--out {run_dir}: exists and is not a directory; give a directory for the run")
    if resume and not (run_dir / "config.yaml").exists():
        raise PopulaError(f"{run_dir}: nothing to resume (no config.yaml); start it without --resume")
    if not resume and holds_run(run_dir):
        raise PopulaError(f"{run_dir} already holds a run; continue it with --resume or choose another --out")
    existing = next(p for p in [run_dir.absolute(), *run_dir.absolute().parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise PopulaError(f"--out {run_dir}: cannot write in {existing}")


def holds_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds a run that got somewhere: its config and a finished step (a
    metrics row or a checkpoint). A config alone is a run that failed before its first step
    (a model that would not load, a W&B login refused): a fresh run may take the directory
    over, as nothing of it would be lost."""
    if not (run_dir / "config.yaml").exists():
        return False
    metrics = run_dir / "metrics.jsonl"
    return (metrics.exists() and metrics.stat().st_size > 0) or bool(Checkpoints(run_dir / "checkpoints").steps())


def resume_point(run_dir: Path, step: int | None = None) -> int:
    """The checkpoint step a resume of `run_dir` starts from: `step`, or the newest one."""
    kept = Checkpoints(run_dir / "checkpoints").steps()
    if not kept:
        if not holds_run(run_dir):
            raise PopulaError(f"{run_dir}: nothing to resume (the run stopped before its first step); "
                              "start it again without --resume")
        raise PopulaError(f"{run_dir}: no checkpoint to resume from")
    if step is None:
        return kept[-1]
    if step not in kept:
        raise PopulaError(f"--resume {step}: {run_dir} keeps no checkpoint of step {step} (it keeps steps "
                          f"{', '.join(map(str, kept))}; run.keep_checkpoints sets how many it keeps)")
    return step


def prepare_run_dir(run_dir: Path, cfg: Config, resume: bool) -> RunDirLock:
    """Check that `run_dir` may take this run, lock it, and write the resolved config.

    Returns the held lock; the caller keeps it for the whole run and releases it at the end
    (the kernel releases it if the process dies first). Checks happen under the lock, so two
    fresh runs started together cannot both find the directory empty.
    """
    config_path = run_dir / "config.yaml"
    if resume and not config_path.exists():
        raise PopulaError(f"{run_dir}: nothing to resume (no config.yaml); start it without --resume")
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunDirLock(run_dir).acquire()
    try:
        _check_and_write_config(run_dir, cfg, resume)
    except BaseException:
        lock.release()
        raise
    return lock


def _check_and_write_config(run_dir: Path, cfg: Config, resume: bool) -> None:
    config_path = run_dir / "config.yaml"
    if resume:
        if not config_path.exists():
            raise PopulaError(f"{run_dir}: nothing to resume (no config.yaml); start it without --resume")
        differ = [k for k in config_differences(yaml.safe_load(config_path.read_text(encoding="utf-8")), cfg)
                  if not _resumable(k)]
        if differ:
            raise PopulaError(
                f"{run_dir} belongs to another config: it differs at {', '.join(differ)}. "
                "Resume with the run's own config.yaml, or start a new run with --out."
            )
    elif holds_run(run_dir):
        raise PopulaError(
            f"{run_dir} already holds a run; continue it with --resume or choose another --out"
        )
    write_config(run_dir, cfg)


def write_config(run_dir: Path, cfg: Config) -> None:
    """RUN_DIR/config.yaml, replaced whole (written aside, then renamed): a run's config is its
    first file and the mark that the directory holds a run, so it is never half written."""
    config_path = run_dir / "config.yaml"
    tmp = config_path.with_name(CONFIG_TMP)
    tmp.write_text(cfg.to_yaml(), encoding="utf-8")
    tmp.replace(config_path)


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run directory: `popula run` writes its config.yaml first."""
    return path.is_dir() and (path / "config.yaml").is_file()


def run_adapter(run_dir: Path, name: str) -> AdapterRef:
    """The latest version of adapter `name` (or of league member `name`'s adapter) in a run dir.

    Read from RUN_DIR/adapters/store.json without opening an AdapterStore: opening one
    prunes versions, which must never happen to a run that is still going.
    """
    root = run_dir / "adapters"
    state_path = root / STATE_FILE
    try:
        latest = json.loads(state_path.read_text())["latest"]
    except FileNotFoundError:
        raise PopulaError(f"{state_path}: no adapter store in this run directory") from None
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise PopulaError(f"{state_path}: unreadable adapter store state ({err!r})") from None
    adapter = name if name in latest else member_adapter(run_dir, name)
    if adapter not in latest:
        raise PopulaError(f"--adapter {name}: no such adapter in {root} (known: {', '.join(sorted(latest)) or 'none'})")
    entry = latest[adapter]
    return AdapterRef(name=adapter, version=int(entry["version"]), uid=int(entry["uid"]), path=root / adapter)


def member_adapter(run_dir: Path, member: str) -> str:
    """The adapter a league member trains, from the newest checkpoint's roster.

    Members and adapters share names in a population; in the single-agent baseline both
    league entries (T0, S0) train the one adapter A0.
    """
    states = sorted((run_dir / "checkpoints").glob("step-*/state.json"))
    if not states:
        return member
    try:
        roster = json.loads(states[-1].read_text())["roster"]
    except (OSError, json.JSONDecodeError, KeyError) as err:
        raise PopulaError(f"{states[-1]}: unreadable run state ({err})") from None
    return roster.get(member, member)


def best_student(run_dir: Path) -> str:
    """The live student with the best conservative rating (mu - 3 sigma) in RUN_DIR/league.json."""
    return live_students(run_dir)[0].name


def live_students(run_dir: Path) -> list[Member]:
    """The league's live students, best conservative rating first (a single agent's: its one, S0)."""
    ranked = League.load(run_dir / "league.json").ranked("student")
    if not ranked:
        raise PopulaError(f"{run_dir / 'league.json'}: the league has no live student to evaluate")
    return ranked


def config_differences(saved: Any, cfg: Config) -> list[str]:
    """The dotted keys where a run's saved config (as read from its config.yaml) and `cfg` differ."""
    return sorted(_diff(_with_defaults(saved), cfg.model_dump(mode="json")))


def _with_defaults(saved: Any) -> Any:
    """The saved config with the keys added to Popula since the run began, at their defaults.

    A key a newer version added keeps the old behaviour at its default, so a run written
    before it resumes unless the key is now set otherwise. A saved config the current schema
    rejects (a key since removed) is compared as written: the diff names what differs.
    """
    try:
        return Config.model_validate(saved).model_dump(mode="json")
    except ValueError:  # pydantic's ValidationError
        return saved


def _diff(a: Any, b: Any, prefix: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys: set[str] = set()
        for key in a.keys() | b.keys():
            keys |= _diff(a.get(key), b.get(key), f"{prefix}{key}.")
        return keys
    return set() if a == b else {prefix.rstrip(".")}


@contextmanager
def uninterruptible() -> Iterator[None]:
    """Ctrl-C ignored for the duration: a teardown cut short by a second Ctrl-C would leave
    Ray processes and sandbox workers running with no owner. (SIGKILL still stops everything.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class GracefulStop:
    """Ctrl-C during a run. The first: finish the current step, checkpoint, exit. A second one
    during the step's play (`abandonable`: generating and judging, which change nothing a
    checkpoint holds) stops at once and the run saves the step before it. Anywhere else (the
    update, the checkpoint, closing the engines) it waits: only play is ever cut short, so the
    last finished step is always saved and the exit is always the clean one."""

    def __init__(self) -> None:
        self.requested = False
        self._abandonable = False
        self._previous: Any = None

    def __enter__(self) -> "GracefulStop":
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        # once a stop was asked for, the process is on its way out with the step saved: a later
        # Ctrl-C has nothing left to stop, and would only turn exit code 130 into a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN if self.requested else self._previous)

    @contextmanager
    def abandonable(self) -> Iterator[None]:
        """A section a second Ctrl-C cuts short with KeyboardInterrupt (a step's play)."""
        self._abandonable = True
        try:
            yield
        finally:
            self._abandonable = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested:
            self.requested = True
            print("\npopula: stopping after this step (Ctrl-C again to stop sooner)", flush=True)
        elif self._abandonable:
            self._abandonable = False  # one interrupt per play: its own cleanup is not cut again
            raise KeyboardInterrupt
        else:
            print("\npopula: saving the last finished step first; it takes a moment", flush=True)

