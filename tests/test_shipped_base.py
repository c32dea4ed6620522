"""The tiny base shipped with Popula: a first run finds it in seconds, and only the recipe it
was built from ever gets it."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from popula.errors import PopulaError
from popula.model import shipped
from popula.model.base import MARKER, resolve_base_model
from popula.model.recipe import TinyRecipe


def test_the_shipped_base_is_the_default_recipes():
    assert shipped.shipped_digest() == TinyRecipe().digest(), (
        "the default tiny recipe (or the generator, prompt formats or task kinds it hashes) changed since the "
        "base was shipped, so first runs would build for half an hour: run `popula pretrain` and then "
        "`python3 scripts/ship_tiny_base.py`")


def test_a_first_run_installs_the_shipped_base_in_seconds_with_the_umasks_modes(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULA_CACHE", str(tmp_path))
    old = os.umask(0o022)
    try:
        started = time.monotonic()
        path = Path(resolve_base_model("tiny", progress=False))
    finally:
        os.umask(old)
    assert time.monotonic() - started < 30
    assert (path / MARKER).is_file() and (path / "model.safetensors").is_file()
    assert {stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()} == {0o644}
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_another_recipe_never_gets_the_shipped_base(tmp_path):
    assert not shipped.install_shipped(tmp_path / "other", TinyRecipe(seed=1))
    assert not (tmp_path / "other").exists()


def test_a_damaged_shipped_file_is_refused_not_installed(tmp_path, monkeypatch):
    copy = tmp_path / "shipped"
    shutil.copytree(shipped.SHIPPED_MODEL, copy)
    with open(copy / "model.safetensors", "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    monkeypatch.setattr(shipped, "SHIPPED_MODEL", copy)
    with pytest.raises(PopulaError, match="damaged"):
        shipped.install_shipped(tmp_path / "cache" / "tiny", TinyRecipe())
    assert not (tmp_path / "cache" / "tiny").exists()
