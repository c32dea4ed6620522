"""Prompt formats and completion parsing: the one place they live.

Teachers see K reference tasks and propose a new one; students see a task and answer it.
Two formats share one interface (`PromptFormat`):

- `CompactFormat`, for the tiny base model: terse, doctest-like text a few-million-
  parameter model can learn, every completion ending in the tiny tokenizer's `<|end|>`
  token (generation stops there).
- `InstructFormat`, for real instruction-tuned models: a plain-language instruction, the
  model reasons and then gives a tagged answer (`<answer>...</answer>`, or `<program>` /
  `<input>` / `<message>` for proposals), as the public self-play recipes do; the chat
  template is applied when the tokenizer has one.

`prompt_format(tokenizer)` picks the format the tokenizer's base was made for: the one its
directory declares (`popula_prompt.json`, written by the tiny base's build and by the
registry's conversion), else, for a base from before that file, the one inferred from its
vocabulary and markers (`_inferred_format`). The completion
writers (`proposal_completion`, `answer_completion`) are the exact inverse of the parsers;
the cold-start corpus is written with them, so the tiny model learns exactly the text the
parsers read back.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Protocol, Sequence

from popula.errors import PopulaError
from popula.kinds import AnswerForm, TaskKind, get_kind
from popula.records import TaskRecord

K_REFERENCES = 6  # reference tasks a teacher sees (as in Absolute Zero)
COMPACT_EOS = "<|end|>"  # the tiny tokenizer's end-of-sequence token
COMPACT_PAD = "<|pad|>"


def _student_kind(task: TaskRecord) -> TaskKind:
    """The task's kind, once the task holds what its student prompt shows."""
    kind = get_kind(task.type)
    if kind.shows_outputs and len(task.outputs) != len(task.inputs):
        raise PopulaError(f"task {task.id}: a {task.type} student prompt needs the outputs the sandbox computes")
    return kind


class PromptFormat(Protocol):
    """What the run loop and `popula eval` call; both formats implement it."""

    name: str

    def teacher_prompt(self, task_type: str, references: Sequence[TaskRecord]) -> str:
        """Ask for a new task of `task_type`, showing the reference tasks."""
        ...

    def parse_proposal(self, text: str, task_type: str) -> TaskRecord | None:
        """A proposed task (id "proposal", no outputs yet), or None if malformed."""
        ...

    def student_prompt(self, task: TaskRecord) -> str:
        """Pose a task to a student."""
        ...

    def parse_answer(self, text: str, task_type: str) -> str | None:
        """The answer in a student completion (expression, argument list or program), or None."""
        ...

    def proposal_completion(self, task: TaskRecord) -> str:
        """The completion a perfect teacher writes for `task` (the inverse of parse_proposal)."""
        ...

    def answer_completion(self, task: TaskRecord, answer: str) -> str:
        """The completion a perfect student writes (the inverse of parse_answer)."""
        ...


# ---------------------------------------------------------------------------------------------
# Compact format (tiny model)

_CALL = re.compile(r"^>>> f\((.*)\)$")


def _cut_eos(text: str) -> str:
    return text.split(COMPACT_EOS, 1)[0]


class CompactFormat:
    """Doctest-like prompts, short enough for a model of a few million parameters.

    A student prompt reads `## <head>` and what the task's kind shows (popula/kinds): for
    code_o the program and `>>> f(<input>)`, the completion being the output repr; code_i
    shows `f(?) == <output>` and expects the argument list; code_f shows the hint as a
    comment and the shown pairs, and expects the program. A teacher prompt lists the
    references under `### ref` and ends in `### new`; the completion is a program followed
    by one `>>> f(...)` line per input (and, for a kind with a hint, the hint as a `# ` line).
    """

    name = "compact"

    def __init__(self, max_references: int = 3) -> None:
        # A model of a few million parameters trained for minutes has a short useful
        # context: it sees only the last `max_references` of the references it is given.
        self.max_references = max_references

    def teacher_prompt(self, task_type: str, references: Sequence[TaskRecord]) -> str:
        kind = get_kind(task_type)
        parts = [f"## propose {kind.compact_head}"]
        for ref in list(references)[-self.max_references :] if self.max_references else []:
            parts.append("### ref")
            parts.append(ref.program.rstrip())
            parts.append(kind.compact_reference(ref))
        parts.append("### new")
        return "\n".join(parts) + "\n"

    def proposal_completion(self, task: TaskRecord) -> str:
        lines = [task.program.rstrip()]
        lines += [f">>> f({x})" for x in task.inputs]
        if get_kind(task.type).hint:
            lines.append(f"# {task.message}")
        return "\n".join(lines)

    def parse_proposal(self, text: str, task_type: str) -> TaskRecord | None:
        get_kind(task_type)  # an unknown type is an error
        lines = _cut_eos(text).strip("\n").split("\n")
        program: list[str] = []
        inputs: list[str] = []
        message = ""
        for line in lines:
            call = _CALL.match(line.strip())
            if call:
                inputs.append(call.group(1).strip())
            elif inputs and line.startswith("# "):
                message = line[2:].strip()
                break
            elif inputs:
                break  # anything after the inputs ends the proposal
            else:
                program.append(line)
        return _proposal(task_type, "\n".join(program).rstrip(), inputs, message)

    def student_prompt(self, task: TaskRecord) -> str:
        kind = _student_kind(task)
        return f"## {kind.compact_head}\n{kind.compact_student(task)}"

    def answer_completion(self, task: TaskRecord, answer: str) -> str:
        return answer.rstrip() if get_kind(task.type).answer == "program" else answer.strip()

    def parse_answer(self, text: str, task_type: str) -> str | None:
        kind = get_kind(task_type)
        body = _cut_eos(text)
        if kind.answer == "program":
            body = body.strip("\n").rstrip()
            return body if body.lstrip().startswith("def ") and "def f(" in body else None
        body = body.strip()
        if not body or "\n" in body:
            return None
        return body


def _proposal(task_type: str, program: str, inputs: list[str], message: str) -> TaskRecord | None:
    """Shape-check a parsed proposal: a program, and as many inputs as its kind takes (the
    kind's min_inputs, at most proposal_inputs: one for code_o/i, several for code_f)."""
    if not program.strip() or not inputs or any(not x for x in inputs):
        return None
    kind = get_kind(task_type)
    if len(inputs) < kind.min_inputs:
        return None
    inputs = inputs[: kind.proposal_inputs]
    return TaskRecord(id="proposal", type=task_type, program=program, inputs=inputs, message=message if kind.hint else "")


# ---------------------------------------------------------------------------------------------
# Instruction format (real models)

_RULES = (
    "Rules for the program: define a function named `f` (helper functions may be nested inside it); "
    "it must be deterministic (no randomness, time, files, network or imports of os, sys, random, time, "
    "datetime, subprocess, threading); inputs and outputs are Python literals (ints, strings, lists, "
    "tuples, dicts)."
)


def _last_tag(text: str, tag: str) -> str | None:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.S)
    return found[-1] if found else None


def _strip_fence(text: str) -> str:
    text = text.strip()
    fenced = re.match(r"^```[a-zA-Z0-9_+-]*\n(.*?)\n?```$", text, flags=re.S)
    if fenced:
        return fenced.group(1).strip("\n")
    if text.startswith("`") and text.endswith("`") and len(text) > 1:
        return text.strip("`").strip()
    return text


class InstructFormat:
    """Plain-language prompts: reason first, then a tagged answer.

    With a tokenizer that has a chat template, prompts are rendered as one user turn with
    the generation prompt added; otherwise the instruction text is used as is.

    `direct=True` is the style for small instruction models (SmolLM2-135M): measured on
    it, the reasoning style was parsed 0% of the time (it explains the code, loops, and
    never writes the tags). A direct prompt asks for the answer alone and opens the tag in
    the assistant turn itself (`<answer>`, or `<program>` plus a ```python fence and
    `def f(` for proposals), so the model only continues a tagged answer; the parsers put
    that prefill back in front of the completion and accept an answer the model ends with
    its end-of-turn token instead of the closing tag.
    """

    name = "instruct"

    def __init__(self, tokenizer: Any | None = None, *, direct: bool = False) -> None:
        self.tokenizer = tokenizer
        self.direct = direct

    def _render(self, text: str, prefill: str = "") -> str:
        tok = self.tokenizer
        if tok is not None and getattr(tok, "chat_template", None):
            return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True) + prefill
        return text + "\n\n" + prefill

    # what a direct prompt already wrote of the completion (the parsers restore it)
    def _answer_prefill(self, task_type: str) -> str:
        if not self.direct:
            return ""
        return "<answer>\n```python\ndef f(" if get_kind(task_type).answer == "program" else "<answer>"

    def _proposal_prefill(self) -> str:
        return "<program>\n```python\ndef f(" if self.direct else ""

    def teacher_prompt(self, task_type: str, references: Sequence[TaskRecord]) -> str:
        kind = get_kind(task_type)
        lines = [
            f"You are a teacher. Design a new task in which a student must {kind.description}. "
            "The task should be hard for a strong student but solvable.",
            "",
            f"Here are {len(references)} reference tasks; yours must be different:",
        ]
        for i, ref in enumerate(references, 1):
            lines += ["", f"Reference {i}:", "```python", ref.program.rstrip(), "```"]
            lines += kind.instruct_reference(ref)
            lines.append(f"Input: {ref.inputs[0]}")
        lines += ["", _RULES, ""]
        want = kind.instruct_want()
        if self.direct:
            lines.append(f"Give the program in <program></program> (a ```python block inside) and {want}. No explanation.")
        else:
            lines.append(
                "Think it through first. Then give the program in <program></program> (a ```python block "
                f"inside is fine) and {want}."
            )
        return self._render("\n".join(lines), self._proposal_prefill())

    def proposal_completion(self, task: TaskRecord) -> str:
        parts = [f"<program>\n```python\n{task.program.rstrip()}\n```\n</program>"]
        parts += [f"<input>{x}</input>" for x in task.inputs]
        if get_kind(task.type).hint:
            parts.append(f"<message>{task.message}</message>")
        return _after_prefill("\n".join(parts), self._proposal_prefill())

    def parse_proposal(self, text: str, task_type: str) -> TaskRecord | None:
        get_kind(task_type)  # an unknown type is an error
        text = self._proposal_prefill() + text
        program = _last_tag(text, "program")
        if program is None and self.direct and "</program>" not in text:
            # the program's fence closed but the tag did not: the program ends at the fence
            fenced = re.match(r"<program>\n```python\n(.*?)\n```", text, flags=re.S)
            if fenced is not None and "<input>" in text[fenced.end():]:
                program, text = fenced.group(1), text[: fenced.end()] + "</program>" + text[fenced.end():]
            else:
                untagged = _untagged_proposal(text)
                if untagged is None:
                    return None
                return _proposal(task_type, untagged[0], untagged[1], "")
        if program is None:
            return None
        after = text[text.rfind("</program>") :]
        inputs = [_strip_fence(x) for x in re.findall(r"<input>(.*?)</input>", after, flags=re.S)]
        message = _last_tag(after, "message") or ""
        return _proposal(task_type, _strip_fence(program), inputs, message.strip())

    def student_prompt(self, task: TaskRecord) -> str:
        kind = _student_kind(task)
        body = kind.instruct_student(task)
        if self.direct:
            body[-1] = kind.direct_ask
        return self._render("\n".join(line for line in body if line), self._answer_prefill(task.type))

    def answer_completion(self, task: TaskRecord, answer: str) -> str:
        if get_kind(task.type).answer == "program":
            text = f"<answer>\n```python\n{answer.rstrip()}\n```\n</answer>"
        else:
            text = f"<answer>{answer.strip()}</answer>"
        return _after_prefill(text, self._answer_prefill(task.type))

    def parse_answer(self, text: str, task_type: str) -> str | None:
        form = get_kind(task_type).answer
        text = self._answer_prefill(task_type) + text
        found = _last_tag(text, "answer")
        if found is None and self.direct and "</answer>" not in text:
            found = _unclosed_answer(text, form)
        if found is None:
            return None
        answer = _strip_fence(found)
        if form == "program":
            return answer if "def f(" in answer else None
        return answer or None


def _after_prefill(completion: str, prefill: str) -> str:
    """A completion as the model writes it after a direct prompt's prefill."""
    if prefill and not completion.startswith(prefill):
        raise PopulaError(f"a direct-style completion must start with {prefill!r} (a program must begin with `def f(`)")
    return completion[len(prefill):]


def _unclosed_answer(text: str, form: AnswerForm) -> str | None:
    """The answer of a direct-style completion the model ended without `</answer>`.

    What SmolLM2-135M really writes (tests/data/smollm2/): for a program (code_f), the program
    and then example calls or commentary, with or without the closing fence, so the program
    is the leading `def f(` block; for a value or an argument list (code_o/code_i), the value
    on the first line, sometimes an explanation below it. An answer must be valid Python where it will be used (an
    expression, or an argument list); a first line that is not is no answer.
    """
    start = text.rfind("<answer>")
    if start < 0:
        return None
    body = text[start + len("<answer>"):]
    if form == "program":
        fenced = re.match(r"\s*```python\n(.*?)\n```", body, flags=re.S)
        program = fenced.group(1) if fenced else _leading_def(body.lstrip().removeprefix("```python\n"))
        return program if program and _compiles(program, "exec") else None
    line = body.strip().split("\n", 1)[0].strip()
    if not line:
        return None
    return line if _compiles(line if form == "value" else f"f({line})", "eval") else None


def _leading_def(text: str) -> str | None:
    """The `def f(` block a text starts with: up to the first unindented line after it."""
    lines = text.split("\n")
    if not lines or not lines[0].startswith("def f("):
        return None
    keep = [lines[0]]
    for line in lines[1:]:
        if line.strip() and not line[0].isspace():
            break
        keep.append(line)
    return "\n".join(keep).rstrip() or None


def _compiles(source: str, mode: str) -> bool:
    import ast

    try:
        ast.parse(source, mode=mode)
    except (SyntaxError, ValueError):
        return False
    return True


_CALL_LINE = re.compile(r"^(?:print\()?f\((.*)\)\)?(?:\s*(?:#.*|==.*))?$")


def _untagged_proposal(text: str) -> tuple[str, list[str]] | None:
    """(program, inputs) of a direct-style proposal written without `<input>` tags.

    SmolLM2-135M writes the program and then calls it (`f(10)`, `print(f(3))  # 5`): the
    program is the leading `def f(` block and every such call line gives an input.
    """
    body = text[text.find("<program>") + len("<program>"):].lstrip().removeprefix("```python\n")
    program = _leading_def(body)
    if program is None or not _compiles(program, "exec"):
        return None
    inputs = []
    for line in body[len(program):].split("\n"):
        call = _CALL_LINE.match(line.strip())
        if call and call.group(1).strip() and _compiles(f"f({call.group(1)})", "eval"):
            inputs.append(call.group(1).strip())
    return program, inputs


FORMAT_FILE = "popula_prompt.json"  # in a base model's directory: {"prompt_format": NAME}
FORMAT_NAMES = ("compact", "instruct", "instruct-direct")


def write_format(model_dir: str | os.PathLike[str], name: str) -> None:
    """Declare in a base's directory the prompt format it was made for (one of FORMAT_NAMES):
    the tiny base's build and the registry's conversion write it beside the weights."""
    if name not in FORMAT_NAMES:
        raise PopulaError(f"prompt format must be one of {', '.join(FORMAT_NAMES)}, got {name!r}")
    (Path(model_dir) / FORMAT_FILE).write_text(json.dumps({"prompt_format": name}) + "\n")


def declared_format(model_dir: str | os.PathLike[str]) -> str | None:
    """The prompt format a base directory declares (`FORMAT_FILE`), or None when it declares none."""
    path = Path(model_dir) / FORMAT_FILE
    if not path.is_file():
        return None
    try:
        name = json.loads(path.read_text())["prompt_format"]
    except (ValueError, KeyError, TypeError) as err:
        raise PopulaError(f"{path}: unreadable ({err!r})") from None
    if name not in FORMAT_NAMES:
        raise PopulaError(f"{path}: prompt format must be one of {', '.join(FORMAT_NAMES)}, got {name!r}")
    return name


def _model_dir(tokenizer: Any) -> Path | None:
    where = getattr(tokenizer, "name_or_path", "") or ""
    return Path(where) if where and Path(where).is_dir() else None


def _inferred_format(tokenizer: Any, model_dir: Path | None) -> str:
    """The fallback for a base that declares no format, kept only for bases built before the
    declaration existed: a tokenizer with the tiny tokenizer's `<|end|>` token is a tiny base
    (compact); a directory the registry converted (its `popula_model.json` marker) is a small
    model (instruct-direct); anything else (a hub id, a user's directory) gets instruct."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    if COMPACT_EOS in vocab:
        return "compact"
    if model_dir is not None and (model_dir / "popula_model.json").is_file():
        return "instruct-direct"
    return "instruct"


def prompt_format(tokenizer: Any) -> PromptFormat:
    """The format the tokenizer's base model was made for, as its directory declares it
    (`FORMAT_FILE`, written by `write_format`); a base that declares none falls back to
    `_inferred_format`, which predates the declaration."""
    model_dir = _model_dir(tokenizer)
    name = (declared_format(model_dir) if model_dir is not None else None) or _inferred_format(tokenizer, model_dir)
    if name == "compact":
        return CompactFormat()
    return InstructFormat(tokenizer, direct=name == "instruct-direct")


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Token ids that end a completion: the EOS token, and `<|end|>` where the vocabulary has it."""
    ids = []
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    if COMPACT_EOS in vocab and vocab[COMPACT_EOS] not in ids:
        ids.append(vocab[COMPACT_EOS])
    return ids


# Module-level shortcuts in the compact format, the project default (the tiny base).
_COMPACT = CompactFormat()
teacher_prompt = _COMPACT.teacher_prompt
parse_proposal = _COMPACT.parse_proposal
student_prompt = _COMPACT.student_prompt
parse_answer = _COMPACT.parse_answer
