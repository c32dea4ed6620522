"""code_f: write a program from input/output examples and a hint (the answer is a program).

A code_f task carries several inputs: the first half, with their outputs, is shown to the
student; the rest are hidden and judge the answer (popula/sandbox/plan.py runs the student's
program on them).
"""

from __future__ import annotations

from popula.kinds.base import T, Task, TaskKind


CODE_F_INPUTS = 10  # inputs a code_f proposal carries: half shown, half hidden


def shown_pairs(task: Task) -> list[tuple[str, str]]:
    """The input/output pairs a code_f student sees: the first half (the rest judge it)."""
    return list(zip(task.inputs, task.outputs))[: max(1, len(task.inputs) // 2)]


def simplest_program(task: Task) -> str:
    """The code_f answer to teach: the program itself, or `return <output>` if it is constant.

    About a fifth of generated programs ignore their input. Any program that reproduces
    the outputs is a correct code_f answer, and for those the simplest one returns the
    one output it ever gives; a student should learn to see that rather than to guess
    which of many equivalent programs wrote it.
    """
    if len(set(task.outputs)) > 1:
        return task.program
    signature = task.program.split("\n", 1)[0]
    return f"{signature}\n    return {task.outputs[0]}"


class CodeFunction(TaskKind):
    """The student sees half the input/output pairs and the hint, and answers a program `f`."""

    name = "code_f"
    description = "write a Python function from input/output examples and a hint"
    label = "code_f"
    answer = "program"
    compact_head = "program"
    direct_ask = "Reply with only the program in <answer></answer>, as a ```python block. No explanation."
    corpus_share = {"tiny": 0.3, "coldstart": 0.3}
    proposal_inputs = CODE_F_INPUTS
    min_inputs = 2
    hint = True

    def inputs_fault(self, n_inputs: int) -> str | None:
        if n_inputs >= 2:
            return None
        # With one input the student would be shown no example, or judged on the one it was shown.
        return (f"of a code_f task holds {n_inputs} input; it needs at least 2: the "
                "first half (n // 2) is shown to the student as examples, the rest judge the answer")

    def trivial_fault(self, task: Task) -> str | None:
        # a constant is read off the first example shown: every hidden input is judged by it
        if len(task.outputs) > 1 and len(set(task.outputs)) == 1:
            return f"every output is {task.outputs[0]} (a constant function)"
        return super().trivial_fault(task)

    def compact_reference(self, ref: Task) -> str:
        return f"# {ref.message}" if ref.message else "#"

    def compact_student(self, task: Task) -> str:
        pairs = "".join(f">>> f({x})\n{y}\n" for x, y in shown_pairs(task))
        return f"# {task.message}\n{pairs}"

    def instruct_want(self) -> str:
        return (
            f"{CODE_F_INPUTS} different inputs, each an argument list in its own <input></input> tag, "
            "and a short hint about what the function does in <message></message> "
            "(the student sees half of the input/output pairs and the hint)"
        )

    def instruct_student(self, task: Task) -> list[str]:
        pairs = [f"f({x}) == {y}" for x, y in shown_pairs(task)]
        return [
            "Write a Python function `f` that matches these examples (it is also checked on hidden ones).",
            f"Hint: {task.message}" if task.message else "",
            *pairs,
            "Reason step by step, then give the complete program in <answer></answer> (a ```python block inside is fine).",
        ]

    def view(self, task: T, pick: int) -> T:
        return task

    def corpus_answer(self, task: Task) -> str:
        return simplest_program(task)
