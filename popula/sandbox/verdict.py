"""From run results to a VerifyResult: determinism, outputs, and judging by value.

Run results are what a worker child reported (JSON): {"ok": [repr, ...]} or
{"err": reason, "detail": text}, either with "seeded": true when the run read a masked id
or hash. The child ran hostile code, so its report is checked for shape before it is
believed, and every output is parsed here as a value: nothing a job says is taken as a
verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from popula.kinds import get_kind
from popula.records import REASONS, VerifyResult
from popula.sandbox.plan import Plan, Slotted, hidden_split, not_a_value
from popula.sandbox.values import NotAValue, read_value, reprs_equal, values_equal

RunResult = dict[str, Any]

# Failures that say "too expensive", not "behaves differently": when only one of the two
# validation runs hits one, the task is reported as that, not as nondeterministic.
_RESOURCE_REASONS = ("timeout", "memory", "output_too_large")


def checked(result: Any) -> RunResult:
    """A child's report if it has the documented shape, else a runtime_error."""
    if isinstance(result, dict):
        seeded = {"seeded": True} if result.get("seeded") is True else {}
        ok = result.get("ok")
        if isinstance(ok, list) and all(isinstance(x, str) for x in ok):
            return {"ok": ok, **seeded}
        if result.get("err") in REASONS:
            return {"err": result["err"], "detail": str(result.get("detail", ""))[:1000], **seeded}
    return {"err": "runtime_error", "detail": "the sandboxed process sent a malformed result"}


def _short(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def validation(runs: list[RunResult], inputs: list[str]) -> tuple[str | None, str, list[str]]:
    """(reason, detail, outputs) from the runs of one job (a task's validation, or an
    answer's): one or more, each in a different worker (different hash seed, address
    layout and identity masks); they must agree value for value, and every output must
    read back as a value. `inputs` names the input of a disagreement."""
    if all("ok" in r for r in runs):
        first = runs[0]["ok"]
        if any(len(r["ok"]) != len(inputs) for r in runs):
            return "runtime_error", "the runs returned a wrong number of outputs", []
        for other in runs[1:]:
            for i, (x, y) in enumerate(zip(first, other["ok"])):
                if not reprs_equal(x, y, ordered_dicts=True):
                    return (
                        "nondeterministic",
                        f"input {i} ({_short(inputs[i], 40)}) gave {_short(x)} in one run and {_short(y)} in another",
                        [],
                    )
        if (bad := not_a_value(tuple(first))) is not None:
            return bad.reason, bad.detail, []
        return None, "", list(first)
    failures = [r for r in runs if "err" in r]
    for reason in _RESOURCE_REASONS:
        for failure in failures:
            if failure["err"] == reason:
                return reason, failure["detail"], []
    if len(failures) < len(runs):
        return (
            "nondeterministic",
            f"one run failed ({failures[0]['err']}: {_short(failures[0]['detail'])}) and another succeeded",
            [],
        )
    return runs[0]["err"], runs[0]["detail"], []


@dataclass
class Judging:
    """The runs of one job that judged an answer and, for an "arguments" answer, where in
    that job it sat: the `index`-th extra of `slot` (plan.judge_together)."""

    runs: list[RunResult]
    slot: Slotted | None = None
    index: int = 0


def judge(plan: Plan, outputs: list[str], judgings: list[Judging]) -> tuple[bool, str | None, str]:
    """(correct, answer_reason, answer_detail): the answer judged by value against outputs.

    answer_reason is None when the answer produced a value that was compared; otherwise it
    says why it could not (not_a_value, syntax, forbidden, timeout, runtime_error,
    nondeterministic: its runs disagreed, ...). An "arguments" answer's judgings must all
    produce a value (judged_differently has checked that the values agree).
    """
    if plan.answer_rejection is not None:
        return False, plan.answer_rejection.reason, plan.answer_rejection.detail
    record = plan.record
    if plan.has_answer_value:
        try:
            return values_equal(plan.answer_value, read_value(outputs[0])), None, ""
        except NotAValue:
            return False, None, "the task output is not a value"
    if not judgings or not all(j.runs for j in judgings):
        raise AssertionError("an answer that needs a run has no run result")
    if plan.answer_arguments is not None:  # "arguments": the answer among the task's own inputs
        answered = []
        for j in judgings:
            assert j.slot is not None
            reason, detail, got = validation(j.runs, j.slot.place(list(record.inputs)))
            if reason is not None:
                return False, reason, detail
            answered.append(j.slot.split(got)[1][j.index])
        return reprs_equal(answered[0], outputs[0]), None, ""
    split = hidden_split(len(outputs))
    reason, detail, got = validation(judgings[0].runs, record.inputs[split:])
    if reason is not None:
        return False, reason, detail
    return all(map(reprs_equal, got, outputs[split:])), None, ""


def judged_differently(plan: Plan, outputs: list[str], judgings: list[Judging]) -> str | None:
    """Why the task's program, run to judge answers, returned for one of its own inputs (or
    a repeat of one) something other than its validated output, for an answer different
    outputs in two runs of a job, or for this answer different outputs in two jobs (each
    in other company: plan.judge_together); None if not. The task is then invalid: the
    verdict was the program's to choose."""
    mine = []  # this answer's output in every run that produced one
    for j in judgings:
        slot = j.slot
        if slot is None or not all("ok" in r for r in j.runs):
            continue
        answers = [k for k, source in enumerate(slot.sources) if source is None]  # extras that are answers
        answered = []
        for run in j.runs:
            if len(run["ok"]) != len(outputs) + len(slot.slots):
                return "the task's program returned a wrong number of outputs when an answer was judged"
            own, extras = slot.split(run["ok"])
            answered.append([extras[k] for k in answers])
            mine.append((extras[j.index], slot.extras[j.index]))
            repeats = [(source, x) for x, source in zip(extras, slot.sources) if source is not None]
            for i, got in [*enumerate(own), *repeats]:
                if not reprs_equal(got, outputs[i]):
                    return (f"input {i} ({_short(plan.record.inputs[i], 40)}) gave {_short(got)} when an answer "
                            f"was judged and {_short(outputs[i])} when the task was validated")
        for other in answered[1:]:
            for k, x, y in zip(answers, answered[0], other):
                if not reprs_equal(x, y):
                    return (f"the answer ({_short(slot.extras[k], 40)}) gave {_short(x)} in one judging run and "
                            f"{_short(y)} in another")
    for got, text in mine[1:]:
        if not reprs_equal(got, mine[0][0]):
            return (f"the answer ({_short(text, 40)}) gave {_short(mine[0][0])} in one judging run and "
                    f"{_short(got)} in another")
    return None


def _validated(plan: Plan, runs: list[RunResult]) -> tuple[str | None, str, list[str]]:
    """validation() of a task's own runs; an "arguments" task's repeated inputs (plan.py)
    must give what their originals give."""
    inputs = plan.record.inputs
    slot = plan.validate_slot
    if slot is None:
        return validation(runs, inputs)
    reason, detail, outputs = validation(runs, slot.place(list(inputs)))
    if reason is not None:
        return reason, detail, outputs
    own, repeated = slot.split(outputs)
    for source, again in zip(slot.sources, repeated):
        if source is not None and not reprs_equal(own[source], again):
            return ("nondeterministic", f"input {source} ({_short(inputs[source], 40)}) gave {_short(own[source])} "
                    f"once and {_short(again)} when run again in the same process", [])
    return None, "", own


def assemble(plan: Plan, runs: list[RunResult], judgings: list[Judging]) -> VerifyResult:
    record = plan.record
    if plan.invalid is not None:
        return VerifyResult(id=record.id, valid=False, reason=plan.invalid.reason, detail=plan.invalid.detail)  # type: ignore[arg-type]
    if plan.validate is not None:
        reason, detail, outputs = _validated(plan, runs)
        if reason is not None:
            return VerifyResult(id=record.id, valid=False, reason=reason, detail=detail)  # type: ignore[arg-type]
    else:
        outputs = list(record.outputs)
    if record.answer is not None and (why := judged_differently(plan, outputs, judgings)) is not None:
        return VerifyResult(id=record.id, valid=False, reason="nondeterministic", detail=why)
    result = VerifyResult(id=record.id, valid=True, outputs=outputs)
    if record.answer is not None:
        result.correct, result.answer_reason, result.answer_detail = judge(plan, outputs, judgings)
    return result
