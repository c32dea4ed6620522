"""Program complexity: the four measures PopuLoRA tracks to detect curriculum collapse.

Single-agent self-play drifts toward trivial programs; a healthy population's programs
grow. These measures make that visible per step:

- ast_depth: the deepest nesting of AST nodes below the module (structural depth).
- cyclomatic: McCabe complexity from radon, summed over every function including nested
  helpers (radon scores a closure separately from its enclosing function).
- loc: source lines of code (radon's sloc: no blank or comment-only lines).
- n_vars: distinct variable names the program binds (parameters, assignment, loop,
  `with` and comprehension targets); function names are not variables.

Beside them, `ignores_input`: a program whose `f` never reads its parameters answers every
input alike, the shallowest task a teacher can keep valid (rung T, seed 2:
docs/results/smollm2-ladder/, "Rung U").
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from radon.complexity import cc_visit
from radon.raw import analyze

from popula.syntax import parse


@dataclass(frozen=True)
class Complexity:
    ast_depth: int
    cyclomatic: int
    loc: int
    n_vars: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def measure(program: str) -> Complexity:
    """Measure a program; raises SyntaxError if it does not parse (validate first)."""
    tree = parse(program)
    return Complexity(
        ast_depth=_depth(tree),
        cyclomatic=sum(_block_complexity(block) for block in cc_visit(program)),
        loc=analyze(program).sloc,
        n_vars=len(_bound_names(tree)),
    )


def ast_depth(program: str) -> int:
    """The AST depth alone, without radon's passes: what a program the executor rejected is
    measured by. Raises SyntaxError (or ValueError for a null byte) if it does not parse."""
    return _depth(parse(program))


def is_multiline(program: str) -> bool:
    """More than one line of code in the function body: radon's sloc (no blank or comment-only
    lines) above 2, the `def` line and one body line. Raises SyntaxError if it does not parse."""
    parse(program)
    return analyze(program).sloc > 2


def written_multiline(program: str) -> bool:
    """`is_multiline` for any text a teacher wrote, broken or not: a program that does not parse
    counts by its non-blank, non-comment lines after the first. A stray token is how a long
    program usually fails on a small base, so a rejected attempt at a multi-line program must
    still count as one (the teachers' `lines` baseline strata, benchmarks/proposal_temperature.py)."""
    try:
        return is_multiline(program)
    except (SyntaxError, ValueError):
        body = program.strip().splitlines()[1:]
        return sum(1 for line in body if line.strip() and not line.strip().startswith("#")) > 1


# names through which a program can read its parameters without naming them
_INDIRECT_READS = frozenset({"locals", "vars", "eval", "exec", "globals"})


def ignores_input(program: str) -> bool:
    """Whether the program's `f` never reads a parameter: no load of a parameter's name anywhere
    in its body (nested functions included) and no `locals()`-like reach for them.

    Conservative: a parameter read and then overwritten still counts as read, so a task is only
    called blind when no execution could depend on its input. A program without `f` is not blind
    (the sandbox rejects it). Raises SyntaxError (or ValueError for a null byte) if it does not parse.
    """
    tree = parse(program)
    entry = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "f"]
    if not entry:
        return False
    f = entry[-1]  # the last definition is the one a call reaches
    a = f.args
    params = {arg.arg for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if arg is not None}
    for node in (n for statement in f.body for n in ast.walk(statement)):
        # `n += 1` reads n, though its target's context says Store
        augmented = isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in params
        loaded = isinstance(node, ast.Name) and (
            node.id in _INDIRECT_READS or (node.id in params and not isinstance(node.ctx, ast.Store)))
        if augmented or loaded:
            return False
    return True


def parsed_depths(programs: Sequence[str]) -> list[int]:
    """AST depth of each program that parses; the rest (generated text may be anything) are skipped."""
    depths = []
    for program in programs:
        try:
            depths.append(ast_depth(program))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return depths


def _depth(node: ast.AST) -> int:
    """Levels below `node` (a module's own node is not counted)."""
    # Iterative, so a pathologically nested program cannot blow the Python stack.
    deepest, stack = 0, [(node, 0)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(current))
    return deepest


def _block_complexity(block) -> int:
    return block.complexity + sum(_block_complexity(c) for c in getattr(block, "closures", []))


def _bound_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names
