"""Parsing generated Python without CPython's SyntaxWarnings.

A small model writes `1if x else 2` and `[1 2]` by the dozen; `ast.parse` then prints
"invalid decimal literal" or "perhaps you missed a comma?" to stderr, which reached the run's
console and every benchmark's table. Measuring a program is not the place to warn about it
(the sandbox compiles quietly too: popula/sandbox/policy.py, `_quiet_compile`).
"""

from __future__ import annotations

import ast
import warnings


def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, SyntaxWarnings silenced; raises as it does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(source)
