"""code_o: predict the output of a program for a given input (the answer is a value)."""

from __future__ import annotations

from popula.kinds.base import Task, TaskKind


class CodeOutput(TaskKind):
    """The student sees the program and one input and answers the output, a literal."""

    name = "code_o"
    description = "predict the output of a Python function for a given input"
    label = "code_o"
    answer = "value"
    compact_head = "output"
    instruct_question = "Predict the output of this Python function for the given input."
    instruct_ask = "Reason step by step, then give the output as a Python literal in <answer></answer>."
    direct_ask = "Reply with only the output, as a Python literal, in <answer></answer>. No explanation."
    shows_outputs = False
    corpus_share = {"tiny": 0.65, "coldstart": 0.4}

    def compact_shown(self, task: Task) -> str:
        return f">>> f({task.inputs[0]})"

    def instruct_shown(self, task: Task) -> str:
        return f"Input: f({task.inputs[0]})"

    def corpus_answer(self, task: Task) -> str:
        return task.outputs[0]
