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
  (values.read_arguments); the task's program runs on those values in the sandbox (a
  "call" job: no answer text is ever executed) and the output comes back as text parsed here;
- "program" (code_f): the student's program runs on the hidden inputs (the second half of
  inputs), on workers that run students' programs only (they never hold a teacher's program).
An answer that is not a value gets answer_reason "not_a_value" and never runs. An
answer's runs follow the task's rules for determinism (pool.py): runs that disagree
make the answer wrong, so the same record always gets the same verdict.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import CodeType
from typing import Any

from popula.kinds import get_kind
from popula.records import TaskRecord
from popula.sandbox import policy
from popula.sandbox.limits import Limits
from popula.sandbox.policy import Rejection
from popula.sandbox.values import NotAValue, read_arguments, read_value

# A job for a worker: (kind, program code, argument lists). Kind "run": each argument list
# is the code of a teacher's input; kind "call": each is an (args, kwargs) pair of values.
Job = tuple[str, CodeType, list[Any]]

_NO_VALUE = object()


@dataclass
class Plan:
    record: TaskRecord
    invalid: Rejection | None = None
    validate: Job | None = None  # run on two or more workers when set
    order_sensitive: bool = False  # builds sets: validated on more workers (pool.py)
    answer_value: Any = _NO_VALUE  # a "value" answer (code_o) read as a literal
    answer_job: Job | None = None  # an "arguments" or "program" answer's runs (pool.py decides how many)
    answer_order_sensitive: bool = False  # its code builds sets: as many runs as validation's
    answer_by_student: bool = False  # runs a student's program: on student workers only
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
        plan.validate = ("run", code, args)
        plan.order_sensitive = policy.order_sensitive(code) or any(policy.order_sensitive(a) for a in args)
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
        code = task_program()
        if code is None:
            return plan
        try:
            call = read_arguments(answer)
        except NotAValue as err:
            plan.answer_rejection = _not_a_value_answer(answer, "an argument list of literal values", err)
            return plan
        plan.answer_job = ("call", code, [call])
        plan.answer_order_sensitive = policy.order_sensitive(code)
    else:  # "program"
        codes = task_args()
        if codes is None:
            return plan
        student = policy.compile_program(answer, cap, what="answer")
        if isinstance(student, Rejection):
            plan.answer_rejection = student
        else:
            hidden = codes[hidden_split(len(codes)):]
            plan.answer_job = ("run", student, hidden)
            plan.answer_order_sensitive = policy.order_sensitive(student) or any(map(policy.order_sensitive, hidden))
            plan.answer_by_student = True
    return plan


def _not_a_value_answer(answer: str, wanted: str, err: NotAValue) -> Rejection:
    return Rejection("not_a_value", f"the answer {answer[:60]!r} is not {wanted} ({err}); answers are data, never run")
