"""Every derived seed comes from `popula.seeds.derive_seed`, and each is what it was before the helper.

The run's request seeds, the seed tasks, evaluation's and retention's seeds and the tiny
base's held-out tasks keep their values, so a seeded run repeats its recorded figures
(`tests/test_run_equivalence.py`) and a cached base's build summary is unchanged.
"""

from __future__ import annotations

import ast
from pathlib import Path

from popula import seeds
from popula.seeds import derive_seed

ROOT = Path(__file__).resolve().parent.parent
M = 2**31 - 1


def test_the_helper_gives_the_values_each_place_derived_by_hand():
    for run_seed in (0, 1, 7, 12345):
        for step in (0, 1, 9):
            for i in (0, 3):
                assert derive_seed(run_seed, seeds.TEACHER, step, i) == (run_seed * 1_000_003 + step * 7_919 + i) % M
                assert derive_seed(run_seed, seeds.STUDENT, step, i) == \
                    (run_seed * 1_000_003 + step * 7_919 + 104_729 + i) % M
                assert derive_seed(run_seed, seeds.RETENTION, step, i) == \
                    (run_seed * 1_000_003 + (step + 1) * 7_919 + 52_361 + i) % M
        assert derive_seed(run_seed, seeds.EVAL, index=5) == (run_seed * 1_000_003 + 5) % M
        assert derive_seed(run_seed, seeds.SEED_TASKS) == run_seed + 10_000
        assert derive_seed(run_seed, seeds.BUILD_HELDOUT) == run_seed + 777


def test_purposes_are_named_once_and_seeds_stay_in_range():
    names = [p.name for p in seeds.PURPOSES]
    assert len(names) == len(set(names))
    assert all(0 <= derive_seed(2**40, p, 10**6, 10**3) < M for p in seeds.PURPOSES)


def test_no_module_derives_a_seed_by_hand():
    """The helper's constants appear in no other module of popula, evolution or benchmarks."""
    constants = {1_000_003, 7_919, 104_729, 52_361}
    offenders = []
    for package in ("popula", "evolution", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "popula" / "seeds.py" or "sandbox" in path.parts:  # the jail's hash is no seed
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in constants and not isinstance(node.value, bool):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"seeds derived outside popula/seeds.py: {offenders}"
