"""What the sandbox must run for one record, decided before anything runs.

A record without outputs is a task to validate: its program and inputs are checked and
compiled here, then run on two different workers (more for a task that builds sets,
see pool.py), each run in a fresh process of its own (zygote.py). A record that
already carries outputs was validated earlier: only what judging needs is run, once:
- code_o: the answer is read as a literal value in this process (no code runs at all);
  an answer that is an expression rather than a literal is evaluated in the sandbox,
  in an empty namespace (it cannot call the task's `f`);
- code_i: the task program runs on the answer's argument list;
- code_f: the student's program runs on the hidden inputs (the second half of inputs).
Judging runs happen once: determinism is required of the teacher's task, not re-proven
for each student answer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import CodeType
from typing import Any

from popula.records import TaskRecord
from popula.sandbox import policy
from popula.sandbox.limits import Limits
from popula.sandbox.policy import Rejection
from popula.sandbox.values import NotAValue, read_value

# A job for a worker: (kind, program code, argument-list codes, expression code).
Job = tuple[str, CodeType | None, list[CodeType], CodeType | None]

_NO_VALUE = object()


@dataclass
class Plan:
    record: TaskRecord
    invalid: Rejection | None = None
    validate: Job | None = None  # run on two or more workers when set
    order_sensitive: bool = False  # builds sets: validated on more workers (pool.py)
    answer_value: Any = _NO_VALUE  # a code_o answer read as a literal
    answer_job: Job | None = None  # run once when set
    answer_rejection: Rejection | None = None

    @property
    def has_answer_value(self) -> bool:
        return self.answer_value is not _NO_VALUE


def hidden_split(n_inputs: int) -> int:
    """Index of the first hidden input of a code_f task: the second half is hidden."""
    return n_inputs // 2


@functools.lru_cache(maxsize=4096)
def _not_a_value(outputs: tuple[str, ...]) -> Rejection | None:
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
        if (bad := _not_a_value(tuple(record.outputs))) is not None:
            plan.invalid = bad
            return plan
    if not record.outputs:
        code, args = task_program(), task_args()
        if plan.invalid is not None:
            return plan
        assert code is not None and args is not None
        plan.validate = ("run", code, args, None)
        plan.order_sensitive = policy.order_sensitive(code) or any(policy.order_sensitive(a) for a in args)
    if record.answer is None:
        return plan
    answer = record.answer
    if len(answer) > cap:
        plan.answer_rejection = Rejection("syntax", f"answer has {len(answer)} characters (limit {cap})")
    elif record.type == "code_o":
        try:
            plan.answer_value = read_value(answer)
        except NotAValue:
            expr = policy.compile_expression(answer, cap)
            if isinstance(expr, Rejection):
                plan.answer_rejection = expr
            else:
                plan.answer_job = ("expr", None, [], expr)
    elif record.type == "code_i":
        code = task_program()
        if code is None:
            return plan
        args = policy.compile_argument_lists([answer], cap, what="answer")
        if isinstance(args, Rejection):
            plan.answer_rejection = args
        else:
            plan.answer_job = ("run", code, args, None)
    else:  # code_f
        codes = task_args()
        if codes is None:
            return plan
        student = policy.compile_program(answer, cap, what="answer")
        if isinstance(student, Rejection):
            plan.answer_rejection = student
        else:
            plan.answer_job = ("run", student, codes[hidden_split(len(codes)):], None)
    return plan
