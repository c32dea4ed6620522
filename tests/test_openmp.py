"""OpenMP waits: a short bounded spin by default, and the user's own choice always wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from popula.openmp import SPIN_COUNT, configure_waits


@pytest.fixture
def no_wait_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Neither variable set, and whatever a test sets is undone after it."""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.setenv(name, "")  # recorded first, so the undo restores the original
        monkeypatch.delenv(name)
    return monkeypatch


def test_without_a_user_setting_threads_spin_briefly_then_sleep(no_wait_settings: pytest.MonkeyPatch) -> None:
    configure_waits()
    assert os.environ["GOMP_SPINCOUNT"] == str(SPIN_COUNT)
    assert "OMP_WAIT_POLICY" not in os.environ


@pytest.mark.parametrize("name, value", [("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "0")])
def test_a_user_setting_is_left_alone(no_wait_settings: pytest.MonkeyPatch, name: str, value: str) -> None:
    no_wait_settings.setenv(name, value)
    configure_waits()
    assert os.environ[name] == value
    assert ("GOMP_SPINCOUNT" in os.environ) == (name == "GOMP_SPINCOUNT")


def test_the_popula_command_sets_it_before_torch_loads() -> None:
    # libgomp reads the variable once, when torch loads it: the command must set it first.
    code = (
        "import os, sys\n"
        "os.environ.pop('OMP_WAIT_POLICY', None); os.environ.pop('GOMP_SPINCOUNT', None)\n"
        "from popula.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'torch' not in sys.modules\n"
        f"assert os.environ['GOMP_SPINCOUNT'] == '{SPIN_COUNT}', os.environ.get('GOMP_SPINCOUNT')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
