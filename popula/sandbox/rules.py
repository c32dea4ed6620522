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

import _string  # str.format's own template parser (hidden_format_field)
import functools

# Modules a task may import. Everything else is "forbidden" (os, sys, subprocess, socket,
# shutil, pathlib, random, time, threading, multiprocessing, signal, ctypes, importlib, io,
# pickle, inspect, ...; docs/security.md lists why some are refused). `dataclasses` is the
# worker's checked copy (zygote._safe_dataclasses), not the module as it is.
# Submodules must be listed to be importable.
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
        "datetime",
        "calendar",
        "dataclasses",
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
        # update_wrapper(w, f, assigned=(name,)) / updated=(name,) is getattr/setattr with any
        # name, done by functools' own (real) getattr: with '__globals__' it copies a
        # module's globals into the task's. The worker installs versions that accept only
        # the default attribute lists (zygote._safe_functools).
        ("functools", "update_wrapper"),
        ("functools", "wraps"),
        # these read the process's locale (from the environment) or are a command line's entry
        ("calendar", "LocaleTextCalendar"),
        ("calendar", "LocaleHTMLCalendar"),
        ("calendar", "different_locale"),
        ("calendar", "main"),
        # builds its class with types.new_class from a namespace of computed keys (dunders a
        # task cannot write otherwise: __dataclass_fields__, __module__) and a __module__ of
        # 'types', so its methods would be made in the wrong module's globals
        ("dataclasses", "make_dataclass"),
    }
)

# Public objects that module copies keep although they are neither callable nor immutable
# values: calendar's name tables (read-only sequences) and datetime's UTC (a constant).
KEPT_OBJECTS: frozenset[tuple[str, str]] = frozenset(
    {
        ("calendar", "day_name"),
        ("calendar", "day_abbr"),
        ("calendar", "month_name"),
        ("calendar", "month_abbr"),
        ("datetime", "UTC"),
        ("dataclasses", "MISSING"),  # sentinels: field(default=MISSING), `_: KW_ONLY`
        ("dataclasses", "KW_ONLY"),
    }
)

# Library modules that hand a task the results of their own id() calls: copy.deepcopy's
# `memo` (a task passes its own dict, or receives it in __deepcopy__) is keyed by the
# addresses of the objects copied. Their global `id` is the job's masked one (zygote.py),
# so those keys are the per-run numbers id() gives, reported as seeded. The other allowed
# modules' id() calls stay inside them (tests/test_sandbox_determinism.py lists them).
MASKED_ID_MODULES: frozenset[str] = frozenset({"copy"})

# Modules that allowed modules import from C at their first use (datetime's strftime and
# timetuple import time, its strptime _strptime), through the importer of the calling
# task's builtins. The worker imports them before any job, and its importer hands the
# real module to such an import. A task's own `import time` is forbidden like any module
# outside ALLOWED_MODULES (the policy checks import statements, and a task cannot name the
# importer: __import__ and __builtins__ are forbidden, vars() needs an argument).
LAZY_IMPORTS: frozenset[str] = frozenset({"_strptime", "time"})

# Methods deleted from the classes themselves (C types, so a module copy cannot leave them
# out): each reads the clock (`now`, `today`, `utcnow`) or the host's time zone (`fromtimestamp`
# without a zone, `timestamp` and `astimezone` of a naive datetime). A clock read makes a
# coin flip (`now().second % 2`) that both validation runs agree on. The worker deletes them
# before its first job (zygote._strip_class_attributes); `datetime.today` is `date.today`.
STRIPPED_CLASS_ATTRIBUTES: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("datetime", "date", "today"),
        ("datetime", "date", "fromtimestamp"),
        ("datetime", "datetime", "now"),
        ("datetime", "datetime", "utcnow"),
        ("datetime", "datetime", "fromtimestamp"),
        ("datetime", "datetime", "timestamp"),
        ("datetime", "datetime", "astimezone"),
    }
)
# The allowed modules that hand out datetime's objects (calendar's date iterators): none of
# them is importable in a worker that could not delete the methods above.
CLOCK_MODULES: frozenset[str] = frozenset({"datetime", "calendar"})

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
# a __repr__ defined and called). Every other dunder (__subclasses__, __globals__, __code__,
# __builtins__, ...) is an escape hatch and is forbidden, except the reads allowed below
# (__class__, and __dict__ where the worker checks it).
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
        "__post_init__",  # what a dataclass's __init__ calls (super().__post_init__())
    }
)
# (__hash__ is left out on purpose: object.__hash__ is address-based, and the sandbox's
# hash() builtin is what masks such values between a task's runs; see zygote.py.)

# Dunder attributes a program may read but not assign or delete. `x.__class__` is `type(x)`,
# which every program has; the walks that start from a class (__base__, __bases__, __mro__,
# mro, __subclasses__, __dict__ of a class) stay hidden.
READ_ONLY_DUNDER_ATTRIBUTES: frozenset[str] = frozenset({"__class__"})

# `x.__dict__` and `vars(x)` show the attributes of an instance of a task's own class or of
# a module copy; a class's (its mappingproxy holds the private and dunder members the
# policy hides), a function's or a standard-library object's raise as a missing attribute.
# Reads of `.__dict__` are compiled as checked calls like those of .format (policy.py).
DICT_ATTRIBUTE = "__dict__"

# Global names that look like dunders yet are harmless: __name__ (the task's module name)
# and __annotations__ (the dict that `X: int = 3` and annotated class bodies write to).
SAFE_DUNDER_NAMES: frozenset[str] = frozenset({"__name__", "__annotations__"})

# Non-dunder attributes of interpreter internals: frames, code objects, tracebacks,
# generators, coroutines and async generators. Each leads from a value a task can make
# (a generator, an exception) to the frames and globals of whoever runs it. Forbidden as
# attribute names, as string constants (getattr(g, 'gi_frame'), '{0.gi_frame}'.format)
# and, inside the worker, as computed names (the sandbox's getattr hides them).
FRAME_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "gi_frame", "gi_code", "gi_running", "gi_suspended", "gi_yieldfrom",
        "cr_frame", "cr_code", "cr_running", "cr_suspended", "cr_await", "cr_origin",
        "ag_frame", "ag_code", "ag_running", "ag_await",
        "tb_frame", "tb_next", "tb_lasti", "tb_lineno",
        "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_lasti", "f_lineno",
        "f_trace", "f_trace_lines", "f_trace_opcodes",
        "co_code", "co_consts", "co_names", "co_varnames", "co_freevars", "co_cellvars",
        "co_filename", "co_name", "co_qualname", "co_flags", "co_lines", "co_positions",
        "co_linetable", "co_lnotab", "co_exceptiontable", "co_firstlineno", "co_argcount",
        "co_posonlyargcount", "co_kwonlyargcount", "co_nlocals", "co_stacksize",
        "mro",
        "cell_contents",
    }
)

# Single-underscore attributes that are public API (namedtuple's), allowed on any receiver.
PUBLIC_UNDERSCORE_ATTRIBUTES: frozenset[str] = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})

# Methods that change process-wide registries (abc.ABCMeta.register: after
# `Sequence.register(dict)` every later isinstance check in the process changes). Each job
# has a process of its own, so this is a second line: allowed only where the program
# defines a method of that name itself (like private attributes, see policy.py).
REGISTRY_ATTRIBUTES: frozenset[str] = frozenset({"register"})

# Single-underscore names that standard-library objects also carry but that are harmless
# there (data or arithmetic helpers); a program that defines one of these names for its
# own classes may use it (policy.py forbids the other standard-library private names).
HARMLESS_STDLIB_PRIVATE: frozenset[str] = frozenset(
    {"_name", "_add", "_sub", "_mul", "_div", "_mod", "_floordiv", "_divmod", "_hash", "_split",
     "_apply", "_cached", "_mapping", "_getitem", "_mu", "_sigma", "_inst", "_invalid", "_SEP",
     "_ORIGIN", "_numerator", "_denominator", "_richcmp", "_days", "_months", "_firstweekday"}
)
# What `__name__` reads as inside a task, so `if __name__ == "__main__":` blocks are skipped.
TASK_MODULE_NAME = "__popula_task__"

# str.format and str.format_map read attributes of their arguments by name, at C level
# ('{0.gi_frame}'). policy.py compiles every read of these two attributes on anything but
# a literal template into a call of this builtin (the worker's checked_format_read), which
# returns str's methods wrapped in a check of the template's fields when the call runs. A
# task can never name it: it is a dunder name, and the policy rejects any program that
# mentions it before the rewrite.
FORMAT_METHODS: frozenset[str] = frozenset({"format", "format_map"})
FORMAT_CHECKER = "__popula_format__"


@functools.cache
def stdlib_private_names() -> frozenset[str]:
    """Single-underscore attribute names found on the classes and objects a task can reach.

    A program may use a private attribute only if it defines that name itself (policy.py);
    this set closes the loophole of defining, say, `_evaluate` or `_convert_` on a class of
    its own and then calling it on typing.ForwardRef or enum.Enum. A dataclass field may not
    take one of these names either (zygote._safe_dataclasses: asdict and replace read fields
    with the real getattr). Imports every allowed module (the worker has them already).
    """
    import builtins
    import types

    names: set[str] = set()

    def add(kind: type) -> None:
        names.update(n for n in dir(kind) if n.startswith("_") and not (n.startswith("__") and n.endswith("__")))

    for name in ALLOWED_MODULES:
        module = __import__(name, fromlist=["_"])
        for value in vars(module).values():
            if isinstance(value, type):
                add(value)
                add(type(value))
            elif not isinstance(value, types.ModuleType):
                add(type(value))
                inner = getattr(value, "__dict__", None)
                if isinstance(inner, dict):
                    names.update(n for n in inner if isinstance(n, str) and n.startswith("_") and not n.endswith("__"))
    for value in vars(builtins).values():
        if isinstance(value, type):
            add(value)
    return frozenset(names - HARMLESS_STDLIB_PRIVATE - PUBLIC_UNDERSCORE_ATTRIBUTES)


def hidden_attribute(name: str) -> bool:
    """Whether the sandbox hides an attribute read by a name computed at run time (its
    getattr & co. treat it as missing; str.format fields may not read it): a private or
    dunder name other than the safe and read-only ones, or an interpreter-internal one.
    (The worker's setattr and delattr also hide the read-only ones.)"""
    return (
        name.startswith("_") and name not in SAFE_DUNDER_ATTRIBUTES and name not in PUBLIC_UNDERSCORE_ATTRIBUTES
        and name not in READ_ONLY_DUNDER_ATTRIBUTES
    ) or name in FRAME_ATTRIBUTES


def hidden_format_field(template: str, hidden=hidden_attribute, depth: int = 0) -> str | None:
    """The first attribute that str.format/format_map on `template` would read and `hidden`
    hides ('{0.gi_frame}', '{x.__class__}', '{0:{1._secret}}'), or None.

    Parsed by `_string`, the parser str.format itself uses, field by field in the order
    str.format reads them, nested format specs included. An invalid template stops the scan
    where str.format stops too (with its own ValueError), after the fields before it were
    checked. Index fields ('{0[1]}', '{m[key]}') read items, not attributes, and pass."""
    try:
        for _, field, spec, _ in _string.formatter_parser(template):
            if field:
                for is_attribute, name in _string.formatter_field_name_split(field)[1]:
                    if is_attribute and hidden(name):
                        return name
            if spec and "{" in spec and depth < 20:
                found = hidden_format_field(spec, hidden, depth + 1)
                if found is not None:
                    return found
    except ValueError:
        return None
    return None


# Built-in types whose class pattern with one positional sub-pattern matches the subject
# itself (`case int(n)`), reading no attribute; the only ones a positional class pattern
# may use (policy.py).
SELF_MATCHING_TYPES: frozenset[str] = frozenset(
    {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"}
)
