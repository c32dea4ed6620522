"""Convert a code benchmark's JSONL into Popula task records (docs/design.md § Task records) for `popula eval`.

    python3 scripts/convert_benchmark.py --format humaneval HumanEval.jsonl.gz humaneval_tasks.jsonl
    popula eval RUN_DIR --tasks humaneval_tasks.jsonl --samples 4

Formats (one JSON object per line, the fields each benchmark publishes):
- humaneval: task_id, prompt, canonical_solution, entry_point, test (HumanEval, HumanEval+)
- mbpp: task_id, text, code, test_list (MBPP, MBPP+)
- cruxeval: id, code, input (CRUXEval; its function is already named f)

Function-writing benchmarks become code_f tasks: the reference solution (entry function
renamed to `f`, recursion included) is the task program, the arguments of the tests'
`assert ENTRY(args) == expected` lines are its inputs (the first half is shown to the
student, the second half judges), and the description is the hint. Other assert shapes
(approximate comparisons, truthiness) are dropped; a problem with fewer than 2 usable
tests is skipped, since a code_f task needs shown and hidden pairs. CRUXEval becomes
one code_o and one code_i task per problem. Outputs are left to the sandbox: `popula
eval` computes them when it loads the file (`popula verify` shows them).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

MIN_CODE_F_INPUTS = 2


class ConversionError(ValueError):
    """A line that cannot be converted; the message names the problem."""


class _Rename(ast.NodeTransformer):
    """Rename the entry function (its def and every reference to it) to `f`."""

    def __init__(self, old: str) -> None:
        self.old = old

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if node.name == self.old:
            node.name = "f"
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.old:
            node.id = "f"
        return node


def rename_entry(source: str, entry: str) -> str:
    """`source` with function `entry` renamed to `f` (the name Popula tasks are called by)."""
    tree = ast.parse(source)
    if not any(isinstance(n, ast.FunctionDef) and n.name == entry for n in tree.body):
        raise ConversionError(f"defines no top-level function {entry!r}")
    if entry != "f" and any(isinstance(n, ast.Name) and n.id == "f" for n in ast.walk(tree)):
        raise ConversionError("already uses the name 'f', so the entry function cannot be renamed to it")
    return ast.unparse(_Rename(entry).visit(tree))


def assert_inputs(test_source: str, callers: set[str]) -> list[str]:
    """Argument lists of every `assert CALLER(args) == expected` in the tests, in order."""
    inputs = []
    for node in ast.walk(ast.parse(test_source)):
        if not isinstance(node, ast.Assert):
            continue
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            continue
        call = test.left
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in callers):
            continue
        parts = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords if k.arg]
        inputs.append(", ".join(parts))
    return list(dict.fromkeys(inputs))  # the same call twice would be shown and hidden at once


def one_line(text: str) -> str:
    """A hint on one line: docstring examples (`>>>` onwards) cut, whitespace collapsed."""
    text = re.split(r">>>|\bfor example\b|\bexample:", text, maxsplit=1, flags=re.I)[0]
    return " ".join(text.split())


def from_humaneval(row: dict[str, Any]) -> list[dict[str, Any]]:
    entry = _field(row, "entry_point", str)
    program = rename_entry(_field(row, "prompt", str) + _field(row, "canonical_solution", str), entry)
    fn = next(n for n in ast.parse(program).body if isinstance(n, ast.FunctionDef) and n.name == "f")
    inputs = assert_inputs(_field(row, "test", str), {"candidate", entry})
    return [_code_f(str(_field(row, "task_id", (str, int))), program, inputs, one_line(ast.get_docstring(fn) or ""))]


def from_mbpp(row: dict[str, Any]) -> list[dict[str, Any]]:
    tests = _field(row, "test_list", list)
    code = _field(row, "code", str)
    called = {n.func.id for t in tests for n in ast.walk(ast.parse(t))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    defined = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    entries = [name for name in defined if name in called]
    if len(entries) != 1:
        raise ConversionError(f"cannot tell the entry function: tests call {sorted(called)}, code defines {defined}")
    inputs = assert_inputs("\n".join(tests), {entries[0]})
    return [_code_f(str(_field(row, "task_id", (str, int))), rename_entry(code, entries[0]), inputs,
                    one_line(_field(row, "text", str)))]


def from_cruxeval(row: dict[str, Any]) -> list[dict[str, Any]]:
    ident = str(_field(row, "id", (str, int)))
    program, given = _field(row, "code", str), _field(row, "input", str)
    return [{"id": f"{ident}-o", "type": "code_o", "program": program, "inputs": [given]},
            {"id": f"{ident}-i", "type": "code_i", "program": program, "inputs": [given]}]


def _code_f(ident: str, program: str, inputs: list[str], message: str) -> dict[str, Any]:
    if len(inputs) < MIN_CODE_F_INPUTS:
        raise ConversionError(f"only {len(inputs)} test(s) of the form `assert f(...) == value`; "
                              f"a code_f task needs at least {MIN_CODE_F_INPUTS}")
    return {"id": ident, "type": "code_f", "program": program, "inputs": inputs, "message": message}


def _field(row: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in row:
        raise ConversionError(f"field {name!r} is missing")
    if not isinstance(row[name], kind):
        raise ConversionError(f"field {name!r} has the wrong type ({type(row[name]).__name__})")
    return row[name]


CONVERTERS = {"humaneval": from_humaneval, "mbpp": from_mbpp, "cruxeval": from_cruxeval}


def convert(lines: Iterator[str], fmt: str, source: str = "input") -> tuple[list[dict[str, Any]], list[str]]:
    """(task records, one message per skipped line naming source:line and why)."""
    records, skipped = [], []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ConversionError("not a JSON object")
            records.extend(CONVERTERS[fmt](row))
        except (json.JSONDecodeError, SyntaxError, ConversionError) as err:
            skipped.append(f"{source}:{lineno}: skipped ({err})")
    return records, skipped


def read_text(path: Path) -> str:
    """The file's text; a `.gz` file (how HumanEval and MBPP are published) is decompressed first."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", required=True, choices=sorted(CONVERTERS))
    parser.add_argument("source", help="the benchmark's JSONL file (gzipped if its name ends in .gz, as published)")
    parser.add_argument("out", help="where to write the task records")
    args = parser.parse_args(argv)
    try:
        text = read_text(Path(args.source))
    except (OSError, EOFError, UnicodeDecodeError) as err:
        print(f"convert_benchmark: error: {args.source}: {getattr(err, 'strerror', None) or err}", file=sys.stderr)
        return 2
    records, skipped = convert(iter(text.splitlines()), args.format, args.source)
    for message in skipped:
        print(message, file=sys.stderr)
    Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    print(f"convert_benchmark: wrote {len(records)} task(s) to {args.out}, skipped {len(skipped)} line(s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
