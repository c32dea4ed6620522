"""What the sandbox must run for one record, decided before anything runs.

A record without outputs is a task to validate: its program and inputs are checked and
compiled here, then run on two different workers (more for a task that builds sets or
reads a masked id or hash, see pool.py), each run in a fresh process of its own
(zygote.py). A record that already carries outputs was validated earlier: only what
judging needs is run. Answers are data, judged by this (trusted) side in the answer form
of the record's task kind (popula/kinds; a kind picks a form, it adds no judging of its own):
- "value" (code_o): the answer must be a literal value (values.read_value); it is
  compared here and nothing runs at all;
- "arguments" (code_i): the answer must be an argument list of literal values
  (values.read_arguments); the task's program runs on those values, written back as
  literal source here (`literal_source`), so no answer text is ever executed;
- "program" (code_f): the student's program runs on the hidden inputs (the second half of
  inputs), on workers that run students' programs only (they never hold a teacher's program).
An answer that is not a value gets answer_reason "not_a_value" and never runs.

Every job has one shape: a program and a list of argument lists, nothing else (no kind,
no record, no expected output). A teacher's program runs twice in a task's life, when it
is validated and when a code_i answer is judged, and the two jobs look alike: validation
runs the task's inputs with one of them repeated at a random place, judging runs the same
inputs with the answer at that place (`Slotted`). A program that escaped the policy and
tells the two apart learns only whether the extra input equals its own, which a pure
program can test too; and what it returns for its own inputs when judged must equal its
validated outputs, else the task is invalid (verdict.py). An answer's runs follow the
task's rules for determinism (pool.py): runs that disagree make the answer wrong, so the
same record always gets the same verdict.
"""

from __future__ import annotations

import functools
import math
import secrets
from dataclasses import dataclass
from types import CodeType
from typing import Any

from popula.kinds import get_kind
from popula.records import TaskRecord
from popula.sandbox import policy
from popula.sandbox.limits import Limits
from popula.sandbox.policy import Rejection
from popula.sandbox.values import NotAValue, read_arguments, read_value

# A job for a worker: the program's code and its argument lists' code, in the order they run.
Job = tuple[CodeType, list[CodeType]]

_NO_VALUE = object()


@dataclass(frozen=True)
class Slotted:
    """Where a job's extra argument list sits among the task's own: the repeated input of an
    "arguments" task's validation, or the answer when such a task is judged (module doc)."""

    slot: int

    def place(self, own: list[str], extra: str) -> list[str]:
        """The argument lists' texts in the order the job runs them (compiled in one go, so
        the extra one's code differs from a task input's only as its text does)."""
        return [*own[: self.slot], extra, *own[self.slot :]]

    def split(self, outputs: list[str]) -> tuple[list[str], str]:
        """(the outputs of the task's own inputs, the extra one's output)."""
        return [*outputs[: self.slot], *outputs[self.slot + 1 :]], outputs[self.slot]


@dataclass
class Plan:
    record: TaskRecord
    invalid: Rejection | None = None
    validate: Job | None = None  # run on two or more workers when set
    validate_slot: Slotted | None = None  # an "arguments" task's repeated input (module doc)
    order_sensitive: bool = False  # builds sets: validated on more workers (pool.py)
    answer_value: Any = _NO_VALUE  # a "value" answer (code_o) read as a literal
    answer_job: Job | None = None  # an "arguments" or "program" answer's runs (pool.py decides how many)
    answer_order_sensitive: bool = False  # its code builds sets: as many runs as validation's
    answer_by_student: bool = False  # runs a student's program: on student workers only
    answer_slot: Slotted | None = None  # an "arguments" answer's place among the task's inputs
    answer_rejection: Rejection | None = None

    @property
    def has_answer_value(self) -> bool:
        return self.answer_value is not _NO_VALUE


def hidden_split(n_inputs: int) -> int:
    """Index of the first hidden input of a task judged by a "program" answer (code_f): the second half is hidden."""
    return n_inputs // 2


@functools.lru_cache(maxsize=4096)
def not_a_value(outputs: tuple[str, ...]) -> Rejection | None:
    """Why the first output that is not a value fails to read; cached, as the rollouts of one
    task are judged against the same outputs."""
    for i, output in enumerate(outputs):
        try:
            read_value(output)
        except NotAValue as err:
            return Rejection("unrepresentable", f"outputs[{i}] ({output[:60]!r}) is not a Python value ({err}); "
                             "correct it, or leave 'outputs' out to have the sandbox compute them")
    return None


def plan_record(record: TaskRecord, limits: Limits) -> Plan:
    """Check and compile what `record` needs; decide which runs it takes (module doc)."""
    plan = Plan(record)
    if len(record.inputs) > limits.max_inputs:  # refused before any of it is compiled or read
        plan.invalid = Rejection("too_large", f"the task has {len(record.inputs)} inputs (limit {limits.max_inputs})")
        return plan
    cap = limits.max_source_chars
    program: CodeType | None = None
    arg_codes: list[CodeType] | None = None

    def task_program() -> CodeType | None:
        nonlocal program
        if program is None and plan.invalid is None:
            compiled = policy.compile_program(record.program, cap)
            if isinstance(compiled, Rejection):
                plan.invalid = compiled
            else:
                program = compiled
        return program

    def task_args() -> list[CodeType] | None:
        nonlocal arg_codes
        if arg_codes is None and plan.invalid is None:
            compiled = policy.compile_argument_lists(record.inputs, cap)
            if isinstance(compiled, Rejection):
                plan.invalid = compiled
            else:
                arg_codes = compiled
        return arg_codes

    if record.outputs:
        # Given outputs are trusted to be the task's values; one that is not a value (a default
        # object repr, a typo) could never be matched, so the task is invalid, not silently unsolvable.
        if (bad := not_a_value(tuple(record.outputs))) is not None:
            plan.invalid = bad
            return plan
    if not record.outputs:
        code, args = task_program(), task_args()
        if plan.invalid is not None:
            return plan
        assert code is not None and args is not None
        plan.order_sensitive = policy.order_sensitive(code) or any(policy.order_sensitive(a) for a in args)
        if get_kind(record.type).answer == "arguments" and args:
            plan.validate_slot = Slotted(secrets.randbelow(len(args) + 1))
            slotted = policy.compile_argument_lists(plan.validate_slot.place(list(record.inputs), record.inputs[0]), cap)
            assert not isinstance(slotted, Rejection)  # the same texts compiled alone
            args = slotted
        plan.validate = (code, args)
    if record.answer is None:
        return plan
    answer = record.answer
    form = get_kind(record.type).answer
    if len(answer) > cap:
        plan.answer_rejection = Rejection("syntax", f"answer has {len(answer)} characters (limit {cap})")
    elif form == "value":
        try:
            plan.answer_value = read_value(answer)
        except NotAValue as err:
            plan.answer_rejection = _not_a_value_answer(answer, "a literal value", err)
    elif form == "arguments":
        code, own = task_program(), task_args()
        if code is None or own is None:
            return plan
        try:
            args, kwargs = read_arguments(answer)
        except NotAValue as err:
            plan.answer_rejection = _not_a_value_answer(answer, "an argument list of literal values", err)
            return plan
        slot = Slotted(secrets.randbelow(len(own) + 1))
        compiled = policy.compile_argument_lists(slot.place(list(record.inputs), argument_source(args, kwargs)), cap)
        if isinstance(compiled, Rejection):  # a value too large or deep to write back as source
            plan.answer_rejection = Rejection(compiled.reason, f"the answer, written back as a value: {compiled.detail}")
            return plan
        plan.answer_slot = slot
        plan.answer_job = (code, compiled)
        plan.answer_order_sensitive = policy.order_sensitive(code) or any(map(policy.order_sensitive, compiled))
    else:  # "program"
        codes = task_args()
        if codes is None:
            return plan
        student = policy.compile_program(answer, cap, what="answer")
        if isinstance(student, Rejection):
            plan.answer_rejection = student
        else:
            hidden = codes[hidden_split(len(codes)):]
            plan.answer_job = (student, hidden)
            plan.answer_order_sensitive = policy.order_sensitive(student) or any(map(policy.order_sensitive, hidden))
            plan.answer_by_student = True
    return plan


def _not_a_value_answer(answer: str, wanted: str, err: NotAValue) -> Rejection:
    return Rejection("not_a_value", f"the answer {answer[:60]!r} is not {wanted} ({err}); answers are data, never run")


def literal_source(value: Any) -> str:
    """Python source that evaluates to `value`, a value read by values.read_value, using no
    name but float, complex, set and frozenset: how a code_i answer reaches the task's
    program as an argument list like its own inputs, without its text ever running."""
    kind = type(value)
    if kind is float:
        return f"float({repr(value)!r})" if math.isnan(value) or math.isinf(value) else repr(value)
    if kind is complex:
        return f"complex({literal_source(value.real)}, {literal_source(value.imag)})"
    if kind is list:
        return "[" + ", ".join(map(literal_source, value)) + "]"
    if kind is tuple:
        return "(" + "".join(literal_source(v) + ", " for v in value) + ")"
    if kind is dict:
        return "{" + ", ".join(f"{literal_source(k)}: {literal_source(v)}" for k, v in value.items()) + "}"
    if kind is set:
        return "{" + ", ".join(map(literal_source, value)) + "}" if value else "set()"
    if kind is frozenset:
        return "frozenset({" + ", ".join(map(literal_source, value)) + "})" if value else "frozenset()"
    return repr(value)  # None, bool, int, str, bytes: their reprs are literals


def argument_source(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """An argument list (what goes inside `f(...)`) of literal_source values."""
    return ", ".join([*map(literal_source, args), *(f"{k}={literal_source(v)}" for k, v in kwargs.items())])
