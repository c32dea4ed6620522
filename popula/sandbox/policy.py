"""Static checks and compilation, done once per task in the pool's process.

Compiling and checking are pure and deterministic, so the pool does them once here
rather than in both validation runs; workers receive code objects (marshalled).

The check reads the *bytecode* rather than the syntax tree: `compile` already parses,
and a scan of the instructions of every code object costs a fraction of a second
`ast.parse` plus a tree walk (the verifier's throughput budget is ~1 ms per task). The
bytecode says exactly what the tree says for this purpose: which global names are read
(LOAD_GLOBAL/LOAD_NAME), which attributes are touched (LOAD_ATTR, LOAD_METHOD, STORE_ATTR,
DELETE_ATTR), which modules and names are imported (IMPORT_NAME, IMPORT_FROM), and on
which receiver a private attribute is used (the preceding LOAD_FAST). Nothing here
executes task text, and texts are capped in length before they are compiled.

The one exception to "bytecode only": a text that reads `.format` or `.format_map`
(str's methods read attributes of their arguments by name, at C level) or `.__dict__`
(shown for some objects only, rules.DICT_ATTRIBUTE) is parsed once more and every such
read (for .format, on anything but a literal template) is compiled as a call of the
worker's checker instead (_with_format_checks), which checks the template's fields or the
object when the call runs. The generated tasks never do this, so it costs the common
case nothing.
"""

from __future__ import annotations

import ast
import builtins
import dis
import functools
import os
import sys
import warnings
import weakref
from dataclasses import dataclass
from types import CodeType

from popula.sandbox import rules


@dataclass(frozen=True)
class Rejection:
    """Why a piece of task text cannot run: a reason of docs/design.md § Task records and a human detail."""

    reason: str
    detail: str


class _Forbidden(Exception):
    pass


_OP = dis.opmap
_CACHE = _OP.get("CACHE", -1)
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_GLOBAL_OPS = {_OP["LOAD_GLOBAL"], _OP["LOAD_NAME"]}
_ATTR_OPS = {_OP[name] for name in ("LOAD_ATTR", "STORE_ATTR", "DELETE_ATTR", "LOAD_METHOD") if name in _OP}
_LOAD_ATTR = _OP["LOAD_ATTR"]
_LOAD_SUPER_ATTR = _OP.get("LOAD_SUPER_ATTR", -1)
_IMPORT_NAME = _OP["IMPORT_NAME"]
_IMPORT_FROM = _OP["IMPORT_FROM"]
_LOAD_CONST = _OP["LOAD_CONST"]
_LOCAL_OPS = {_OP[name] for name in ("LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK") if name in _OP}
_STORE_GLOBAL_OPS = {_OP[n] for n in ("STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL")}
_PY312 = sys.version_info >= (3, 12)


def _name_index(op: int, arg: int) -> int:
    """The co_names index an instruction refers to (its encoding changed in 3.11/3.12)."""
    if op == _OP["LOAD_GLOBAL"]:
        return arg >> 1
    if op == _LOAD_ATTR and _PY312:
        return arg >> 1
    if op == _LOAD_SUPER_ATTR:
        return arg >> 2
    return arg


def _instructions(code: CodeType):
    """(opcode, argument) pairs of one code object, without inline caches."""
    raw = code.co_code
    ext = 0
    for i in range(0, len(raw), 2):
        op, arg = raw[i], raw[i + 1]
        if op == _CACHE:
            continue
        if op == _EXTENDED_ARG:
            ext = (ext | arg) << 8
            continue
        yield op, ext | arg
        ext = 0


def _local_name(code: CodeType, op: int, arg: int) -> str:
    """The local variable a LOAD_FAST/LOAD_DEREF reads (3.11+: one "fast locals" index)."""
    if op == _OP.get("LOAD_DEREF"):
        cells = tuple(n for n in code.co_cellvars if n not in code.co_varnames)
        names = code.co_varnames + cells + code.co_freevars
    else:
        names = code.co_varnames
    return names[arg] if arg < len(names) else ""


_MATCH_CLASS = _OP.get("MATCH_CLASS", -1)
_STORE_ATTR = _OP["STORE_ATTR"]
_STORE_NAME = _OP["STORE_NAME"]
_BUILD_SET = _OP["BUILD_SET"]
_SET_OPS = {_OP[n] for n in ("BUILD_SET", "SET_ADD", "SET_UPDATE") if n in _OP}
# What makes a program order-sensitive (it may build a set; see _check_code), by name: the
# set types, their methods, the dict views that take set operators (`d.keys() | e.keys()`
# is a set) and their abstract classes, and the routes to an attribute by computed name.
_SET_NAMES = frozenset({"set", "frozenset", "getattr", "vars"})
_SET_METHODS = frozenset({
    "union", "intersection", "difference", "symmetric_difference", "set", "frozenset",
    "Set", "MutableSet", "AbstractSet", "FrozenSet", "attrgetter", "methodcaller",
})
# Dict views and their abstract classes build a set only through an operator (`|`, `&`,
# `-`, `^`, in place or from the operator module): they count only beside one.
_VIEW_NAMES = frozenset({"keys", "items", "KeysView", "ItemsView"})
_SET_OPERATOR_NAMES = frozenset({"or_", "and_", "sub", "xor", "ior", "iand", "isub", "ixor"})
_BINARY_OP = _OP.get("BINARY_OP", -1)
_SET_OPERATOR_ARGS = frozenset({1, 7, 10, 12, 14, 20, 23, 25})  # &, |, -, ^ and their in-place forms (3.11)
_FORMAT_METHODS = rules.FORMAT_METHODS
_CHECKED_READS = _FORMAT_METHODS | {rules.DICT_ATTRIBUTE}  # compiled as calls of the worker's checker
_DELETE_ATTR = _OP["DELETE_ATTR"]


def _all_codes(code: CodeType) -> list[CodeType]:
    out, stack = [], [code]
    while stack:
        c = stack.pop()
        out.append(c)
        stack.extend(k for k in c.co_consts if isinstance(k, CodeType))
    return out


def _own_names(codes: list[CodeType], decoded: list[list[tuple[int, int]]]) -> set[str]:
    """Attribute names the program defines itself: `x.name = ...` anywhere, and names bound
    in class bodies (methods and class attributes) or as globals (module level, `global`)."""
    own: set[str] = set()
    for code, instructions in zip(codes, decoded):
        for op, arg in instructions:
            if op == _STORE_ATTR or op in _STORE_GLOBAL_OPS:
                own.add(code.co_names[arg])
    return own


def _check_attribute(attr: str, own: set[str], what: str = "attribute", reading: bool = True) -> None:
    if attr in rules.FRAME_ATTRIBUTES:
        raise _Forbidden(f"uses the {what} {attr!r}")
    if attr in rules.REGISTRY_ATTRIBUTES and attr not in own:
        raise _Forbidden(f"uses the registry method {attr!r}")
    if attr.startswith("_"):
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in rules.SAFE_DUNDER_ATTRIBUTES and not (reading and attr in rules.READ_ONLY_DUNDER_ATTRIBUTES):
                raise _Forbidden(f"{'uses' if reading else 'assigns or deletes'} the dunder {what} {attr!r}")
        elif attr not in rules.PUBLIC_UNDERSCORE_ATTRIBUTES and (attr not in own or attr in rules.stdlib_private_names()):
            raise _Forbidden(f"uses the private {what} {attr!r}")


def _check_const(const: object, own: set[str], depth: int = 0, rewritten: bool = False) -> None:
    """Strings anywhere in the constants, tuples and frozensets included (class-pattern
    keywords, getattr names, format templates are constants). In rewritten code the
    checker calls name '__dict__' (the text itself was checked before the rewrite)."""
    if isinstance(const, str):
        if _is_unsafe_dunder(const) and not (rewritten and const == rules.DICT_ATTRIBUTE):
            # getattr(x, "__class__"), "__cla" + "ss__" (folded by the compiler), ...
            raise _Forbidden(f"contains the string {const!r}, a dunder attribute name")
        if const in rules.FRAME_ATTRIBUTES:
            raise _Forbidden(f"contains the string {const!r}, an interpreter-internal attribute name")
        if const in rules.REGISTRY_ATTRIBUTES and const not in own:
            raise _Forbidden(f"contains the string {const!r}, a registry method name")
    elif isinstance(const, (tuple, frozenset)) and depth < 20:
        for item in const:
            _check_const(item, own, depth + 1, rewritten)


def _check_code(code: CodeType, skip_globals: frozenset[str] = frozenset(),
                rewritten: bool = False) -> tuple[bool, bool]:
    """Raise _Forbidden for the first use of something outside the policy (rules.py).

    Returns (order-sensitive, needs checked reads). Order-sensitive: the code may build sets
    (displays, comprehensions, set()/frozenset(), set methods, dict views, frozenset
    constants, names reached by string or computed name: _SET_NAMES, _SET_METHODS), whose
    iteration order of strings depends on the hash seed, or keep a caught exception, whose
    message may hold such a set or an address (_binds_exceptions), or may go on past a
    MemoryError, which tells how much memory the run had (_may_outlive_memory_error), so its
    validation needs more runs (pool.py). Needs checked reads: it reads `.format`/`.format_map` or `.__dict__`
    somewhere, so it must be compiled again with those reads checked (_with_format_checks);
    `rewritten` says it was, and then only .format reads on a literal template may remain
    (checked here).
    """
    codes = _all_codes(code)
    decoded = [list(_instructions(c)) for c in codes]
    own = _own_names(codes, decoded)
    sets = reads_format = False
    for c, instructions in zip(codes, decoded):
        if not rewritten and _mentions_checker(c):
            raise _Forbidden(f"uses the name {rules.FORMAT_CHECKER!r}, which the sandbox reserves")
        one_sets, one_reads = _check_one(c, instructions, own, skip_globals, rewritten)
        sets, reads_format = sets or one_sets, reads_format or one_reads
        for const in c.co_consts:
            if not isinstance(const, CodeType):
                _check_const(const, own, rewritten=rewritten)
                if isinstance(const, frozenset) or (isinstance(const, str) and const in _SET_METHODS):
                    sets = True  # a frozenset constant; a set-building name reached by string
    if not sets and (_views_with_set_operators(codes, decoded) or _binds_exceptions(decoded)
                     or _may_outlive_memory_error(codes, decoded, own)):
        sets = True
    return sets, reads_format


_EXC_MATCH = frozenset(dis.opmap[name] for name in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH") if name in dis.opmap)
_STORES = frozenset(dis.opmap[name] for name in ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"))
_JUMPS_IF_FALSE = frozenset(op for name, op in dis.opmap.items() if "JUMP" in name and "IF_FALSE" in name)


def _binds_exceptions(decoded: list[list[tuple[int, int]]]) -> bool:
    """Whether the program keeps an exception it caught (`except E as e`): its message may
    hold text that no run controls, such as the repr of a set built inside library code or
    an object's address, so the program is treated as order-sensitive (more runs)."""
    for instructions in decoded:
        for i, (op, _) in enumerate(instructions[:-2]):
            if op in _EXC_MATCH:
                after = [o for o, _ in instructions[i + 1 : i + 3] if o not in _JUMPS_IF_FALSE]
                if after and after[0] in _STORES:
                    return True
    return False


_PUSH_EXC_INFO = dis.opmap["PUSH_EXC_INFO"]
_LOAD_GLOBAL, _LOAD_NAME, _BUILD_TUPLE = dis.opmap["LOAD_GLOBAL"], dis.opmap["LOAD_NAME"], dis.opmap["BUILD_TUPLE"]
# Built-in exceptions that never match a MemoryError (all but it and its bases).
_NARROW_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(MemoryError, value)
)


def _may_outlive_memory_error(codes: list[CodeType], decoded: list[list[tuple[int, int]]], own: set[str]) -> bool:
    """Whether some handler of the program could go on after a MemoryError: a bare
    `except`, `except Exception`, a `with` (contextlib.suppress), a `finally` (it may
    return), a name the program binds itself. How far a run got before its memory ran out
    depends on its memory limit, which every run draws anew (zygote._jitter_heap), so such a
    program gets the large run group; handlers that name only other built-in exceptions
    (`except (ValueError, KeyError)`) cannot see it and keep two runs."""
    for code, instructions in zip(codes, decoded):
        for i, (op, _) in enumerate(instructions):
            if op != _PUSH_EXC_INFO:
                continue
            k = i + 1
            while k < len(instructions) and instructions[k][0] in (_LOAD_GLOBAL, _LOAD_NAME):
                load, arg = instructions[k]
                name = code.co_names[arg >> 1 if load == _LOAD_GLOBAL else arg]
                if name not in _NARROW_EXCEPTIONS or name in own:
                    return True
                k += 1
            if k < len(instructions) and instructions[k][0] == _BUILD_TUPLE and k > i + 1:
                k += 1
            if k == i + 1 or k >= len(instructions) or instructions[k][0] not in _EXC_MATCH:
                return True
    return False


def _views_with_set_operators(codes: list[CodeType], decoded: list[list[tuple[int, int]]]) -> bool:
    """Whether the program names a dict view (_VIEW_NAMES) and also a set operator anywhere:
    `d.keys() | e.keys()` is a set, `for k, v in d.items()` alone builds none."""
    names = set()
    for code in codes:
        names.update(code.co_names)
        names.update(c for c in code.co_consts if isinstance(c, str))
    if not names & _VIEW_NAMES:
        return False
    if names & _SET_OPERATOR_NAMES:
        return True
    return any(op == _BINARY_OP and arg in _SET_OPERATOR_ARGS for instructions in decoded for op, arg in instructions)


def _mentions_checker(code: CodeType) -> bool:
    """Whether a code object names the format checker in any way (reads, binds, parameters,
    attributes): before the rewrite, only the task's text can, and it may not."""
    name = rules.FORMAT_CHECKER
    return name in code.co_names or name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars


def _check_format_read(attr: str, receiver: object, rewritten: bool) -> bool:
    """A read of .format/.format_map; True when the code must be compiled with format checks.

    Before the rewrite every such read counts, the ones on a literal too: the instruction
    before a read is not always its receiver (`(t or '{}').format`, where both branches
    end at the read). After it, only reads on a literal template are left, whose fields
    are checked here, as the worker's checker checks the others' when they run."""
    if not rewritten:
        return True
    if not isinstance(receiver, str):
        raise _Forbidden(f"reads .{attr} in a way the sandbox cannot check (e.g. in an augmented assignment)")
    hidden = rules.hidden_format_field(receiver)
    if hidden is not None:
        raise _Forbidden(f"calls .{attr} on the template {receiver[:80]!r}, which reads the attribute {hidden!r}")
    return False


def _check_one(code: CodeType, instructions: list[tuple[int, int]], own: set[str], skip_globals: frozenset[str],
               rewritten: bool = False) -> tuple[bool, bool]:
    names = code.co_names
    consts = code.co_consts
    prev: tuple[int, int] = (-1, 0)
    prev2: tuple[int, int] = (-1, 0)
    sets = reads_format = False
    for op, arg in instructions:
        if op in _GLOBAL_OPS:
            name = names[_name_index(op, arg)]
            if name in _SET_NAMES:
                sets = True
            if name in skip_globals:
                pass
            elif name in rules.REMOVED_BUILTINS:
                raise _Forbidden(f"uses the forbidden builtin {name!r}")
            elif name.startswith("__") and name.endswith("__") and name not in rules.SAFE_DUNDER_NAMES:
                raise _Forbidden(f"uses the dunder name {name!r}")
        elif op in _ATTR_OPS or op == _LOAD_SUPER_ATTR:
            attr = names[_name_index(op, arg)]
            if attr == rules.DICT_ATTRIBUTE:
                reads_format = _check_dict_read(op, rewritten) or reads_format
                continue
            _check_attribute(attr, own, reading=op != _STORE_ATTR and op != _DELETE_ATTR)
            if attr in _SET_METHODS:
                sets = True
            if attr in _FORMAT_METHODS and op != _STORE_ATTR and op != _DELETE_ATTR:
                # str.format reads attributes of its arguments by name, at C level
                receiver = consts[prev[1]] if prev[0] == _LOAD_CONST else None
                reads_format = _check_format_read(attr, receiver, rewritten) or reads_format
        elif op == _MATCH_CLASS:
            if arg:
                # positional sub-patterns read the names in the class's __match_args__ at C level,
                # which a program can compute (type(), namedtuple, a metaclass __instancecheck__
                # that matches any object): allowed only on the built-in types that match
                # themselves, named as the builtin (not rebound by the program)
                cls = names[_name_index(*prev2)] if prev2[0] in _GLOBAL_OPS else None
                if cls not in rules.SELF_MATCHING_TYPES or cls in own:
                    raise _Forbidden("uses positional sub-patterns in a class pattern of a class that is not a built-in "
                                     "type (write keyword patterns instead: `case Point(x=a)`)")
            keywords = consts[prev[1]] if prev[0] == _LOAD_CONST else ()
            for attr in keywords if isinstance(keywords, tuple) else ():
                _check_attribute(attr, own, "class-pattern attribute")
                if attr in _FORMAT_METHODS:  # read at C level, past the format checks
                    raise _Forbidden(f"reads .{attr} in a class pattern")
        elif op in _SET_OPS:
            sets = True
        elif op == _IMPORT_NAME:
            module = names[arg]
            level = consts[prev2[1]] if prev2[0] == _LOAD_CONST else None
            if level != 0:
                raise _Forbidden("uses a relative import")
            if module not in rules.ALLOWED_MODULES:
                raise _Forbidden(f"imports the module {module!r}, which the sandbox does not allow")
        elif op in _STORE_GLOBAL_OPS and names[arg] == "__builtins__":
            raise _Forbidden("rebinds '__builtins__'")
        elif op == _STORE_NAME and names[arg] == "__match_args__":
            # positional class patterns read these names at C level: constants only
            value = consts[prev[1]] if prev[0] == _LOAD_CONST else None
            if not isinstance(value, tuple) or not all(isinstance(n, str) for n in value):
                raise _Forbidden("sets __match_args__ to something other than a tuple of literal names")
            for attr in value:
                _check_attribute(attr, own, "__match_args__ name")
                if attr in _FORMAT_METHODS:
                    raise _Forbidden(f"names .{attr} in __match_args__ (class patterns read it past the format checks)")
        elif op == _IMPORT_FROM:
            if names[arg].startswith("_"):
                raise _Forbidden(f"imports the private name {names[arg]!r}")
        prev2, prev = prev, (op, arg)
    return sets, reads_format


def _check_dict_read(op: int, rewritten: bool) -> bool:
    """An attribute instruction on `__dict__`; True when the code must be compiled with
    checked reads. Assigning or deleting it is forbidden; after the rewrite no read may
    remain (one that does was not an expression the rewrite could reach)."""
    if op == _STORE_ATTR or op == _DELETE_ATTR:
        raise _Forbidden("assigns or deletes the dunder attribute '__dict__'")
    if rewritten:
        raise _Forbidden("reads .__dict__ in a way the sandbox cannot check (e.g. in an augmented assignment)")
    return True


def _is_unsafe_dunder(text: str) -> bool:
    """'__x__' for an identifier x that is not itself wrapped in underscores ('_____' is
    just underscores, never an attribute Python defines) and not a safe dunder."""
    inner = text[2:-2]
    return (
        len(text) > 4
        and text.startswith("__")
        and text.endswith("__")
        and inner.isidentifier()
        and not inner.startswith("_")
        and not inner.endswith("_")
        and text not in rules.SAFE_DUNDER_ATTRIBUTES
        and text not in rules.READ_ONLY_DUNDER_ATTRIBUTES
        and text not in ("__name__", "__main__")
    )


def _too_long(text: str, what: str, limit: int) -> Rejection | None:
    if len(text) > limit:
        return Rejection("syntax", f"{what} has {len(text)} characters (limit {limit})")
    return None


def _compile_error(what: str, err: BaseException) -> Rejection:
    """CPython gives up on deeply nested source with a bare MemoryError (its parser's stack) or a
    RecursionError (its compiler's); measured on 3.11 with `"-" * n + "42"`: the compiler stops
    near n = 3000 (3 x the recursion limit), the parser near 6000, brackets at 200. The message
    names these limits so the author knows what to change."""
    if isinstance(err, (MemoryError, RecursionError)):
        return Rejection("syntax", f"{what}: nested too deeply to compile ({type(err).__name__}): Python compiles "
                                   "at most about 3000 nested operators or calls and 200 nested brackets; write it "
                                   "with less nesting")
    return Rejection("syntax", f"{what}: {type(err).__name__}: {err}")


def _quiet_compile(source: str, filename: str, mode: str) -> CodeType:
    """compile() without CPython's SyntaxWarnings ("invalid decimal literal", "perhaps you missed
    a comma?"): generated code earns them by the dozen, and they went to the run's console."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return compile(source, filename, mode, dont_inherit=True)


def _compile(source: str, mode: str, what: str) -> CodeType | Rejection:
    try:
        return _quiet_compile(source, _filename(what), mode)
    except SyntaxError as err:
        return Rejection("syntax", f"{what}: {err.msg} (line {err.lineno})")
    except (ValueError, RecursionError, MemoryError, OverflowError) as err:
        return _compile_error(what, err)


def _filename(what: str) -> str:
    return f"<{what}>"


# The test-only switch that runs jobs without the policy, static or in-process, as if a job
# had escaped it (docs/security.md § The policy breaks: what then). The jail is unchanged.
POLICY_ENV = "POPULA_SANDBOX_POLICY"


def policy_off() -> bool:
    """Whether the test-only switch POPULA_SANDBOX_POLICY=off is set."""
    return os.environ.get(POLICY_ENV) == "off"


def _checked(code: CodeType, what: str, source: str, mode: str) -> CodeType | Rejection:
    """The checked code of `source` (compiled as `code`), with reads of .format/.format_map
    compiled as checked calls where it has any; or why it cannot run."""
    if policy_off():
        try:  # what decides run counts still applies; where the check stops early, the most runs
            if _check_code(code)[0]:
                _ORDER_SENSITIVE.add(code)
        except _Forbidden:
            _ORDER_SENSITIVE.add(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            pass
        return code
    try:
        sets, reads_format = _check_code(code)
        if reads_format:
            code = _with_format_checks(source, _filename(what), mode)
            sets, _ = _check_code(code, frozenset({rules.FORMAT_CHECKER}), rewritten=True)
        if sets:
            _ORDER_SENSITIVE.add(code)
    except _Forbidden as err:
        return Rejection("forbidden", f"{what} {err}")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        return _compile_error(what, err)  # the second compile (from the tree) gave up
    return code


def _with_format_checks(source: str, filename: str, mode: str) -> CodeType:
    """`source` compiled with every read of .format/.format_map, except on a literal str
    template, as a call of the worker's checker: `t.format` becomes
    `__popula_format__(t, 'format')`, which returns str's method wrapped in a check of the
    template's fields when it is called (zygote.checked_format_read), or the attribute
    itself when it is not str's. So every route to str.format through an attribute read
    is checked: `t.format(...)`, `str.format(t, ...)`, `S.format` on a subclass,
    `super().format`, a bound method kept for later; getattr(t, 'format') is the worker's
    getattr, which checks the same way. The new nodes take the place (lines, columns) of
    the read they replace, so tracebacks and compile_argument_lists' spans stay as they
    were. The tree is walked with a stack, not recursion: sources nest up to the compiler's
    limits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(source, filename, mode)
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            for field, value in ast.iter_fields(node):
                if isinstance(value, list):
                    for i, item in enumerate(value):
                        if isinstance(item, ast.AST):
                            value[i] = item = _format_read(item)
                            stack.append(item)
                elif isinstance(value, ast.AST):
                    new = _format_read(value)
                    if new is not value:
                        setattr(node, field, new)
                    stack.append(new)
        return compile(tree, filename, mode, dont_inherit=True)


def _format_read(node: ast.AST) -> ast.AST:
    """`node`, or the checked call that replaces it when it reads .format/.format_map on
    anything but a literal str, or .__dict__ (stores and deletes of such attributes stay as
    they are)."""
    if not (type(node) is ast.Attribute and node.attr in _CHECKED_READS and type(node.ctx) is ast.Load):
        return node
    if node.attr in _FORMAT_METHODS and type(node.value) is ast.Constant and type(node.value.value) is str:
        return node  # a literal template: its fields are checked statically (_check_format_read)
    at = {"lineno": node.lineno, "col_offset": node.col_offset,
          "end_lineno": node.end_lineno, "end_col_offset": node.end_col_offset}
    checker = ast.Name(id=rules.FORMAT_CHECKER, ctx=ast.Load(), **at)
    return ast.Call(func=checker, args=[node.value, ast.Constant(value=node.attr, **at)], keywords=[], **at)


# Code objects (programs, argument lists) found to build sets; see _check_code. Weakly
# held, so the set does not keep code alive beyond the compile caches.
_ORDER_SENSITIVE: "weakref.WeakSet[CodeType]" = weakref.WeakSet()


def order_sensitive(code: CodeType) -> bool:
    """Whether a checked program or argument list builds sets (its validation needs more runs)."""
    return code in _ORDER_SENSITIVE


@functools.lru_cache(maxsize=4096)
def compile_program(source: str, max_chars: int, what: str = "program") -> CodeType | Rejection:
    """A program that defines `f`, checked and compiled; or why not.

    Cached: judging many rollouts of one task compiles its program once (code objects
    are immutable, so sharing them is safe)."""
    if rejected := _too_long(source, what, max_chars):
        return rejected
    code = _compile(source, "exec", what)
    if isinstance(code, Rejection):
        return code
    if "f" not in code.co_names:  # module-level code binds f with STORE_NAME f
        return Rejection("no_entry_function", f"{what} defines no top-level function f")
    return _checked(code, what, source, "exec")


# Each input becomes `lambda: _PACK(\n<text>\n)`: an anonymous packer, so that no name
# exists that an input could mention to reach the worker's own helpers.
_PACK = "(lambda *a, **k: (a, k))"


def compile_argument_lists(sources: list[str], max_chars: int, what: str = "inputs") -> list[CodeType] | Rejection:
    """See _compile_argument_lists; cached like compile_program (a fresh list per call)."""
    compiled = _compile_argument_lists(tuple(sources), max_chars, what)
    return compiled if isinstance(compiled, Rejection) else list(compiled)


@functools.lru_cache(maxsize=4096)
def _compile_argument_lists(sources: tuple[str, ...], max_chars: int, what: str) -> tuple[CodeType, ...] | Rejection:
    """Argument lists (`a, b=c` each) as code objects returning (args, kwargs); or why not.

    All lists of a task compile in one go (compiling is the pool's main cost): the
    source is `(lambda: PACK(\n<text 0>\n), lambda: PACK(\n<text 1>\n), ...)` and each
    lambda's code object is one input. An input that closes its parenthesis early to
    smuggle code past its neighbours (`1), lambda: g(`) changes the number of lambdas or
    the lines they start and end on, and is rejected. What this does not catch is an input
    that closes its call and continues it on the same lines (`1)[0:0] + ((5,), {}`): that
    still runs only policy-checked code in the sandbox, and the worker refuses any result
    that is not an (args, kwargs) pair, so the worst case is an oddly written input.
    """
    lines, starts, parts = 2, [], []
    for i, text in enumerate(sources):
        if rejected := _too_long(text, f"{what}[{i}]", max_chars):
            return rejected
        if "\r" in text:
            return Rejection("syntax", f"{what}[{i}] contains a carriage return")
        starts.append(lines)
        parts.append(f"lambda: {_PACK}(\n{text}\n),\n")
        lines += text.count("\n") + 3
    source = "(\n" + "".join(parts) + ")"
    try:
        code = _quiet_compile(source, _filename(what), "eval")
    except SyntaxError as err:
        return _blame_input(sources, what, err)
    except (ValueError, RecursionError, MemoryError, OverflowError) as err:
        return _compile_error(what, err)
    lambdas = [c for c in code.co_consts if isinstance(c, CodeType)]
    spans = [(c.co_firstlineno, max((p[1] or 0) for p in c.co_positions())) for c in lambdas]
    expected = [(start, start + text.count("\n") + 2) for start, text in zip(starts, sources)]
    if spans != expected:  # each call must close on its own closing line
        return Rejection("syntax", f"{what} are not separate argument lists")
    checked = _checked(code, what, source, "eval")
    if isinstance(checked, Rejection):
        return checked
    lambdas = [c for c in checked.co_consts if isinstance(c, CodeType)]  # the same, format-checked if rewritten
    if order_sensitive(checked):
        _ORDER_SENSITIVE.update(lambdas)
    return tuple(lambdas)


def place_argument_lists(sources: list[str], max_chars: int, what: str = "inputs") -> list[CodeType] | Rejection:
    """What compile_argument_lists(sources) gives, made from each source's own compile
    (cached) moved to its lines: code objects equal to a joint compile's, lines included.
    For jobs that put a task's inputs and extras together anew each time (plan.Slotted):
    a fresh joint compile and check of each would cost the pool process more than the
    rest of judging them."""
    placed, line = [], 2
    for i, text in enumerate(sources):
        one = _compile_argument_lists((text,), max_chars, what)
        if isinstance(one, Rejection):
            return Rejection(one.reason, f"{what}[{i}]: {one.detail}")
        code = _moved(one[0], line - 2)
        if order_sensitive(one[0]):
            _ORDER_SENSITIVE.add(code)
        placed.append(code)
        line += text.count("\n") + 3
    return placed


def _moved(code: CodeType, lines: int) -> CodeType:
    """`code` and the code objects in it, `lines` further down (positions are relative)."""
    consts = tuple(_moved(c, lines) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_firstlineno=code.co_firstlineno + lines, co_consts=consts)


def _blame_input(sources: tuple[str, ...] | list[str], what: str, err: SyntaxError) -> Rejection:
    """Name the input that broke the joint compile (the failure path only, so cost is moot)."""
    for i, text in enumerate(sources):
        try:
            _quiet_compile(f"{_PACK}(\n{text}\n)", "<input>", "eval")
        except SyntaxError as own:
            return Rejection("syntax", f"{what if len(sources) == 1 else f'{what}[{i}]'}: {own.msg}")
        except (ValueError, RecursionError, MemoryError, OverflowError) as own:
            return _compile_error(f"{what}[{i}]", own)
    return Rejection("syntax", f"{what}: {err.msg}")
