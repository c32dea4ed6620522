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
from popula.records import TASK_TYPES, TaskRecord

K_REFERENCES = 6  # reference tasks a teacher sees (as in Absolute Zero)
CODE_F_INPUTS = 10  # inputs a code_f proposal carries: half shown, half hidden
COMPACT_EOS = "<|end|>"  # the tiny tokenizer's end-of-sequence token
COMPACT_PAD = "<|pad|>"


def shown_pairs(task: TaskRecord) -> list[tuple[str, str]]:
    """The input/output pairs a code_f student sees: the first half (the rest judge it)."""
    return list(zip(task.inputs, task.outputs))[: max(1, len(task.inputs) // 2)]


def _need_outputs(task: TaskRecord) -> None:
    if task.type in ("code_i", "code_f") and len(task.outputs) != len(task.inputs):
        raise PopulaError(f"task {task.id}: a {task.type} student prompt needs the outputs the sandbox computes")


def _check_type(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise PopulaError(f"task type {task_type!r} is unknown; expected one of {', '.join(TASK_TYPES)}")


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

_COMPACT_HEAD = {"code_o": "output", "code_i": "input", "code_f": "program"}
_CALL = re.compile(r"^>>> f\((.*)\)$")


def _cut_eos(text: str) -> str:
    return text.split(COMPACT_EOS, 1)[0]


class CompactFormat:
    """Doctest-like prompts, short enough for a model of a few million parameters.

    A student prompt for code_o reads `## output`, the program, `>>> f(<input>)`; the
    completion is the output repr. code_i shows `f(?) == <output>` and expects the
    argument list; code_f shows the hint as a comment and the shown pairs, and expects the
    program. A teacher prompt lists the references under `### ref` and ends in `### new`;
    the completion is a program followed by one `>>> f(...)` line per input (and, for
    code_f, the hint as a `# ` line).
    """

    name = "compact"

    def __init__(self, max_references: int = 3) -> None:
        # A model of a few million parameters trained for minutes has a short useful
        # context: it sees only the last `max_references` of the references it is given.
        self.max_references = max_references

    def teacher_prompt(self, task_type: str, references: Sequence[TaskRecord]) -> str:
        _check_type(task_type)
        parts = [f"## propose {_COMPACT_HEAD[task_type]}"]
        for ref in list(references)[-self.max_references :] if self.max_references else []:
            parts.append("### ref")
            parts.append(ref.program.rstrip())
            if task_type == "code_f":
                parts.append(f"# {ref.message}" if ref.message else "#")
            else:
                parts.append(f">>> f({ref.inputs[0]})")
        parts.append("### new")
        return "\n".join(parts) + "\n"

    def proposal_completion(self, task: TaskRecord) -> str:
        lines = [task.program.rstrip()]
        lines += [f">>> f({x})" for x in task.inputs]
        if task.type == "code_f":
            lines.append(f"# {task.message}")
        return "\n".join(lines)

    def parse_proposal(self, text: str, task_type: str) -> TaskRecord | None:
        _check_type(task_type)
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
        _check_type(task.type)
        _need_outputs(task)
        head = f"## {_COMPACT_HEAD[task.type]}\n"
        if task.type == "code_o":
            return f"{head}{task.program.rstrip()}\n>>> f({task.inputs[0]})\n"
        if task.type == "code_i":
            return f"{head}{task.program.rstrip()}\nf(?) == {task.outputs[0]}\n"
        pairs = "".join(f">>> f({x})\n{y}\n" for x, y in shown_pairs(task))
        return f"{head}# {task.message}\n{pairs}"

    def answer_completion(self, task: TaskRecord, answer: str) -> str:
        return answer.rstrip() if task.type == "code_f" else answer.strip()

    def parse_answer(self, text: str, task_type: str) -> str | None:
        _check_type(task_type)
        body = _cut_eos(text)
        if task_type == "code_f":
            body = body.strip("\n").rstrip()
            return body if body.lstrip().startswith("def ") and "def f(" in body else None
        body = body.strip()
        if not body or "\n" in body:
            return None
        return body


def _proposal(task_type: str, program: str, inputs: list[str], message: str) -> TaskRecord | None:
    """Shape-check a parsed proposal: a program, and one input (code_o/i) or several (code_f)."""
    if not program.strip() or not inputs or any(not x for x in inputs):
        return None
    if task_type == "code_f":
        if len(inputs) < 2:
            return None
        inputs = inputs[:CODE_F_INPUTS]
    else:
        inputs = inputs[:1]
    return TaskRecord(id="proposal", type=task_type, program=program, inputs=inputs, message=message if task_type == "code_f" else "")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Instruction format (real models)

_TASK_WORDS = {
    "code_o": "predict the output of a Python function for a given input",
    "code_i": "find an input for which a Python function returns a given output",
    "code_f": "write a Python function from input/output examples and a hint",
}
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
        return "<answer>\n```python\ndef f(" if task_type == "code_f" else "<answer>"

    def _proposal_prefill(self) -> str:
        return "<program>\n```python\ndef f(" if self.direct else ""

    def teacher_prompt(self, task_type: str, references: Sequence[TaskRecord]) -> str:
        _check_type(task_type)
        lines = [
            f"You are a teacher. Design a new task in which a student must {_TASK_WORDS[task_type]}. "
            "The task should be hard for a strong student but solvable.",
            "",
            f"Here are {len(references)} reference tasks; yours must be different:",
        ]
        for i, ref in enumerate(references, 1):
            lines += ["", f"Reference {i}:", "```python", ref.program.rstrip(), "```"]
            if task_type == "code_f" and ref.message:
                lines.append(f"Hint: {ref.message}")
            lines.append(f"Input: {ref.inputs[0]}")
        lines += ["", _RULES, ""]
        if task_type == "code_f":
            want = (
                f"{CODE_F_INPUTS} different inputs, each an argument list in its own <input></input> tag, "
                "and a short hint about what the function does in <message></message> "
                "(the student sees half of the input/output pairs and the hint)"
            )
        else:
            want = "one input (an argument list, as in f(<input>)) in <input></input>"
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
        if task.type == "code_f":
            parts.append(f"<message>{task.message}</message>")
        return _after_prefill("\n".join(parts), self._proposal_prefill())

    def parse_proposal(self, text: str, task_type: str) -> TaskRecord | None:
        _check_type(task_type)
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
        _check_type(task.type)
        _need_outputs(task)
        if task.type == "code_o":
            body = [
                "Predict the output of this Python function for the given input.",
                "```python", task.program.rstrip(), "```",
                f"Input: f({task.inputs[0]})",
                "Reason step by step, then give the output as a Python literal in <answer></answer>.",
            ]
        elif task.type == "code_i":
            body = [
                "Find an input for which this Python function returns the given output.",
                "```python", task.program.rstrip(), "```",
                f"Output: {task.outputs[0]}",
                "Reason step by step, then give the argument list (what goes inside f(...)) in <answer></answer>.",
            ]
        else:
            pairs = [f"f({x}) == {y}" for x, y in shown_pairs(task)]
            body = [
                "Write a Python function `f` that matches these examples (it is also checked on hidden ones).",
                f"Hint: {task.message}" if task.message else "",
                *pairs,
                "Reason step by step, then give the complete program in <answer></answer> (a ```python block inside is fine).",
            ]
        if self.direct:
            body[-1] = _DIRECT_ASK[task.type]
        return self._render("\n".join(line for line in body if line), self._answer_prefill(task.type))

    def answer_completion(self, task: TaskRecord, answer: str) -> str:
        if task.type == "code_f":
            text = f"<answer>\n```python\n{answer.rstrip()}\n```\n</answer>"
        else:
            text = f"<answer>{answer.strip()}</answer>"
        return _after_prefill(text, self._answer_prefill(task.type))

    def parse_answer(self, text: str, task_type: str) -> str | None:
        _check_type(task_type)
        text = self._answer_prefill(task_type) + text
        found = _last_tag(text, "answer")
        if found is None and self.direct and "</answer>" not in text:
            found = _unclosed_answer(text, task_type)
        if found is None:
            return None
        answer = _strip_fence(found)
        if task_type == "code_f":
            return answer if "def f(" in answer else None
        return answer or None


def _after_prefill(completion: str, prefill: str) -> str:
    """A completion as the model writes it after a direct prompt's prefill."""
    if prefill and not completion.startswith(prefill):
        raise PopulaError(f"a direct-style completion must start with {prefill!r} (a program must begin with `def f(`)")
    return completion[len(prefill):]


_DIRECT_ASK = {
    "code_o": "Reply with only the output, as a Python literal, in <answer></answer>. No explanation.",
    "code_i": "Reply with only the argument list (what goes inside f(...)) in <answer></answer>. No explanation.",
    "code_f": "Reply with only the program in <answer></answer>, as a ```python block. No explanation.",
}


def _unclosed_answer(text: str, task_type: str) -> str | None:
    """The answer of a direct-style completion the model ended without `</answer>`.

    What SmolLM2-135M really writes (tests/data/smollm2/): for code_f, the program and then
    example calls or commentary, with or without the closing fence, so the program is the
    leading `def f(` block; for code_o/code_i, the value on the first line, sometimes an
    explanation below it. An answer must be valid Python where it will be used (an
    expression, or an argument list); a first line that is not is no answer.
    """
    start = text.rfind("<answer>")
    if start < 0:
        return None
    body = text[start + len("<answer>"):]
    if task_type == "code_f":
        fenced = re.match(r"\s*```python\n(.*?)\n```", body, flags=re.S)
        program = fenced.group(1) if fenced else _leading_def(body.lstrip().removeprefix("```python\n"))
        return program if program and _compiles(program, "exec") else None
    line = body.strip().split("\n", 1)[0].strip()
    if not line:
        return None
    return line if _compiles(line if task_type == "code_o" else f"f({line})", "eval") else None


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
