"""A random generator of small, valid, deterministic Python functions `f`, and tasks from them.

The tiny base model is cold-started on these programs, tests use them, and held-out
evaluation sets are drawn from them. The generator is typed: every expression it writes
has a known type (int, str, list of ints, tuple of ints, dict of str to int), so programs
are well-formed by construction, and it avoids the operations that fail at run time
(indexing an empty list, division by a variable, `max` of nothing) or blow up (powers,
unbounded loops). The sandbox still runs every program before it becomes a task: the
generator only makes invalid programs rare, it does not vouch for them.

Difficulty knobs: `statements` (top-level statements before the return), `depth`
(how deep blocks nest), `n_vars` (how many local variables a body may introduce) and
`params` (arguments of `f`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from popula.errors import PopulaError
from popula.kinds import get_kind, task_types
from popula.records import TaskRecord
from popula.sandbox import Sandbox

INT, STR, LIST, TUPLE, DICT = "int", "str", "list", "tuple", "dict"
HELDOUT_NAMESPACE = "heldout"  # the stream `popula tasks` draws from; training corpora use others
_LETTERS = "abcde"
_INDENT = "    "


@dataclass(frozen=True)
class Difficulty:
    """How big and how nested a generated program may be."""

    statements: int = 3
    depth: int = 1
    n_vars: int = 2
    params: int = 1

    def __post_init__(self) -> None:
        if self.statements < 0 or self.depth < 0 or self.n_vars < 0 or not 1 <= self.params <= 3:
            raise PopulaError(f"difficulty {self} is out of range (params must be 1..3, the rest >= 0)")


PRESETS: dict[str, Difficulty] = {
    "easy": Difficulty(statements=0, depth=0, n_vars=0, params=1),
    "medium": Difficulty(statements=2, depth=1, n_vars=2, params=1),
    "hard": Difficulty(statements=4, depth=2, n_vars=4, params=2),
}
# "mixed" draws each program's difficulty from these presets, with these weights.
MIXED_WEIGHTS: dict[str, float] = {"easy": 0.35, "medium": 0.4, "hard": 0.25}


def resolve_difficulty(spec: str | Difficulty) -> Callable[[random.Random], Difficulty]:
    """Turn a preset name, "mixed" or a Difficulty into a per-program chooser."""
    if isinstance(spec, Difficulty):
        return lambda rng: spec
    if spec == "mixed":
        names, weights = list(MIXED_WEIGHTS), list(MIXED_WEIGHTS.values())
        return lambda rng: PRESETS[rng.choices(names, weights)[0]]
    if spec in PRESETS:
        preset = PRESETS[spec]
        return lambda rng: preset
    raise PopulaError(f"difficulty {spec!r} is unknown; expected one of {', '.join([*PRESETS, 'mixed'])}")


# ---------------------------------------------------------------------------------------------
# Random values (inputs)


def random_value(rng: random.Random, kind: str) -> object:
    """A small random value of a type: small numbers keep outputs short and checkable."""
    if kind == INT:
        return rng.randint(-5, 20) if rng.random() < 0.8 else rng.randint(20, 99)
    if kind == STR:
        return "".join(rng.choice(_LETTERS + "xyz") for _ in range(rng.randint(0, 7)))
    if kind == LIST:
        return [rng.randint(-3, 9) for _ in range(rng.randint(0, 6))]
    if kind == TUPLE:
        return tuple(rng.randint(0, 9) for _ in range(rng.randint(2, 4)))
    if kind == DICT:
        keys = rng.sample(_LETTERS, rng.randint(1, 3))
        return {k: rng.randint(0, 9) for k in sorted(keys)}
    raise ValueError(kind)


def random_input(rng: random.Random, param_types: Sequence[str]) -> str:
    """An argument list (Python source) matching a signature: `f(<this>)` calls it."""
    return ", ".join(repr(random_value(rng, kind)) for kind in param_types)


# ---------------------------------------------------------------------------------------------
# Programs


@dataclass
class Program:
    """A generated program with what a task needs to know about it."""

    source: str
    param_types: list[str]
    return_type: str
    features: list[str]

    @property
    def message(self) -> str:
        """A short hint for kinds that carry one (code_f): signature types and the constructs used."""
        sig = ", ".join(self.param_types)
        used = ", ".join(self.features) if self.features else "one expression"
        return f"({sig}) -> {self.return_type}; {used}"


_PARAM_NAMES = {INT: ["n", "k", "x"], STR: ["s", "w", "t"], LIST: ["a", "nums", "xs"], TUPLE: ["p", "q"], DICT: ["d", "m"]}
_LOCAL_NAMES = {
    INT: ["total", "count", "acc", "best", "m", "r", "c"],
    STR: ["res", "out", "text", "u"],
    LIST: ["vals", "items", "b", "ys"],
    DICT: ["seen", "freq"],
}
_LOOP_NAMES = {INT: ["i", "j"], STR: ["ch", "c"], LIST: ["v", "e"]}


class _Builder:
    """Writes one program; holds the scope (name -> type) while it does."""

    def __init__(self, rng: random.Random, diff: Difficulty) -> None:
        self.rng = rng
        self.diff = diff
        self.scope: dict[str, str] = {}
        self.lines: list[str] = []
        self.features: list[str] = []
        self.locals_made = 0
        self.helper: tuple[str, str] | None = None  # (name, type) of a nested helper
        self.loop_vars: set[str] = set()
        self.spent: set[str] = set()

    # -- small helpers -------------------------------------------------------------------
    def feature(self, name: str) -> None:
        if name not in self.features:
            self.features.append(name)

    def vars_of(self, kind: str, assignable: bool = False) -> list[str]:
        return [v for v, t in self.scope.items() if t == kind and not (assignable and v in self.loop_vars)]

    def new_name(self, kind: str) -> str | None:
        for name in _LOCAL_NAMES[kind]:  # a fixed order: fewer names for a small model to keep apart
            if name not in self.scope:
                return name
        return None

    def emit(self, indent: int, text: str) -> None:
        self.lines.append(_INDENT * indent + text)

    def small(self, lo: int = 1, hi: int = 5) -> str:
        return str(self.rng.randint(lo, hi))

    def letter(self) -> str:
        return repr(self.rng.choice(_LETTERS))

    # -- expressions ---------------------------------------------------------------------
    def int_expr(self, depth: int = 1) -> str:
        r = self.rng
        options: list[Callable[[], str]] = [lambda: self.small(0, 9)]
        if self.vars_of(INT):
            options += [lambda: r.choice(self.vars_of(INT))] * 3
        for v in self.vars_of(STR):
            options += [lambda v=v: f"len({v})", lambda v=v: f"{v}.count({self.letter()})", lambda v=v: f"{v}.find({self.letter()})"]
        for v in self.vars_of(LIST) + self.vars_of(TUPLE):
            options += [
                lambda v=v: f"len({v})",
                lambda v=v: f"sum({v})",
                lambda v=v: f"max({v}, default=0)",
                lambda v=v: f"min({v}, default=0)",
                lambda v=v: f"{v}.count({self.small(0, 9)})",
                lambda v=v: f"({v}[-1] if {v} else 0)",
            ]
        for v in self.vars_of(DICT):
            options += [lambda v=v: f"len({v})", lambda v=v: f"sum({v}.values())", lambda v=v: f"{v}.get({self.letter()}, 0)"]
        if self.helper and self.helper[1] == INT and depth > 0:
            options += [lambda: f"{self.helper[0]}({self.int_expr(0)})"] * 2
        if depth > 0:
            options += [
                lambda: f"{self.int_expr(depth - 1)} {r.choice(['+', '-', '+'])} {self.int_expr(depth - 1)}",
                lambda: f"{self.int_expr(depth - 1)} * {self.small(2, 4)}",
                lambda: f"{self.int_atom(depth - 1)} // {self.small(2, 5)}",
                lambda: f"{self.int_atom(depth - 1)} % {self.small(2, 7)}",
                lambda: f"abs({self.int_expr(depth - 1)})",
                lambda: f"({self.int_expr(depth - 1)} if {self.cond(depth - 1)} else {self.int_expr(depth - 1)})",
            ]
        return r.choice(options)()

    def int_atom(self, depth: int) -> str:
        text = self.int_expr(depth)
        return text if text.replace("_", "").isalnum() or text.endswith(")") and text.startswith(("len", "sum", "max", "min", "abs")) else f"({text})"

    def str_expr(self, depth: int = 1) -> str:
        r = self.rng
        options: list[Callable[[], str]] = [lambda: repr("".join(r.choice(_LETTERS) for _ in range(r.randint(1, 3))))]
        strs = self.vars_of(STR)
        for v in strs:
            options += [
                lambda v=v: v,
                lambda v=v: v,
                lambda v=v: f"{v}[::-1]",
                lambda v=v: f"{v}[{self.small(0, 2)}:{self.small(2, 5)}]",
                lambda v=v: f"{v}.upper()",
                lambda v=v: f"{v}.replace({self.letter()}, {self.letter()})",
                lambda v=v: f"''.join(sorted({v}))",
                lambda v=v: f"{v}.strip({self.letter()})",
            ]
        for v in self.vars_of(INT):
            options += [lambda v=v: f"str({v})"]
        for v in self.vars_of(LIST) + self.vars_of(TUPLE):
            options += [lambda v=v: f"''.join(str(e) for e in {v})"]
        for v in self.vars_of(DICT):
            options += [lambda v=v: f"''.join(sorted({v}))"]
        if self.helper and self.helper[1] == STR and depth > 0:
            options += [lambda: f"{self.helper[0]}({self.str_expr(0)})"] * 2
        if depth > 0 and strs:
            options += [
                lambda: f"{self.str_expr(depth - 1)} + {self.str_expr(depth - 1)}",
                lambda: f"{r.choice(strs)} * {self.small(2, 3)}",
            ]
        return r.choice(options)()

    def list_expr(self, depth: int = 1) -> str:
        r = self.rng
        options: list[Callable[[], str]] = [lambda: f"list(range({self.small(1, 6)}))"]
        seqs = self.vars_of(LIST) + self.vars_of(TUPLE)
        for v in seqs:
            options += [
                lambda v=v: f"sorted({v})",
                lambda v=v: f"list({v})[::-1]" if self.scope[v] == TUPLE else f"{v}[::-1]",
                lambda v=v: f"list({v}[{self.small(0, 2)}:{self.small(2, 5)}])" if self.scope[v] == TUPLE else f"{v}[{self.small(0, 2)}:{self.small(2, 5)}]",
                lambda v=v: self.comprehension(v, depth),
                lambda v=v: self.comprehension(v, depth),
            ]
        for v in self.vars_of(STR):
            options += [lambda v=v: f"[ord(c) % {self.small(5, 12)} for c in {v}]", lambda v=v: f"[len(x) for x in {v}.split({self.letter()})]"]
        for v in self.vars_of(INT):
            options += [lambda v=v: f"list(range({v} % {self.small(4, 8)}))"]
        for v in self.vars_of(DICT):
            options += [lambda v=v: f"sorted({v}.values())"]
        if depth > 0 and self.vars_of(LIST):
            options += [lambda: f"{r.choice(self.vars_of(LIST))} + [{self.int_expr(0)}]"]
        return r.choice(options)()

    def comprehension(self, source: str, depth: int) -> str:
        self.feature("comprehension")
        var = self.rng.choice(["x", "y", "e"])
        while var in self.scope:
            var += "1"
        self.scope[var] = INT
        body = self.int_expr(min(depth, 1))
        cond = f" if {self.cond(0)}" if self.rng.random() < 0.5 else ""
        del self.scope[var]
        if var not in body and var not in cond:
            body = f"{var} {self.rng.choice(['+', '*', '-'])} {self.small(1, 3)}"
        return f"[{body} for {var} in {source}{cond}]"

    def cond(self, depth: int = 0) -> str:
        r = self.rng
        options: list[Callable[[], str]] = [
            lambda: f"{self.int_expr(depth)} {r.choice(['>', '<', '==', '>=', '!=', '<='])} {self.int_expr(0)}",
            lambda: f"{self.int_atom(depth)} % {self.small(2, 4)} == {self.small(0, 1)}",
        ]
        for v in self.vars_of(STR):
            options += [lambda v=v: f"{self.letter()} in {v}", lambda v=v: f"{v}.startswith({self.letter()})"]
        for v in self.vars_of(LIST) + self.vars_of(TUPLE):
            options += [lambda v=v: f"{self.small(0, 9)} in {v}"]
        for v in self.vars_of(DICT):
            options += [lambda v=v: f"{self.letter()} in {v}"]
        return r.choice(options)()

    def expr(self, kind: str, depth: int = 1) -> str:
        return {INT: self.int_expr, STR: self.str_expr, LIST: self.list_expr}[kind](depth)

    def new_value(self, target: str, kind: str) -> str:
        """An expression to assign to `target` that is not `target` itself."""
        for _ in range(4):
            value = self.expr(kind)
            if value != target:
                return value
        return self.expr(kind, 0) + (" + 1" if kind == INT else "")

    # -- statements ----------------------------------------------------------------------
    def block(self, write: Callable[[], bool]) -> bool:
        """Run a block writer; names it binds stay inside it (a loop may run zero times)."""
        before = set(self.scope)
        done = write()
        for name in set(self.scope) - before:
            del self.scope[name]
        return done

    def statement(self, indent: int, depth_left: int) -> None:
        r = self.rng
        choices: list[tuple[float, Callable[[], bool]]] = [(3.0, lambda: self.assign(indent))]
        if depth_left > 0:
            choices += [
                (3.0, lambda: self.for_loop(indent, depth_left)),
                (1.5, lambda: self.block(lambda: self.if_block(indent, depth_left))),
                (1.0, lambda: self.while_loop(indent, depth_left)),
            ]
        weights = [w for w, _ in choices]
        for _ in range(8):
            if r.choices([f for _, f in choices], weights)[0]():
                return
        self.assign(indent, force_existing=True)

    def assign(self, indent: int, force_existing: bool = False) -> bool:
        r = self.rng
        kind = r.choice([INT, INT, STR, LIST])
        existing = self.vars_of(kind, assignable=True)
        fresh = None if force_existing or self.locals_made >= self.diff.n_vars else self.new_name(kind)
        if fresh is None and not existing:
            if force_existing:
                fresh = self.new_name(INT) or "z"
                kind = INT
            else:
                return False
        if fresh is None or (existing and r.random() < 0.4):
            target = r.choice(existing)
            if kind == INT and r.random() < 0.5:
                self.emit(indent, f"{target} {r.choice(['+=', '-='])} {self.int_expr(1)}")
            else:
                self.emit(indent, f"{target} = {self.new_value(target, kind)}")
            return True
        self.emit(indent, f"{fresh} = {self.expr(kind)}")
        self.scope[fresh] = kind
        self.locals_made += 1
        return True

    def accumulator(self, indent: int) -> tuple[str, str] | None:
        """Make (or reuse) a variable a loop body can update."""
        r = self.rng
        kind = r.choice([INT, INT, STR, LIST, DICT])
        existing = self.vars_of(kind, assignable=True)
        if existing and r.random() < 0.5:
            return existing[-1], kind
        if self.locals_made >= self.diff.n_vars + 1:
            return (existing[-1], kind) if existing else None
        name = self.new_name(kind)
        if name is None:
            return None
        init = {INT: r.choice(["0", "0", "1"]), STR: "''", LIST: "[]", DICT: "{}"}[kind]
        self.emit(indent, f"{name} = {init}")
        self.scope[name] = kind
        self.locals_made += 1
        self.feature("accumulator")
        return name, kind

    def update(self, indent: int, acc: str, kind: str, item: str, item_kind: str) -> None:
        r = self.rng
        if kind == INT:
            if item_kind == INT:
                self.emit(indent, r.choice([f"{acc} += {item}", f"{acc} += {self.int_expr(1)}", f"{acc} = {acc} * {self.small(2, 3)} + {item}", f"{acc} = max({acc}, {item})"]))
            else:
                self.emit(indent, f"{acc} += {r.choice(['1', f'ord({item}) % ' + self.small(3, 9)])}")
        elif kind == STR:
            if item_kind == STR:
                self.emit(indent, r.choice([f"{acc} += {item}", f"{acc} = {item} + {acc}", f"{acc} += {item}.upper()"]))
            else:
                self.emit(indent, f"{acc} += str({item})")
        elif kind == LIST:
            value = item if item_kind == INT and r.random() < 0.5 else self.int_expr(1)
            self.emit(indent, f"{acc}.append({value})")
            self.feature("list method")
        else:
            key = item if item_kind == STR else f"str({item} % {self.small(2, 5)})"
            self.emit(indent, f"{acc}[{key}] = {acc}.get({key}, 0) + 1")
            self.feature("dict")

    def loop_body(self, indent: int, depth_left: int, acc: str, kind: str, item: str, item_kind: str) -> bool:
        r = self.rng
        if depth_left > 1 and r.random() < 0.5:
            return self.if_block(indent, depth_left - 1, acc=(acc, kind, item, item_kind))
        self.update(indent, acc, kind, item, item_kind)
        if r.random() < 0.25 and depth_left > 1:
            self.statement(indent, depth_left - 1)
        return True

    def for_loop(self, indent: int, depth_left: int) -> bool:
        r = self.rng
        sources = [(v, LIST if self.scope[v] in (LIST, TUPLE) else STR) for v in self.vars_of(LIST) + self.vars_of(TUPLE) + self.vars_of(STR)]
        sources += [(f"range({self.small(1, 6)})", "range")]
        for v in self.vars_of(INT):
            sources.append((f"range({v} % {self.small(3, 7)})", "range"))
        for v in self.vars_of(DICT):
            sources.append((f"sorted({v})", STR))
        acc = self.accumulator(indent)
        if acc is None:
            return False
        # never iterate over the accumulator itself: appending to it would never end
        source, skind = r.choice([(src, kind) for src, kind in sources if src != acc[0]])
        item_kind = STR if skind == STR else INT
        pool = _LOOP_NAMES[STR if item_kind == STR else (INT if skind == "range" else LIST)]
        item = next((n for n in pool if n not in self.scope), None)
        if item is None:
            return False
        self.emit(indent, f"for {item} in {source}:")
        self.feature("for")
        self.scope[item] = item_kind
        frozen = {item, source} - self.loop_vars  # nothing in the body may touch what drives the loop
        self.loop_vars |= frozen
        self.block(lambda: self.loop_body(indent + 1, depth_left, acc[0], acc[1], item, item_kind))
        del self.scope[item]
        self.loop_vars -= frozen
        return True

    def while_loop(self, indent: int, depth_left: int) -> bool:
        counter = self.new_name(INT)
        acc = self.accumulator(indent)
        if counter is None or acc is None or acc[0] == counter:
            return False
        self.emit(indent, f"{counter} = abs({self.int_expr(0)})")
        self.scope[counter] = INT
        self.locals_made += 1
        self.emit(indent, f"while {counter} > 0:")
        self.feature("while")
        self.loop_vars.add(counter)  # the body must not reassign it: that is what ends the loop
        self.update(indent + 1, acc[0], acc[1], f"{counter} % {self.small(2, 10)}" if acc[1] != STR else f"str({counter} % 10)", INT)
        self.emit(indent + 1, f"{counter} //= {self.small(2, 4)}")
        self.loop_vars.discard(counter)
        self.spent.add(counter)  # always 0 after the loop: not worth returning
        return True

    def if_block(self, indent: int, depth_left: int, acc: tuple[str, str, str, str] | None = None) -> bool:
        self.emit(indent, f"if {self.cond(1)}:")
        if acc is not None:
            self.feature("if")
            self.update(indent + 1, *acc)
            if self.rng.random() < 0.6:
                self.emit(indent, "else:")
                self.update(indent + 1, *acc)
            return True
        kind = self.rng.choice([INT, STR, LIST])
        targets = self.vars_of(kind, assignable=True)
        if not targets:
            self.lines.pop()
            return False
        self.feature("if")
        target = self.rng.choice(targets)
        self.emit(indent + 1, f"{target} = {self.new_value(target, kind)}")
        if self.rng.random() < 0.6:
            self.emit(indent, "else:")
            self.emit(indent + 1, f"{target} = {self.new_value(target, kind)}")
        return True

    def maybe_helper(self) -> None:
        if self.diff.depth < 1 or self.rng.random() > 0.3:
            return
        kind = self.rng.choice([INT, STR]) if self.vars_of(STR) else INT
        if kind == INT:
            body = f"v * {self.small(2, 3)} {self.rng.choice(['+', '-'])} {self.small(1, 5)}" if self.rng.random() < 0.6 else f"v // {self.small(2, 3)} if v % 2 == 0 else v + {self.small(1, 3)}"
        else:
            body = self.rng.choice(["v[::-1]", "v + v[:1]", f"v.replace({self.letter()}, '')", "v.upper()"])
        self.emit(1, "def g(v):")
        self.emit(2, f"return {body}")
        self.helper = ("g", kind)
        self.feature("helper")

    def build(self) -> Program:
        r = self.rng
        weights = {INT: 3, STR: 3, LIST: 4, TUPLE: 1, DICT: 1}
        n_params = r.randint(1, self.diff.params)
        param_types = r.choices(list(weights), list(weights.values()), k=n_params)
        names: list[str] = []
        for kind in param_types:
            name = next(n for n in _PARAM_NAMES[kind] if n not in names)
            names.append(name)
            self.scope[name] = kind
        self.loop_vars.update(v for v, t in self.scope.items() if t in (TUPLE, DICT))
        self.maybe_helper()
        count = r.randint(max(0, self.diff.statements - 1), self.diff.statements)
        for _ in range(count):
            self.statement(1, self.diff.depth)
        return_type, ret = self.return_expr()
        self.emit(1, f"return {ret}")
        source = f"def f({', '.join(names)}):\n" + "\n".join(self.lines)
        return Program(source=source, param_types=param_types, return_type=return_type, features=self.features)

    def return_expr(self) -> tuple[str, str]:
        """Return what the body computed: the newest locals first, else an expression."""
        r = self.rng
        made = [v for v in self.scope if v not in self.loop_vars | self.spent and v in sum(_LOCAL_NAMES.values(), [])]
        if made and r.random() < 0.85:
            newest = made[-1]
            kind = self.scope[newest]
            if len(made) > 1 and r.random() < 0.3:
                other = made[-2]
                return TUPLE, f"({newest}, {other})"
            if kind == DICT:
                return LIST, r.choice([f"sorted({newest}.items())", f"sorted({newest}.values())"])
            return kind, newest
        kind = r.choice([INT, STR, LIST]) if self.vars_of(STR) or self.vars_of(LIST) else INT
        if kind == STR and not self.vars_of(STR):
            kind = INT
        for _ in range(10):  # an expression of the arguments, not a constant
            text = self.expr(kind, 2 if self.diff.depth else 1)
            if any(name in text for name in self.scope):
                break
        return kind, text


def generate_program(rng: random.Random, difficulty: Difficulty) -> Program:
    """One random program `f` of the given difficulty, drawn from `rng`."""
    return _Builder(rng, difficulty).build()


# ---------------------------------------------------------------------------------------------
# Tasks


def _draft_tasks(rng: random.Random, choose: Callable[[random.Random], Difficulty], types: Sequence[str], prefix: str, start: int, count: int) -> list[TaskRecord]:
    drafts = []
    for i in range(start, start + count):
        task_type = rng.choice(list(types))
        program = generate_program(rng, choose(rng))
        kind = get_kind(task_type)
        inputs = _distinct_inputs(rng, program.param_types, kind.proposal_inputs)
        drafts.append(
            TaskRecord(
                id=f"{prefix}-{i}",
                type=task_type,  # type: ignore[arg-type]
                program=program.source,
                inputs=inputs,
                message=program.message if kind.hint else "",
            )
        )
    return drafts


def _distinct_inputs(rng: random.Random, param_types: Sequence[str], n: int) -> list[str]:
    inputs: list[str] = []
    for _ in range(n * 5):
        value = random_input(rng, param_types)
        if value not in inputs:
            inputs.append(value)
        if len(inputs) == n:
            break
    while len(inputs) < n:  # a tiny input space (e.g. one small dict): repeats are still valid
        inputs.append(random_input(rng, param_types))
    return inputs


def generate_tasks(
    n: int,
    seed: int,
    difficulty: str | Difficulty = "mixed",
    types: Iterable[str] | None = None,
    *,
    namespace: str = "gen",
    workers: int = 2,
    verify: bool = True,
) -> list[TaskRecord]:
    """`n` valid tasks drawn from `seed`, with outputs filled in by the sandbox.

    `namespace` separates random streams: the cold-start corpus and held-out sets use
    different namespaces, so the same seed never yields the same tasks for both. With
    `verify=False` the drafts come back without outputs (for callers that verify them
    in a sandbox of their own). `types` defaults to every registered kind.
    """
    types = list(task_types() if types is None else types)
    bad = [t for t in types if t not in task_types()]
    if bad or not types:
        raise PopulaError(f"task types {bad or types} are unknown; expected some of {', '.join(task_types())}")
    if n < 0:
        raise PopulaError(f"cannot generate {n} tasks")
    rng = random.Random(f"{namespace}:{seed}")
    choose = resolve_difficulty(difficulty)
    prefix = f"{namespace}{seed}"
    if not verify:
        return _draft_tasks(rng, choose, types, prefix, 0, n)
    tasks: list[TaskRecord] = []
    made = 0
    with Sandbox(workers=workers) as sandbox:
        for _ in range(20):  # a few rounds: each one replaces the programs the sandbox rejected
            missing = n - len(tasks)
            if missing <= 0:
                break
            drafts = _draft_tasks(rng, choose, types, prefix, made, missing + missing // 10 + 1)
            made += len(drafts)
            for draft, result in zip(drafts, sandbox.verify(drafts)):
                if result.valid and len(tasks) < n:
                    draft.outputs = list(result.outputs)
                    tasks.append(draft)
    if len(tasks) < n:
        raise RuntimeError(f"the sandbox rejected too many generated programs: {len(tasks)} of {n} valid")
    return tasks
