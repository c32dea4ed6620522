"""Fixtures shared across test files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from popula.model.base import resolve_base_model
from popula.model.recipe import TinyRecipe

# A tiny base built in seconds: it proposes almost nothing valid, but it is a real
# Hugging Face model of the real recipe, enough to drive every component of a run.
QUICK_RECIPE = TinyRecipe(minutes=0.3, pool_tasks=40, seq_len=256, batch_rows=2)


@pytest.fixture(scope="session")
def quick_base(tmp_path_factory) -> Path:
    """One quick tiny base per test session, in a private cache."""
    root = tmp_path_factory.mktemp("popula-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("POPULA_CACHE", str(root))
    path = resolve_base_model("tiny", recipe=QUICK_RECIPE, progress=False)
    mp.undo()
    return Path(path)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Two torch threads on a busy 2-core machine can run 20x slower than one: use one, then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
