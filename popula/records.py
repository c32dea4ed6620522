"""Task records and verification results: the JSONL contract of docs/design.md § Task records.

A task record is what teachers propose, what the buffer stores and what `popula verify`
reads. Records are validated once, when they enter the program (from a file or from a
teacher), so the rest of the code can trust their shape.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, get_args

from popula.errors import PopulaError
from popula.kinds import get_kind, task_types

TaskType = str  # a registered task kind's name (popula/kinds)

Reason = Literal[
    "syntax",
    "no_entry_function",
    "forbidden",
    "timeout",
    "memory",
    "runtime_error",
    "nondeterministic",
    "unrepresentable",
    "output_too_large",
    "not_a_value",  # an answer only: a code_o/code_i answer that is not literal values (never run)
    "too_long",  # valid to the sandbox, but its student prompt and answer exceed the model's context
    "trivial",  # valid to the sandbox, but answered without reading it (rewards.refuse_trivial; TaskKind.trivial_fault)
    "malformed",  # `popula verify` only: a line that is no task record (not JSON, a field missing or wrong, ...)
    "too_large",  # a record over the sandbox's caps (bytes per record, inputs per task): refused before any work
]
REASONS: tuple[str, ...] = get_args(Reason)


@dataclass
class TaskRecord:
    """One task. `inputs` are argument lists as Python source, so `f(<input>)` runs it.

    `type` names a registered task kind (popula/kinds), which says how many inputs it
    carries: code_o and code_i one; code_f several (half shown to the student, half hidden
    to judge it). `outputs` are reprs of `f(<input>)`, filled in by the sandbox. `answer`
    is an optional student answer to judge, in the kind's answer form: an expression
    (code_o), an argument list (code_i) or a program defining `f` (code_f).
    """

    id: str
    type: TaskType
    program: str
    inputs: list[str]
    outputs: list[str] = field(default_factory=list)
    message: str = ""
    answer: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "extra"}
        if data["answer"] is None:
            del data["answer"]
        data.update(self.extra)
        return data


@dataclass
class VerifyResult:
    """The verdict on one record, one line of `popula verify` output.

    `valid` says whether the task itself is sound (parses, runs, is deterministic);
    `correct` judges the record's answer, and is None when it has none or the task is
    invalid. `id` is None only for a line of a task file whose id could not be read
    (RecordFault).

    Extension of the line of docs/design.md § Task records: `answer_reason` is None when the answer produced a
    value that was compared (right or wrong), and otherwise says why it could not
    (one of REASONS: "not_a_value", "syntax" or "forbidden" for a malformed answer, "timeout",
    "runtime_error", ... for one that failed to run); `answer_detail` explains it.
    Rewards use it to tell a malformed answer from a wrong one.
    """

    id: str | None
    valid: bool
    reason: Reason | None = None
    detail: str = ""
    outputs: list[str] = field(default_factory=list)
    correct: bool | None = None
    answer_reason: Reason | None = None
    answer_detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_KNOWN_FIELDS = {"id", "type", "program", "inputs", "outputs", "message", "answer"}


def parse_record(obj: Any, where: str) -> TaskRecord:
    """Validate one decoded JSON object; `where` (e.g. "tasks.jsonl:3") prefixes errors.

    Unknown fields are kept in `extra` (the task buffer adds step, teacher, rho) so
    records round-trip without loss.
    """
    if not isinstance(obj, dict):
        raise PopulaError(f"{where}: a task record must be a JSON object, got {type(obj).__name__}")

    def need(name: str, kind: type | tuple[type, ...], required: bool = True) -> Any:
        if name not in obj:
            if required:
                raise PopulaError(f"{where}: field '{name}' is missing")
            return None
        value = obj[name]
        if not isinstance(value, kind):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            wanted = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise PopulaError(f"{where}: field '{name}' must be {wanted}, got {type(value).__name__}")
        return value

    record_id = obj.get("id")
    if not isinstance(record_id, (str, int)) or isinstance(record_id, bool):
        raise PopulaError(f"{where}: field 'id' must be a string (or integer)")
    task_type = need("type", str)
    if task_type not in task_types():
        raise PopulaError(
            f"{where}: field 'type' is {task_type!r}; expected one of {', '.join(task_types())}"
        )
    program = need("program", str)
    inputs = need("inputs", list)
    outputs = need("outputs", list, required=False) or []
    for name, values in (("inputs", inputs), ("outputs", outputs)):
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise PopulaError(
                    f"{where}: field '{name}[{i}]' must be a string of Python source, "
                    f"got {type(value).__name__}"
                )
    if not inputs:
        raise PopulaError(f"{where}: field 'inputs' is empty; a task needs at least one input")
    if (fault := get_kind(task_type).inputs_fault(len(inputs))) is not None:
        raise PopulaError(f"{where}: field 'inputs' {fault}")
    if outputs and len(outputs) != len(inputs):
        raise PopulaError(
            f"{where}: field 'outputs' has {len(outputs)} entries for {len(inputs)} inputs"
        )
    # null means "none" for the optional text fields: no hint, no answer to judge.
    message = need("message", (str, type(None)), required=False) or ""
    answer = need("answer", (str, type(None)), required=False)
    extra = {k: v for k, v in obj.items() if k not in _KNOWN_FIELDS}
    return TaskRecord(
        id=str(record_id),
        type=task_type,
        program=program,
        inputs=list(inputs),
        outputs=list(outputs),
        message=message,
        answer=answer,
        extra=extra,
    )


@dataclass
class RecordFault:
    """A line of a task file that holds no record to judge: its id when one could be read,
    and why (reason "malformed" or "too_large"; `detail` starts with the file and line)."""

    id: str | None
    reason: Reason
    detail: str

    def verdict(self) -> VerifyResult:
        """Its line of `popula verify` output: an invalid record, with the reason."""
        return VerifyResult(id=self.id, valid=False, reason=self.reason, detail=self.detail)


def read_records(path: str | Path) -> list[TaskRecord]:
    """Read a JSONL task file; blank lines are skipped, any other fault names its line.

    Faults that would otherwise pass silently are errors too: a key given twice in one
    object (JSON keeps the last, so the first value would vanish), two records with one id
    (their results could not be told apart) and a file without a single record. The first
    fault raises PopulaError; `scan_records` reports them per record instead.
    """
    records = []
    for entry in scan_records(path):
        if isinstance(entry, RecordFault):
            raise PopulaError(entry.detail)
        records.append(entry)
    return records


@contextmanager
def task_file(path: str | Path) -> Iterator[BinaryIO]:
    """A task file open for reading. Failing to open or read it, inside the block too, is one
    PopulaError naming the file: no such task file, or cannot read it. `popula eval` opens
    it this way before its model loads, so a wrong path is refused at once."""
    try:
        with Path(path).open("rb") as fh:
            yield fh
    except FileNotFoundError:
        raise PopulaError(f"{path}: no such task file") from None
    except OSError as err:
        raise PopulaError(f"{path}: cannot read task file ({err})") from None


def scan_records(path: str | Path, max_line_bytes: int | None = None) -> list[TaskRecord | RecordFault]:
    """Each record of a JSONL task file, in order, or the fault that keeps its line from
    being one (as read_records words it): a bad line is that line's problem, and the rest
    of the file is still read. A line over `max_line_bytes` is a "too_large" fault, skipped
    unparsed, so an oversized record costs no parsing. Only what spoils the whole file raises
    PopulaError: no such file, unreadable, or no record at all."""
    path = Path(path)
    with task_file(path) as fh:
        entries, blank = _scan(fh, str(path), max_line_bytes)
    if not entries:
        what = "holds only blank lines" if blank else "is empty"
        raise PopulaError(f"{path}: no task records (the file {what}); write one JSON object per line")
    return entries


def _scan(fh: BinaryIO, name: str, max_line_bytes: int | None) -> tuple[list[TaskRecord | RecordFault], bool]:
    """scan_records on an open file: (entries, whether a blank line was seen)."""
    entries: list[TaskRecord | RecordFault] = []
    first_line: dict[str, int] = {}
    blank = False
    for lineno, (raw, length) in enumerate(_raw_lines(fh, max_line_bytes), start=1):
        where = f"{name}:{lineno}"
        if raw is None:
            entries.append(RecordFault(None, "too_large", f"{where}: the record is {length} bytes long "
                                       f"(limit {max_line_bytes}); it was skipped unparsed"))
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            entries.append(RecordFault(None, "malformed", f"{where}: not UTF-8 text ({err.reason} at byte {err.start})"))
            continue
        if not line.strip():
            blank = True
            continue
        entry = _parse_line(line, where)
        if isinstance(entry, TaskRecord):
            if entry.id in first_line:
                entry = RecordFault(entry.id, "malformed", f"{where}: id {entry.id!r} is already the id of line "
                                    f"{first_line[entry.id]}; every record needs its own id")
            else:
                first_line[entry.id] = lineno
        entries.append(entry)
    return entries, blank


def _raw_lines(fh: BinaryIO, cap: int | None) -> Iterator[tuple[bytes | None, int]]:
    """Each line of `fh` without its newline, with its length in bytes; a line longer than
    `cap` comes as None, and the rest of it is skipped in small chunks, never held whole."""
    while True:
        raw = fh.readline(-1 if cap is None else cap + 2)  # room for the newline ("\r\n" at most)
        if not raw:
            return
        length = _content_length(raw)
        if cap is None or length <= cap:
            yield raw[:length], length
            continue
        while not raw.endswith(b"\n"):
            raw = fh.readline(1 << 16)
            if not raw:
                break
            length += _content_length(raw)
        yield None, length


def _content_length(raw: bytes) -> int:
    """len(raw) without its line ending, computed without a copy of `raw`."""
    n = len(raw)
    while n and raw[n - 1] in b"\r\n":
        n -= 1
    return n


def _parse_line(line: str, where: str) -> TaskRecord | RecordFault:
    """One non-blank line as a record, or its fault (its id kept when it could be read)."""
    try:
        obj = json.loads(line, object_pairs_hook=_no_repeated_keys)
    except json.JSONDecodeError as err:
        return RecordFault(None, "malformed", f"{where}: not valid JSON ({err.msg} at column {err.colno})")
    except _RepeatedKey as err:
        return RecordFault(None, "malformed", f"{where}: key {err.key!r} appears twice in one object; keep one")
    try:
        return parse_record(obj, where)
    except PopulaError as err:
        record_id = obj.get("id") if isinstance(obj, dict) else None
        readable = isinstance(record_id, (str, int)) and not isinstance(record_id, bool)
        return RecordFault(str(record_id) if readable else None, "malformed", str(err))


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _RepeatedKey(key)
        obj[key] = value
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_line(row: dict[str, Any], encoding: str = "utf-8") -> str:
    """One row as a line of JSON (no newline) that `encoding` can always write.

    Text is kept as it is (ensure_ascii=False), except what the encoding cannot hold: a lone
    surrogate ('\\ud800', which a program, an input, an answer or an error message may
    carry) becomes the JSON escape \\ud800, which reads back as the same string; for an
    encoding other than UTF-8, a row it cannot hold is written with every non-ASCII
    character escaped. (A high surrogate followed by a low one reads back as the one
    character they encode, as JSON has it.)"""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode(encoding)
        return text
    except UnicodeEncodeError:
        pass
    try:
        utf8 = codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        utf8 = False
    if utf8:  # only surrogates fail; outside strings JSON text is ASCII
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return json.dumps(row)


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSONL (json_line), atomically: a crash never leaves half a file behind.

    The rows go to a new temporary file beside `path` (created with O_EXCL, so never an
    existing file), which is renamed over `path`, or removed if anything fails.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for row in rows:
                out.write(json_line(row) + "\n")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
