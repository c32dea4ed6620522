"""Static checks and compilation, done once per task in the pool's process.

Parsing, the forbidden-construct check and compiling are pure and deterministic, so the
pool does them once here instead of twice in the workers; the workers receive code
objects (marshalled). Nothing here executes task text: `ast.parse` and `compile` only
read it, and sources are capped in length first.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import CodeType

from popula.sandbox import rules


@dataclass(frozen=True)
class Rejection:
    """Why a piece of task text cannot run: a DESIGN 3.2 reason and a human detail."""

    reason: str
    detail: str


class _Forbidden(Exception):
    pass


def _check_tree(tree: ast.AST, skip: ast.AST | None = None) -> None:
    """Raise _Forbidden for the first construct outside the sandbox policy (rules.py)."""
    for node in ast.walk(tree):
        if node is skip:
            continue
        if isinstance(node, ast.Name):
            name = node.id
            if name in rules.REMOVED_BUILTINS:
                raise _Forbidden(f"uses the forbidden builtin {name!r} (line {node.lineno})")
            if name.startswith("__") and name.endswith("__") and name != "__name__":
                raise _Forbidden(f"uses the dunder name {name!r} (line {node.lineno})")
        elif isinstance(node, ast.Attribute):
            _check_attribute(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                _check_module(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise _Forbidden(f"uses a relative import (line {node.lineno})")
            _check_module(node.module or "", node)
            for alias in node.names:
                if alias.name.startswith("_"):
                    raise _Forbidden(f"imports the private name {alias.name!r} (line {node.lineno})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
                key = node.args[1]
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("_"):
                    raise _Forbidden(
                        f"{node.func.id} of the private attribute {key.value!r} (line {node.lineno})"
                    )


def _check_attribute(node: ast.Attribute) -> None:
    attr = node.attr
    if attr in rules.FRAME_ATTRIBUTES:
        raise _Forbidden(f"uses the attribute {attr!r} (line {node.lineno})")
    if not attr.startswith("_"):
        return
    if attr.startswith("__") and attr.endswith("__"):
        if attr not in rules.SAFE_DUNDER_ATTRIBUTES:
            raise _Forbidden(f"uses the dunder attribute {attr!r} (line {node.lineno})")
        return
    receiver = node.value
    if not (isinstance(receiver, ast.Name) and receiver.id in rules.PRIVATE_ATTRIBUTE_RECEIVERS):
        raise _Forbidden(f"uses the private attribute {attr!r} (line {node.lineno})")


def _check_module(name: str, node: ast.stmt) -> None:
    if name not in rules.ALLOWED_MODULES:
        raise _Forbidden(f"imports the module {name!r}, which the sandbox does not allow (line {node.lineno})")


def _too_long(text: str, what: str, limit: int) -> Rejection | None:
    if len(text) > limit:
        return Rejection("syntax", f"{what} has {len(text)} characters (limit {limit})")
    return None


def _parse(source: str, mode: str, what: str) -> ast.AST | Rejection:
    try:
        return ast.parse(source, mode=mode)
    except SyntaxError as err:
        return Rejection("syntax", f"{what}: {err.msg} (line {err.lineno})")
    except (ValueError, RecursionError, MemoryError, OverflowError) as err:
        return Rejection("syntax", f"{what}: {type(err).__name__}: {err}")


def _compile(tree: ast.AST, mode: str, what: str) -> CodeType | Rejection:
    try:
        return compile(tree, f"<{what}>", mode)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        return Rejection("syntax", f"{what}: {type(err).__name__}: {err}")


def compile_program(source: str, max_chars: int, what: str = "program") -> CodeType | Rejection:
    """A program that defines `f`, checked and compiled; or why not."""
    if rejected := _too_long(source, what, max_chars):
        return rejected
    tree = _parse(source, "exec", what)
    if isinstance(tree, Rejection):
        return tree
    assert isinstance(tree, ast.Module)
    if not any(_binds_f(stmt) for stmt in tree.body):
        return Rejection("no_entry_function", f"{what} defines no top-level function f")
    try:
        _check_tree(tree)
    except _Forbidden as err:
        return Rejection("forbidden", f"{what} {err}")
    return _compile(tree, "exec", what)


def _binds_f(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return stmt.name == "f"
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "f" for t in stmt.targets)
    return False


def compile_arguments(source: str, max_chars: int, what: str = "input") -> CodeType | Rejection:
    """An argument list `a, b=c` as an expression returning (args, kwargs); or why not.

    The text is wrapped as `ARGS(<text>)`; the parsed tree must be exactly that one call,
    so an input like `1), evil(` cannot smuggle a second expression out of the parentheses.
    """
    if rejected := _too_long(source, what, max_chars):
        return rejected
    tree = _parse(f"{rules.ARGS_NAME}(\n{source}\n)", "eval", what)
    if isinstance(tree, Rejection):
        return tree
    assert isinstance(tree, ast.Expression)
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == rules.ARGS_NAME):
        return Rejection("syntax", f"{what} is not an argument list")
    try:
        _check_tree(tree, skip=call.func)
    except _Forbidden as err:
        return Rejection("forbidden", f"{what} {err}")
    return _compile(tree, "eval", what)


def compile_expression(source: str, max_chars: int, what: str = "answer") -> CodeType | Rejection:
    """A single expression (a code_o answer that is not a plain literal); or why not."""
    if rejected := _too_long(source, what, max_chars):
        return rejected
    tree = _parse(source.strip(), "eval", what)
    if isinstance(tree, Rejection):
        return tree
    try:
        _check_tree(tree)
    except _Forbidden as err:
        return Rejection("forbidden", f"{what} {err}")
    return _compile(tree, "eval", what)
