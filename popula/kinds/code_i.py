"""code_i: find an input for which a program returns a given output (the answer is an argument list)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from popula.kinds.base import TaskKind

if TYPE_CHECKING:
    from popula.records import TaskRecord


class CodeInput(TaskKind):
    """The student sees the program and one output and answers an argument list giving it."""

    name = "code_i"
    description = "find an input for which a Python function returns a given output"
    label = "code_i"
    answer = "arguments"
    compact_head = "input"
    direct_ask = "Reply with only the argument list (what goes inside f(...)) in <answer></answer>. No explanation."

    def compact_student(self, task: TaskRecord) -> str:
        return f"{task.program.rstrip()}\nf(?) == {task.outputs[0]}\n"

    def instruct_student(self, task: TaskRecord) -> list[str]:
        return [
            "Find an input for which this Python function returns the given output.",
            "```python", task.program.rstrip(), "```",
            f"Output: {task.outputs[0]}",
            "Reason step by step, then give the argument list (what goes inside f(...)) in <answer></answer>.",
        ]

    def corpus_answer(self, task: TaskRecord) -> str:
        return task.inputs[0]
