"""Novelty of a proposed task: how many of the curriculum's recent tasks are the same program.

Self-play on a small base narrows its curriculum to a handful of one-line programs, most of
them posed before (measured by `benchmarks/curriculum_variety.py`; docs/results/learning). The teacher reward (1 - rho) pays a repeat as much as a new program the students
solve as rarely, so nothing pushes a teacher off a lesson it has found. Fitness sharing, the classic niching
rule of evolutionary search, divides a reward among the members of a niche; here a niche is
a program *form*, and a valid task's reward is divided by its niche count: 1 + the tasks of
its type with the same form among the step's other valid tasks and the newest
`rewards.novelty_window` tasks of the buffer. A new form keeps its full reward.

A form is the program with its variables renamed in order of first appearance and each
literal replaced by its type, so `def f(a): return a + 3` and `def f(x): return x + 7` are
one form, while `sum(a)` and `max(a)` (different builtins) and any change of structure are not.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from popula.syntax import parse

_BUILTINS = frozenset(dir(builtins))


class _Canonical(ast.NodeTransformer):
    """Renames bound names v0, v1, ... in order of appearance; literals become their type's name."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _rename(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self._rename(node.arg)
        node.annotation = None
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id not in _BUILTINS or node.id in self.names:
            node.id = self._rename(node.id)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.copy_location(ast.Constant(value=type(node.value).__name__), node)

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        # a bare string statement is a docstring or a comment in disguise, not structure
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)


@lru_cache(maxsize=65536)
def program_form(program: str) -> str:
    """A short digest of the program's form; a program that does not parse is its own form."""
    try:
        tree = _Canonical().visit(parse(program))
        text = ast.dump(tree, annotate_fields=False)
    except (SyntaxError, ValueError, RecursionError):
        text = "unparsed:" + program
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def niche_counts(step_programs: Sequence[str], window_programs: Sequence[str]) -> list[int]:
    """For each of this step's programs: 1 + its form's copies among the others and the window."""
    forms = [program_form(p) for p in step_programs]
    here = Counter(forms)
    before = Counter(program_form(p) for p in window_programs)
    return [here[f] + before[f] for f in forms]


def distinct_form_rate(programs: Sequence[str]) -> float | None:
    """The share of distinct forms among `programs` (1.0: no two alike); None for none."""
    if not programs:
        return None
    return len({program_form(p) for p in programs}) / len(programs)
