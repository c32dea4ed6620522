"""Checkpoints that a crash, a SIGKILL or a full disk can never leave half-written.

A checkpoint is a directory `checkpoints/step-NNNNNN/` written first under a temporary
name, with a manifest of every file's size and SHA-256, fsynced, then renamed into place.
The rename is the commit point: a directory with a final name is complete by
construction, and the manifest catches later corruption (a bad disk, a hand edit).
Older checkpoints are pruned only after a newer one is committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from popula.errors import PopulaError

MANIFEST = "manifest.json"


class Checkpoints:
    """The run's checkpoints under `root`: the newest `keep` are kept (`run.keep_checkpoints`)."""

    def __init__(self, root: Path, keep: int = 2) -> None:
        self.root = root
        self.keep = keep

    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        """Write a checkpoint for `step` with `write(dir)`; return its final directory.

        On any OS error (a full disk) the partial directory is removed and a PopulaError
        says so; the previous checkpoints are untouched.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"step-{step:06d}"
        tmp = self.root / f".step-{step:06d}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            write(tmp)
            manifest = {"step": step, "files": _digest_tree(tmp)}
            _write_synced(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
            _fsync_dir(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            _fsync_dir(self.root)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            latest = self.latest_step()
            kept = f"the checkpoint of step {latest} is intact" if latest is not None else "no earlier checkpoint exists"
            raise PopulaError(f"{final}: writing the checkpoint failed ({err.strerror or err}); {kept}") from None
        self._prune()
        return final

    def steps(self) -> list[int]:
        if not self.root.exists():
            return []
        return sorted(int(p.name[5:]) for p in self.root.glob("step-*") if p.name[5:].isdigit())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def load(self, step: int | None = None) -> Path:
        """The verified directory of checkpoint `step` (default: the newest)."""
        if step is None:
            step = self.latest_step()
            if step is None:
                raise PopulaError(f"{self.root}: no checkpoint to resume from")
        path = self.root / f"step-{step:06d}"
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise PopulaError(f"{path}: checkpoint manifest unreadable ({err})") from None
        actual = _digest_tree(path, skip=MANIFEST)
        for name, expected in manifest["files"].items():
            if actual.get(name) != expected:
                raise PopulaError(f"{path / name}: checkpoint file is missing or corrupt (checksum mismatch)")
        return path

    def discard_after(self, step: int) -> list[int]:
        """Delete the checkpoints of steps after `step` (a resume from an earlier one replaces
        them: they belong to a future the resumed run will not have); returns their steps."""
        later = [s for s in self.steps() if s > step]
        for s in later:
            shutil.rmtree(self.root / f"step-{s:06d}")
        return later

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            shutil.rmtree(self.root / f"step-{step:06d}", ignore_errors=True)


def _digest_tree(root: Path, skip: str | None = None) -> dict[str, str]:
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if name == skip:
            continue
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
