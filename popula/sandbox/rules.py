"""What sandboxed code may use: the allow-lists shared by the static check and the workers.

Standard library only: the worker processes load this file without importing `popula`,
so that the warm parent they fork from stays small (fork cost grows with its memory).

The policy is an allow-list, not a deny-list. Deny-lists of "dangerous" modules are how
Python sandboxes usually fail; here a program may import only modules that compute on
values, and the worker hands it a *copy* of each module holding only the public,
non-module attributes, minus the few that turn strings into attribute access or code.
The operating-system limits (see `zygote.py`) are the real guarantee; these rules make
escapes rare and give the teacher a precise reason ("forbidden") for its reward.
"""

from __future__ import annotations

# Modules a task may import. Everything else is "forbidden" (os, sys, subprocess, socket,
# shutil, pathlib, random, time, datetime, threading, multiprocessing, signal, ctypes,
# importlib, io, pickle, inspect, ...). Submodules must be listed to be importable.
ALLOWED_MODULES: frozenset[str] = frozenset(
    {
        "math",
        "cmath",
        "collections",
        "collections.abc",
        "itertools",
        "functools",
        "operator",
        "heapq",
        "bisect",
        "string",
        "re",
        "typing",
        "fractions",
        "decimal",
        "statistics",
        "copy",
        "json",
        "enum",
        "numbers",
        "textwrap",
        "unicodedata",
        "array",
        "abc",
        "keyword",
    }
)

# Public attributes removed from the module copies: each turns a string into attribute
# access or evaluated code (annotation strings are `eval`-ed by get_type_hints, and
# singledispatch.register calls it; Formatter.get_field walks attribute chains).
STRIPPED_ATTRIBUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("operator", "attrgetter"),
        ("operator", "methodcaller"),
        ("typing", "get_type_hints"),
        ("typing", "ForwardRef"),
        ("functools", "singledispatch"),
        ("functools", "singledispatchmethod"),
        ("string", "Formatter"),
    }
)

# Builtins that do not exist inside the sandbox. A program naming one is "forbidden".
REMOVED_BUILTINS: frozenset[str] = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "input",
        "breakpoint",
        "globals",
        "locals",
        "vars",
        "help",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
        "memoryview",
        "__loader__",
        "__spec__",
        "__build_class__",  # re-added by the worker (class statements need it), never nameable
    }
)

# Dunder attributes a program may touch: the ones ordinary classes use (super().__init__,
# a __repr__ defined and called). Every other dunder (__class__, __subclasses__,
# __globals__, __dict__, __code__, __builtins__, ...) is an escape hatch and is forbidden.
SAFE_DUNDER_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "__init__",
        "__name__",
        "__doc__",
        "__len__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__repr__",
        "__str__",
        "__iter__",
        "__next__",
        "__contains__",
        "__getitem__",
        "__setitem__",
        "__delitem__",
        "__add__",
        "__sub__",
        "__mul__",
        "__bool__",
        "__call__",
    }
)

# Non-dunder attributes that reach interpreter frames and code objects.
FRAME_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "tb_frame",
        "tb_next",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "co_code",
        "mro",
    }
)

# Single-underscore attributes that are public API (namedtuple's), allowed on any receiver.
PUBLIC_UNDERSCORE_ATTRIBUTES: frozenset[str] = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})

# Methods that change process-wide registries (abc.ABCMeta.register: after
# `Sequence.register(dict)` every later isinstance check in the process changes); allowed
# only on the program's own objects (self/cls), like private attributes.
REGISTRY_ATTRIBUTES: frozenset[str] = frozenset({"register", "_abc_register"})

# Receivers on which a program may use single-underscore attributes (its own classes).
PRIVATE_ATTRIBUTE_RECEIVERS: frozenset[str] = frozenset({"self", "cls", "other"})

# The name inputs are wrapped in, `ARGS_NAME(<input>)`, to capture an argument list.
ARGS_NAME = "__popula_args__"
# What `__name__` reads as inside a task, so `if __name__ == "__main__":` blocks are skipped.
TASK_MODULE_NAME = "__popula_task__"
