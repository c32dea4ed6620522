"""benchmarks/proposal_temperature.py: how proposals are sorted into one-line and multi-line, and summed up."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "proposal_temperature.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("proposal_temperature", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_summary_separates_acceptance_by_kind_and_counts_unparsed_proposals_as_invalid(bench):
    J = bench.Judged
    judged = [J(True, False, True, None), J(True, False, True, None), J(True, False, False, "runtime_error"),
              J(True, True, True, None), J(True, True, False, "syntax"), J(True, True, False, "syntax"),
              J(False, None, False, None), J(False, None, False, None)]
    got = bench.summarize(judged)
    assert got["proposals"] == 8 and got["unparsed"] == 2
    assert got["valid_rate"] == 3 / 8
    assert got["multiline_share"] == 3 / 6
    assert got["valid_oneline"] == 2 / 3 and got["valid_multiline"] == 1 / 3
    assert got["valid_multiline_per_proposal"] == 1 / 8
    assert got["reasons"] == {"oneline": {"runtime_error": 1}, "multiline": {"syntax": 2}}


def test_a_kind_never_proposed_has_no_acceptance_rate(bench):
    got = bench.summarize([bench.Judged(True, False, True, None)])
    assert got["valid_multiline"] is None and got["multiline_share"] == 0.0


def test_a_prompt_without_references_is_refused_before_any_model_loads():
    out = subprocess.run([sys.executable, str(SCRIPT), "--references", "0", "--model", "/nonexistent"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--references must be at least 1" in out.stderr.strip().splitlines()[-1]
