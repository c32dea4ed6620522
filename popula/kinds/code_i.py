"""code_i: find an input for which a program returns a given output (the answer is an argument list)."""

from __future__ import annotations

from popula.kinds.base import Task, TaskKind


class CodeInput(TaskKind):
    """The student sees the program and one output and answers an argument list giving it."""

    name = "code_i"
    description = "find an input for which a Python function returns a given output"
    label = "code_i"
    answer = "arguments"
    compact_head = "input"
    instruct_question = "Find an input for which this Python function returns the given output."
    instruct_ask = "Reason step by step, then give the argument list (what goes inside f(...)) in <answer></answer>."
    direct_ask = "Reply with only the argument list (what goes inside f(...)) in <answer></answer>. No explanation."
    corpus_share = {"tiny": 0.05, "coldstart": 0.3}  # the tiny base learns code_i mostly from code_o examples

    def compact_shown(self, task: Task) -> str:
        return f"f(?) == {task.outputs[0]}"

    def instruct_shown(self, task: Task) -> str:
        return f"Output: {task.outputs[0]}"

    def corpus_answer(self, task: Task) -> str:
        return task.inputs[0]
