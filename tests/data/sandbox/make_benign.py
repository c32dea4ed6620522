"""Writes benign.jsonl: benign programs with outputs computed by plain CPython, outside the jail.

    PYTHONPATH=. python3 tests/data/sandbox/make_benign.py

Sources: the project's random program generator (300 tasks, a fixed seed), the
real-world programs of realworld.jsonl, and hand-written programs that exercise what the
jail once got wrong (codecs, annotations, NamedTuple/TypedDict, underscore strings, small
int sets). Each program runs here in an ordinary namespace with ordinary builtins
(`exec` + `eval` of the input, one fresh namespace per input), and its outputs are
stored as reprs; test_sandbox_probes.py requires the sandbox to give exactly these.
Programs whose output CPython itself cannot give twice alike are not benign and left out.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from popula.tasks.generator import generate_tasks  # noqa: E402

HANDWRITTEN = [
    ("def f(b):\n    return b.decode('cp1252')", ["b'\\x80abc'", "b'caf\\xe9'"]),
    ("def f(s):\n    return s.encode('utf-16-le')", ["'hi'", "'\\u00e9'"]),
    ("def f(s):\n    return s.encode('shift_jis')", ["'\\u3042'"]),
    ("def f(s):\n    return s.encode('idna')", ["'b\\u00fccher.example'"]),
    ("def f(s):\n    return s.encode('unicode_escape')", ["'a\\nb\\u00e9'"]),
    ("def f(b):\n    return b.decode('unicode_escape')", ["b'a\\\\nb'"]),
    ("def f(s):\n    return [s.encode(c) for c in ('latin-1', 'cp437', 'koi8_r', 'mac_roman', 'utf-7')]", ["'abc'"]),
    ("def f(s):\n    return s.encode('gb2312'), s.encode('big5'), s.encode('euc_kr')", ["'\\u4e2d'"]),
    ("class A:\n    x: int = 0\n    def get(self):\n        return self.x + 1\ndef f(n):\n    a = A()\n    a.x = n\n    return a.get()", ["4"]),
    ("X: int = 3\ndef f(n: int) -> int:\n    y: int = n * X\n    return y", ["5"]),
    ("from typing import NamedTuple\nclass P(NamedTuple):\n    x: int\n    y: int = 2\ndef f(a):\n    return tuple(P(a))", ["1"]),
    ("from typing import TypedDict\nclass D(TypedDict):\n    a: int\ndef f(v):\n    return dict(D(a=v))", ["7"]),
    ("def f(s):\n    return s.replace('_____', '-')", ["'a_____b'"]),
    ("def f(n):\n    return '_' * n + '__init__'.strip('_')", ["3"]),
    ("def f(xs):\n    return list(set(xs))", ["[3, 1, 2, 1]", "[10, 5, 7]"]),
    ("def f(xs):\n    return sorted(set(xs))", ["['pear', 'fig', 'apple']"]),
    ("def f(s):\n    return ''.join(c for c in s if c not in set('aeiou'))", ["'education'"]),
    ("class Node:\n    def __init__(self, v):\n        self._v = v\n    def value(self):\n        return self._v\ndef f(n):\n    return Node(n).value()", ["9"]),
    ("def f(n):\n    return '{:>5}|{:.2f}'.format(n, n / 3)", ["7"]),
    ("def f(d):\n    return '{a}-{b}'.format_map(d)", ["{'a': 1, 'b': 2}"]),
    ("def f(x):\n    match x:\n        case [a, b]:\n            return a + b\n        case {'k': v}:\n            return v\n        case _:\n            return None", ["[1, 2]", "{'k': 5}", "3"]),
    ("def f(n):\n    return hash(n), hash((1, 2.5)), hash(None) == hash(None)", ["12"]),
    ("import functools\ndef deco(fn):\n    @functools.wraps(fn)\n    def inner(*a):\n        return fn(*a) * 2\n    return inner\n@deco\ndef g(x):\n    return x + 1\ndef f(x):\n    return g(x), g.__name__", ["3"]),
    ("import enum\nclass C(enum.Enum):\n    RED = 1\n    BLUE = 2\ndef f(n):\n    return C(n).name", ["2"]),
    ("from collections import Counter\ndef f(s):\n    return Counter(s).most_common(2)", ["'mississippi'"]),
    ("import decimal\ndef f(a, b):\n    return str(decimal.Decimal(a) / decimal.Decimal(b))", ["'1', '3'"]),
    ("import statistics\ndef f(xs):\n    return statistics.median(xs), statistics.mean(xs)", ["[1, 5, 3, 9]"]),
    ("import re\ndef f(s):\n    return re.findall(r'[a-z]+\\d', s)", ["'ab1 cd2 ef'"]),
    ("import json\ndef f(d):\n    return json.dumps(d, sort_keys=True)", ["{'b': [1, 2], 'a': None}"]),
]


def run_cpython(program: str, inputs: list[str]) -> list[str] | None:
    outs = []
    for text in inputs:
        scope: dict = {"__name__": "__popula_task__"}
        exec(compile(program, "<program>", "exec"), scope)
        args, kwargs = eval(compile(f"(lambda *a, **k: (a, k))(\n{text}\n)", "<input>", "eval"), scope)
        outs.append(repr(scope["f"](*args, **kwargs)))
    return outs


def main() -> None:
    items = [(p, i) for p, i in HANDWRITTEN]
    for line in (HERE / "realworld.jsonl").read_text().splitlines():
        rec = json.loads(line)
        items.append((rec["program"], rec["inputs"]))
    for task in generate_tasks(300, seed=18, verify=False, namespace="benign"):
        items.append((task.program, list(task.inputs)))
    rows = []
    for program, inputs in items:
        try:
            first, second = run_cpython(program, inputs), run_cpython(program, inputs)
        except Exception:
            continue  # raises in CPython: not a benign program with an output
        if first != second:
            continue
        rows.append({"program": program, "inputs": inputs, "outputs": first})
    with open(HERE / "benign.jsonl", "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} benign programs to {HERE / 'benign.jsonl'}")


if __name__ == "__main__":
    main()
