"""What a task kind is: the one place a task type's rules and texts live.

A kind states how many inputs its tasks carry, what each prompt format shows a teacher and
a student, and which of the sandbox's answer forms its answers take. It never judges:
the sandbox judges every answer by its form (popula/sandbox/plan.py), so a new kind adds no
new way for untrusted text to reach a verdict.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Literal, Mapping, Protocol, TypeVar

# How the sandbox reads and judges an answer (popula/sandbox/plan.py):
# "value": a literal compared with the first output, nothing runs;
# "arguments": an argument list of literals the task's program is called on;
# "program": a student's program run on the hidden inputs, on student workers.
AnswerForm = Literal["value", "arguments", "program"]
ANSWER_FORMS: tuple[str, ...] = ("value", "arguments", "program")


class Task(Protocol):
    """What a kind reads of a task: `popula.records.TaskRecord` has these fields (and records
    look kinds up, so kinds name the fields, not the class)."""

    type: str
    program: str
    inputs: list[str]
    outputs: list[str]
    message: str


T = TypeVar("T", bound=Task)


class TaskKind:
    """A task type: subclass it in one module, set the class attributes, register an instance.

    The defaults describe a kind whose tasks carry one input and no hint (code_o, code_i);
    a kind with several inputs or a hint overrides the methods that show them.
    """

    name: ClassVar[str]
    description: ClassVar[str]  # what a student must do, one line: CLI help and the instruct teacher prompt
    label: ClassVar[str]  # the kind in plots and listings
    answer: ClassVar[AnswerForm]
    compact_head: ClassVar[str]  # the compact format's `## <head>` word
    instruct_question: ClassVar[str] = ""  # the first line of the default instruct student prompt
    instruct_ask: ClassVar[str] = ""  # its last line, asking for the answer
    direct_ask: ClassVar[str]  # the last line of an instruct-direct student prompt
    proposal_inputs: ClassVar[int] = 1  # the most inputs a proposal keeps (and the generator draws)
    min_inputs: ClassVar[int] = 1  # the fewest a proposal needs
    hint: ClassVar[bool] = False  # tasks carry a message (a hint) for the student
    shows_outputs: ClassVar[bool] = True  # a student prompt shows outputs, so it needs them computed
    # Joins what a config or recipe gets when it names no kinds: the default `tasks.types` and
    # the cold-start corpora below. False: only where named (a test's or an experimental kind).
    default: ClassVar[bool] = True
    # Its share of each cold-start corpus's student examples, by corpus: "tiny" (the tiny base's
    # build, compact format) and "coldstart" (a registry model's warm-up, instruct format). A
    # corpus draws teacher examples of every kind in it; a kind with no share is in none.
    corpus_share: ClassVar[Mapping[str, float]] = {}

    def inputs_fault(self, n_inputs: int) -> str | None:
        """Why a task record of this kind may not carry `n_inputs` inputs (after "field 'inputs' "), or None."""
        return None if n_inputs == 1 else f"of a {self.name} task must hold exactly one input"

    def trivial_fault(self, task: Task) -> str | None:
        """Why a student could answer this judged task without reading it, or None.

        A task whose every output equals its input (an identity function, or one that acts as
        one on these inputs: `abs` on 5) is answered by copying what the prompt shows: the input
        for code_o, the output for code_i, `return x` for code_f. A curriculum that fills with it
        teaches that copy (rung J, seed 1: docs/results/smollm2-rung-j/). `rewards.refuse_trivial`
        makes such a task invalid.
        """
        if task.inputs and task.inputs == task.outputs:
            return "every output equals its input: copying answers it"
        return None

    # -- compact format (tiny base) -------------------------------------------------------

    def compact_reference(self, ref: Task) -> str:
        """The line under a reference's program in a compact teacher prompt."""
        return f">>> f({ref.inputs[0]})"

    def compact_student(self, task: Task) -> str:
        """A compact student prompt after its `## <head>` line: by default the program and `compact_shown`."""
        return f"{task.program.rstrip()}\n{self.compact_shown(task)}\n"

    def compact_shown(self, task: Task) -> str:
        """The line under the program in the default compact student prompt."""
        raise NotImplementedError

    # -- instruct format (real models) ----------------------------------------------------

    def instruct_reference(self, ref: Task) -> list[str]:
        """Lines between a reference's program and its `Input:` line in an instruct teacher prompt."""
        return [f"Hint: {ref.message}"] if self.hint and ref.message else []

    def instruct_want(self) -> str:
        """What an instruct teacher prompt asks the proposal to give besides the program."""
        return "one input (an argument list, as in f(<input>)) in <input></input>"

    def instruct_student(self, task: Task) -> list[str]:
        """An instruct student prompt's lines; the last asks for the answer (direct_ask replaces it).
        By default: the question, the program in a fence, `instruct_shown` and the ask."""
        return [self.instruct_question, "```python", task.program.rstrip(), "```", self.instruct_shown(task), self.instruct_ask]

    def instruct_shown(self, task: Task) -> str:
        """The line under the program in the default instruct student prompt."""
        raise NotImplementedError

    # -- cold-start corpus ----------------------------------------------------------------

    def view(self, task: T, pick: int) -> T:
        """A pool task (several inputs, outputs computed) seen as a task of this kind: its `pick`-th input."""
        return replace(task, type=self.name, inputs=[task.inputs[pick]], outputs=[task.outputs[pick]], message="")

    def corpus_answer(self, task: Task) -> str:
        """The answer a perfect student gives to `task`, a task of this kind with outputs."""
        raise NotImplementedError
