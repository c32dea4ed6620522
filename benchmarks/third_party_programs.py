"""Are third-party programs judged like CPython? CRUXEval's 800 functions through the sandbox.

    python3 benchmarks/third_party_programs.py --data cruxeval.jsonl [--workers 2]

CRUXEval (Gu et al. 2024, MIT licence; `data/cruxeval.jsonl` of
github.com/facebookresearch/cruxeval, not shipped here) holds 800 short Python functions,
each with one input and the output CPython gives. They were written by a code model and
filtered by people, with no sandbox in mind: a fair sample of what teachers propose. Each
becomes two records:
- code_o: the program and its input, answered with CRUXEval's output. Valid and correct
  means the sandbox ran it, found it deterministic, and got CPython's exact value.
- code_i: the program and its input, answered with that input. Correct means the answer
  was judged by running the program on it. An input that is an expression rather than a
  literal (`'a' * 3`) is judged `not_a_value`, as answers are data (docs/security.md).

Prints a table of verdicts, every refusal with its reason, and, as its last line, one
JSON object. Run it as root and as an ordinary account (and under `ulimit -Sn 1024`):
the figures must be the same.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.exits import run_script  # noqa: E402
from popula.records import TaskRecord  # noqa: E402
from popula.sandbox import Sandbox  # noqa: E402


def records(rows: list[dict]) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """(code_o records answered with the output, code_i records answered with the input)."""
    outputs = [TaskRecord(id=r["id"], type="code_o", program=r["code"], inputs=[r["input"]], answer=r["output"])
               for r in rows]
    inputs = [TaskRecord(id=r["id"], type="code_i", program=r["code"], inputs=[r["input"]], answer=r["input"])
              for r in rows]
    return outputs, inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="CRUXEval's data/cruxeval.jsonl")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"no file {args.data} (get data/cruxeval.jsonl from github.com/facebookresearch/cruxeval)")
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    code_o, code_i = records(rows)
    with Sandbox(workers=args.workers) as sandbox:
        start = time.perf_counter()
        judged_o = sandbox.verify(code_o)
        judged_i = sandbox.verify(code_i)
        seconds = time.perf_counter() - start
    figures = {
        "programs": len(rows),
        "valid": sum(r.valid for r in judged_o),
        "exact_outputs": sum(bool(r.correct) for r in judged_o),
        "code_i_correct": sum(bool(r.correct) for r in judged_i),
        "code_i_not_a_value": sum(r.answer_reason == "not_a_value" for r in judged_i),
        "code_i_wrong": sum(r.correct is False and r.answer_reason != "not_a_value" for r in judged_i),
        "seconds": round(seconds, 2),
        "uid": os.getuid(),
    }
    print(f"CRUXEval through the sandbox ({len(rows)} programs, {args.workers} workers, uid {os.getuid()})")
    print(f"  valid (ran, deterministic):        {figures['valid']}/{len(rows)}")
    print(f"  output exactly CPython's:          {figures['exact_outputs']}/{len(rows)}")
    print(f"  code_i answer judged correct:      {figures['code_i_correct']}/{len(rows)}"
          f"  ({figures['code_i_not_a_value']} inputs are expressions, not values)")
    refusals = collections.Counter(r.reason for r in judged_o if not r.valid)
    wrong = [r for r in judged_o if r.valid and not r.correct]
    for reason, count in refusals.most_common():
        print(f"  refused, {reason}: {count}")
    for r in [r for r in judged_o if not r.valid][:10] + wrong[:10]:
        print(f"    {r.id}: {r.reason or 'wrong output'} {r.detail or r.outputs}"[:160])
    print(json.dumps(figures))


if __name__ == "__main__":
    run_script(main)
