"""A checkpoint is either whole and verified, or it does not exist."""

import errno

import pytest

from popula.errors import PopulaError
from popula.run.checkpoint import Checkpoints


def writer(payload: bytes):
    def write(d):
        (d / "adapters").mkdir()
        (d / "adapters" / "T0.safetensors").write_bytes(payload)
        (d / "state.json").write_text('{"step": 1}')
    return write


def test_saved_checkpoint_loads_and_verifies(tmp_path):
    ckpts = Checkpoints(tmp_path / "checkpoints")
    path = ckpts.save(3, writer(b"weights"))
    assert ckpts.load() == path
    assert (path / "adapters" / "T0.safetensors").read_bytes() == b"weights"


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    ckpts = Checkpoints(tmp_path / "checkpoints", keep=2)
    for step in (1, 2, 3):
        ckpts.save(step, writer(bytes([step])))
    assert ckpts.steps() == [2, 3]


def test_a_failing_write_leaves_the_previous_checkpoint_intact(tmp_path):
    ckpts = Checkpoints(tmp_path / "checkpoints")
    ckpts.save(1, writer(b"good"))

    def disk_full(d):
        (d / "half").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(PopulaError, match="No space left on device.*step 1 is intact"):
        ckpts.save(2, disk_full)
    assert ckpts.steps() == [1]
    assert (ckpts.load() / "adapters" / "T0.safetensors").read_bytes() == b"good"
    assert not list((tmp_path / "checkpoints").glob(".*partial"))


def test_a_corrupted_file_is_named_on_load(tmp_path):
    ckpts = Checkpoints(tmp_path / "checkpoints")
    path = ckpts.save(1, writer(b"good"))
    (path / "adapters" / "T0.safetensors").write_bytes(b"bad!")
    with pytest.raises(PopulaError, match="T0.safetensors: checkpoint file is missing or corrupt"):
        ckpts.load()


def test_a_partial_directory_from_a_killed_run_is_not_a_checkpoint(tmp_path):
    ckpts = Checkpoints(tmp_path / "checkpoints")
    ckpts.save(1, writer(b"good"))
    (tmp_path / "checkpoints" / ".step-000002.partial").mkdir()
    assert ckpts.latest_step() == 1


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(PopulaError, match="no checkpoint to resume from"):
        Checkpoints(tmp_path / "checkpoints").load()
