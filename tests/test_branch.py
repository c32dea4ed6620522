"""`popula run --branch`'s copy (popula/run/branch.py) where it can fail: a bad checkpoint, a full disk.

The end-to-end behaviour (a branch reproduces its source, a changed key is named, refusals)
is in tests/test_run_e2e.py; these need no model.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from popula.config import load_config
from popula.errors import PopulaError
from popula.run import branch
from popula.run.checkpoint import Checkpoints


def a_run(root: Path) -> Path:
    """A run directory as far as a branch reads it: config, a kept checkpoint of step 2, its files."""
    root.mkdir()
    (root / "config.yaml").write_text(load_config(None).to_yaml())
    Checkpoints(root / "checkpoints").save(2, lambda d: (d / "state.json").write_text('{"step": 2}'))
    (root / "adapters" / "S0").mkdir(parents=True)
    (root / "adapters" / "S0" / "weights").write_bytes(b"w" * 64)
    (root / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    return root


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".popula.lock"}


def test_a_branch_copies_what_a_resume_reads_and_names_the_changed_keys(tmp_path):
    source = a_run(tmp_path / "source")
    cfg = load_config(None, ["learner.lr=0.01"])
    assert branch.branch_run(source, 2, tmp_path / "new", cfg) == ["learner.lr"]
    new = tmp_path / "new"
    assert files(new / "checkpoints") == {new / p.relative_to(source): b
                                          for p, b in files(source / "checkpoints").items()}
    assert (new / "adapters" / "S0" / "weights").read_bytes() == b"w" * 64
    assert (new / "metrics.jsonl").read_text() == (source / "metrics.jsonl").read_text()
    assert load_config(new / "config.yaml").learner.lr == 0.01


def test_a_corrupt_checkpoint_is_refused_and_nothing_is_written(tmp_path):
    source = a_run(tmp_path / "source")
    (source / "checkpoints" / "step-000002" / "state.json").write_text('{"step": 3}')
    with pytest.raises(PopulaError, match="checksum mismatch"):
        branch.branch_run(source, 2, tmp_path / "new", load_config(None))
    assert not (tmp_path / "new").exists()


def test_a_full_disk_leaves_no_run_behind_and_the_source_as_it_was(tmp_path, monkeypatch):
    source = a_run(tmp_path / "source")
    before = files(source)
    copytree = shutil.copytree

    def full(src, dst, *args, **kwargs):
        if Path(src).name == "adapters":
            raise OSError(errno.ENOSPC, "No space left on device")
        return copytree(src, dst, *args, **kwargs)

    monkeypatch.setattr(branch.shutil, "copytree", full)
    with pytest.raises(PopulaError) as err:
        branch.branch_run(source, 2, tmp_path / "new", load_config(None))
    assert "\n" not in str(err.value) and "No space left on device" in str(err.value)
    assert not [p for p in (tmp_path / "new").iterdir() if p.name != ".popula.lock"]
    assert files(source) == before
    monkeypatch.undo()
    assert branch.branch_run(source, 2, tmp_path / "new", load_config(None)) == []  # the place can be used again
