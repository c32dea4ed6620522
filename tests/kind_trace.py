"""A test-only fourth task kind, code_t: a twin of code_o worded as a trace of one call.

It exists to show that a kind is one module and one `register` line: tests/test_kinds.py
registers it and runs it through records, config, prompts, the generator, the real
sandbox, the corpus, evaluation's summary, the CLI and the plot, touching no production file.
Its answers are judged as code_o's are (a value compared with the output): it takes its
answer form, and its cold-start answer, from CodeOutput.
"""

from __future__ import annotations

from popula.kinds.code_o import CodeOutput
from popula.records import TaskRecord


class CodeTrace(CodeOutput):
    """The student sees the program and a traced call, and answers the value it returns."""

    name = "code_t"
    description = "trace one call of a Python function and say what it returns"
    label = "code_t (trace)"
    compact_head = "trace"
    instruct_question = "Trace this call of a Python function."
    instruct_ask = "Trace it step by step, then give what it returns as a Python literal in <answer></answer>."
    direct_ask = "Reply with only the returned value, as a Python literal, in <answer></answer>. No explanation."
    default = False  # a test's kind: in a config or a corpus only where named
    corpus_share = {"tiny": 0.1}  # the tiny base's corpus, when a recipe names it

    def compact_shown(self, task: TaskRecord) -> str:
        return f">>> trace f({task.inputs[0]})"

    def instruct_shown(self, task: TaskRecord) -> str:
        return f"Call: f({task.inputs[0]})"
