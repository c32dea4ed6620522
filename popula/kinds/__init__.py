"""The registry of task kinds: every task type, looked up by name.

    from popula.kinds import get_kind, task_types
    get_kind("code_f").answer        # "program"
    task_types()                     # ("code_o", "code_i", "code_f")

A kind is one module (a `TaskKind` subclass, popula/kinds/base.py) and one `register` line
below; records, config, prompts, the generator, the sandbox's plan, the cold-start corpus,
evaluation and the CLI look kinds up here instead of naming types. Light on purpose: no
torch, nothing from the rest of popula but its errors, so `popula.config` and
`popula.records` can read it.
"""

from __future__ import annotations

from popula.errors import PopulaError
from popula.kinds.base import ANSWER_FORMS, AnswerForm, TaskKind
from popula.kinds.code_f import CodeFunction
from popula.kinds.code_i import CodeInput
from popula.kinds.code_o import CodeOutput

__all__ = ["ANSWER_FORMS", "KINDS", "AnswerForm", "TaskKind", "default_types", "get_kind", "register", "task_types",
           "unregister"]

KINDS: dict[str, TaskKind] = {}


def register(kind: TaskKind) -> TaskKind:
    """Add a kind under its name (listing order is registration order); a name is registered once."""
    if kind.name in KINDS:
        raise PopulaError(f"task kind {kind.name!r} is already registered")
    if kind.answer not in ANSWER_FORMS:
        raise PopulaError(f"task kind {kind.name!r}: answer form {kind.answer!r} is not one of {', '.join(ANSWER_FORMS)}")
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind (a test's own kind, when the test ends)."""
    del KINDS[name]


def task_types() -> tuple[str, ...]:
    """The registered kinds' names, in registration order."""
    return tuple(KINDS)


def default_types() -> tuple[str, ...]:
    """The kinds a config gets when it names none (`tasks.types`): those that declare `default`."""
    return tuple(name for name, kind in KINDS.items() if kind.default)


def get_kind(name: str) -> TaskKind:
    """The kind named `name`, or an error listing the known ones."""
    kind = KINDS.get(name)
    if kind is None:
        raise PopulaError(f"task type {name!r} is unknown; expected one of {', '.join(KINDS)}")
    return kind


register(CodeOutput())
register(CodeInput())
register(CodeFunction())
