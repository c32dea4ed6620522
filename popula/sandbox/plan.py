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
is validated and when code_i answers are judged, and the two jobs look alike (`Slotted`):
the task's inputs with EXTRAS more argument lists at random places. When validated, the
extras repeat randomly drawn inputs of its own; when judged, they are up to EXTRAS answers
(of any of its students' rollouts, `judge_together`), the places left filled with repeats.
A program that escaped the policy and tells the two apart learns only whether an extra
input equals one of its own, which a pure program can test too; and what it returns for
its own inputs and their repeats when judged must equal its validated outputs, else the
task is invalid (verdict.py). An answer's runs follow the task's rules for determinism
(pool.py): runs that disagree make the task invalid, so the same record always gets the
same verdict.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
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


EXTRAS = 8  # extra argument lists in every job of an "arguments" task (module doc)
_DRAW = random.SystemRandom()


@dataclass(frozen=True)
class Slotted:
    """The extra argument lists of an "arguments" task's job and where they sit among the
    task's own (module doc): each extra is an answer (source None) or repeats own input
    `source`."""

    slots: tuple[int, ...]  # ascending places of the extras in the job's argument lists
    extras: tuple[str, ...]  # their texts, in slot order
    sources: tuple[int | None, ...]
    answers: tuple[int, ...] = ()  # which extra each answer given to drawn() is

    @classmethod
    def drawn(cls, own: list[str], answers: Sequence[str] = ()) -> Slotted:
        """`answers` (at most EXTRAS) and repeats of randomly drawn own inputs, shuffled
        into EXTRAS random places."""
        repeats = [_DRAW.randrange(len(own)) for _ in range(EXTRAS - len(answers))] if own else []
        extras = [(a, None, n) for n, a in enumerate(answers)] + [(own[k], k, None) for k in repeats]
        _DRAW.shuffle(extras)
        slots = tuple(sorted(_DRAW.sample(range(len(own) + len(extras)), len(extras))))
        where = {n: k for k, (_, _, n) in enumerate(extras) if n is not None}
        return cls(slots, tuple(t for t, _, _ in extras), tuple(k for _, k, _ in extras),
                   tuple(where[n] for n in range(len(answers))))

    def place(self, own: list[str]) -> list[str]:
        """The argument lists' texts in the order the job runs them (compiled in one go, so
        an extra's code differs from a task input's only as its text does)."""
        texts, rest, extras = [], iter(own), dict(zip(self.slots, self.extras))
        for k in range(len(own) + len(self.slots)):
            texts.append(extras[k] if k in extras else next(rest))
        return texts

    def split(self, outputs: list[str]) -> tuple[list[str], list[str]]:
        """(the outputs of the task's own inputs, the extras' outputs in slot order)."""
        at = set(self.slots)
        return [o for k, o in enumerate(outputs) if k not in at], [outputs[k] for k in self.slots]


@dataclass
class Plan:
    record: TaskRecord
    invalid: Rejection | None = None
    validate: Job | None = None  # run on two or more workers when set
    validate_slot: Slotted | None = None  # an "arguments" task's repeated inputs (module doc)
    order_sensitive: bool = False  # builds sets: validated on more workers (pool.py)
    answer_value: Any = _NO_VALUE  # a "value" answer (code_o) read as a literal
    answer_job: Job | None = None  # a "program" answer's runs (pool.py decides how many)
    answer_order_sensitive: bool = False  # its code builds sets: as many runs as validation's
    answer_by_student: bool = False  # runs a student's program: on student workers only
    answer_arguments: str | None = None  # an "arguments" answer written back as source, to judge_together
    task_code: CodeType | None = None  # the task's compiled program, for judge_together
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
            plan.validate_slot = Slotted.drawn(list(record.inputs))
            slotted = policy.place_argument_lists(plan.validate_slot.place(list(record.inputs)), cap)
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
        source = argument_source(args, kwargs)
        compiled = policy.compile_argument_lists([source], cap)
        if isinstance(compiled, Rejection):  # a value too large or deep to write back as source
            plan.answer_rejection = Rejection(compiled.reason, f"the answer, written back as a value: {compiled.detail}")
            return plan
        plan.answer_arguments, plan.task_code = source, code
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


def judge_together(plans: Sequence[Plan], limits: Limits) -> tuple[Job, Slotted, bool]:
    """One job judging the "arguments" answers of `plans` (at most EXTRAS, all of one task:
    the same program and inputs) at random places among the task's inputs; where they sit
    (`Slotted.answers`, in the order of `plans`); and whether it builds sets."""
    assert 0 < len(plans) <= EXTRAS and all(p.answer_arguments is not None for p in plans)
    own = list(plans[0].record.inputs)
    slot = Slotted.drawn(own, [p.answer_arguments for p in plans])  # type: ignore[misc]
    compiled = policy.place_argument_lists(slot.place(own), limits.max_source_chars)
    assert not isinstance(compiled, Rejection)  # texts that each compiled alone
    code = plans[0].task_code
    assert code is not None
    return (code, compiled), slot, policy.order_sensitive(code) or any(map(policy.order_sensitive, compiled))


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
