"""`popula verify TASKS.jsonl [--out FILE] [--workers N]`: validate tasks, judge answers.

Writes one result line (docs/design.md § Task records) per record, in input order, to stdout or --out, and a
summary line to stderr (valid n/N, correct n/M, tasks/s). A progress bar (stderr)
appears for files big enough to wait on. A bad record is that record's problem: a line
that is no record (reason "malformed") or is over the sandbox's caps ("too_large") gets
an invalid result naming its line and why, and the rest of the file is judged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from popula.cli.help import add_command
from popula.errors import PopulaError
from popula.records import RecordFault, TaskRecord, VerifyResult, json_line, scan_records, write_jsonl
from popula.sandbox import Limits, Sandbox

_PROGRESS_FROM = 500  # records; smaller files finish before a bar is worth drawing


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "verify",
        examples=['popula verify samples/tasks.jsonl', 'popula verify samples/tasks.jsonl --out results.jsonl --workers 2'],
        help="validate tasks and judge answers in the sandbox",
        description=(
            "Validate the task records of a JSONL file in the sandbox (parse, policy, limits, "
            "determinism), fill in their outputs, and judge any answers. One JSON result per "
            "record, same order; a summary on stderr. Answers are data: a code_o answer must be a "
            "literal value (e.g. [1, 'a', (2.5, None)], {nan}, frozenset({1})) and a code_i answer an "
            "argument list of literal values (e.g. [3, 1], key='x'); they are compared outside the "
            "jail and never run, and anything else is judged wrong with answer_reason "
            "'not_a_value'. A code_f answer is a program defining f, run on the hidden inputs."
        ),
    )
    parser.add_argument("tasks", metavar="TASKS.jsonl", help="task records, one JSON object per line")
    parser.add_argument("--out", metavar="FILE", help="write results here instead of stdout")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="sandbox workers running at once (default: the number of CPU cores)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise PopulaError(f"--workers must be at least 1, got {workers}")
    if args.out:
        _check_out(Path(args.out), Path(args.tasks))
    limits = Limits()
    entries = scan_records(args.tasks, max_line_bytes=limits.max_record_bytes)
    records = [entry for entry in entries if isinstance(entry, TaskRecord)]
    start = time.perf_counter()
    judged = _judge(records, workers, limits)
    results = [entry.verdict() if isinstance(entry, RecordFault) else next(judged) for entry in entries]
    elapsed = time.perf_counter() - start
    rows = [result.to_json() for result in results]
    if args.out:
        try:
            write_jsonl(args.out, rows)
        except OSError as err:
            raise PopulaError(f"{args.out}: cannot write the results ({err.strerror or err})") from None
    else:
        out = sys.stdout
        encoding = getattr(out, "encoding", None) or "utf-8"
        for row in rows:  # a lone surrogate in a result is written as the JSON escape \ud800
            out.write(json_line(row, encoding) + "\n")
        out.flush()
    valid = sum(r.valid for r in results)
    answered = [r for r in results if r.correct is not None]
    correct = sum(bool(r.correct) for r in answered)
    rate = len(records) / elapsed if elapsed > 0 else float("inf")
    faults = len(entries) - len(records)
    refused = f", {faults} bad line{'s' * (faults != 1)} (malformed or too large)" if faults else ""
    print(
        f"popula verify: valid {valid}/{len(results)}, correct {correct}/{len(answered)}{refused}, "
        f"{rate:.0f} tasks/s ({elapsed:.2f} s, {workers} workers)",
        file=sys.stderr,
    )
    return 0


def _judge(records: list[TaskRecord], workers: int, limits: Limits) -> Iterator[VerifyResult]:
    """The sandbox's results for `records`, in order (no sandbox starts for none)."""
    if not records:
        return iter(())
    bar = None
    if len(records) >= _PROGRESS_FROM:
        from tqdm import tqdm

        bar = tqdm(total=len(records), unit="task", file=sys.stderr, desc="verify")
    try:
        with Sandbox(workers=workers, limits=limits) as sandbox:
            return iter(sandbox.verify(records, progress=bar.update if bar else None))
    finally:
        if bar is not None:
            bar.close()


def _check_out(out: Path, tasks: Path) -> None:
    """Refuse an --out that cannot take the results, before any work is done (and so before
    anything is written): a missing directory, a directory, or the input file itself (which
    the results would replace)."""
    parent = out.resolve().parent
    if not parent.is_dir():
        raise PopulaError(f"--out {out}: the directory {parent} does not exist")
    if out.is_dir():
        raise PopulaError(f"--out {out} is a directory; give a file name for the results, e.g. {out / 'results.jsonl'}")
    same = out.resolve() == tasks.resolve()
    if not same and out.exists() and tasks.exists():
        same = os.path.samefile(out, tasks)  # a hard or symbolic link to the input
    if same:
        raise PopulaError(f"--out {out} is the input file {tasks}; the results would overwrite the tasks. "
                          "Write them to another file")
