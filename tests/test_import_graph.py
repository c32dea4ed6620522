"""The import graph of `popula`, `evolution` and `benchmarks`, read from the source with `ast`.

- No module imports itself back through others (module-level and function-level imports both
  count: a function-level import runs as surely as a module-level one, only later). Importing
  `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`, so those count as imported too.
- Nor do popula's parts (its subpackages and top-level modules) import each other in a circle,
  so that one part can be read, and changed, knowing only the parts below it.
- `evolution` is a standalone library: it imports nothing from `popula`.
- A module named by an import path string, "popula.engines.torch_engine:TorchEngine" (the engine
  registry's lazy builders, `popula/engines/registry.py`), is imported as surely: it counts too.
- In `popula` and `evolution`, a project module is imported inside a function only on purpose: to defer a heavy
  dependency (torch before the command sets its OpenMP waits, the optional vllm, matplotlib,
  or torch in Ray actors that never need it), said in a `# deferred: <why>` comment on the
  line above the import, or above the block of imports it stands in (or on its own line).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("popula", "evolution")
SCRIPTS = "benchmarks"  # scripts that import each other by bare module name
DEFERRED = "# deferred:"


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (a module of this repository)
    line: int
    in_function: bool


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    for path in sorted((ROOT / SCRIPTS).glob("*.py")):
        found[f"{SCRIPTS}.{path.stem}"] = (path, False)
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    """The longest prefix of a dotted name that is a module of this repository."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = (module if is_package else module.rpartition(".")[0]).split(".")
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        # `from a.b import c` imports the module a.b.c when there is one, else the name c of a.b
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    if module.startswith(f"{SCRIPTS}."):  # benchmarks put their own folder on sys.path
        names += [f"{SCRIPTS}.{n}" for n in names if f"{SCRIPTS}.{n}" in MODULES]
    targets = set()
    for name in names:
        found = _known(name)
        while found:  # the module and every package above it run
            targets.add(found)
            found = _known(found.rpartition(".")[0])
    own = {module.rsplit(".", n)[0] for n in range(module.count(".") + 1)}  # its own packages
    return targets - own


def _path_target(node: ast.AST) -> str | None:
    """The module a "package.module:attribute" string names, if it is one of this repository's."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node.value.count(":") != 1:
        return None
    module = node.value.partition(":")[0]
    return module if module in MODULES and module.startswith(tuple(f"{p}." for p in PACKAGES)) else None


def _imports() -> list[Import]:
    edges = []
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue  # for type checkers only: never runs
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in sorted(_targets(module, is_package, child)):
                        edges.append(Import(module, target, child.lineno, in_function))
                named = _path_target(child)
                if named is not None and named != module:  # imported by path when called: never unexplained
                    for target in sorted(_targets(module, is_package, ast.Import(names=[ast.alias(named)]))):
                        edges.append(Import(module, target, child.lineno, False))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(tree, False)
    return edges


IMPORTS = _imports()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _explain(cycles: list[list[str]], graph: dict[str, set[str]]) -> str:
    return "; ".join(
        " | ".join(f"{a} -> {b}" for a in cycle for b in sorted(graph.get(a, ())) if b in cycle) for cycle in cycles
    )


def _part(module: str) -> str:
    """The part of the project a module belongs to: popula.<subpackage or top-level module>."""
    return ".".join(module.split(".")[:2]) if module.startswith("popula.") else module.split(".")[0]


def test_the_ast_reading_sees_known_imports():
    # A guard for the reading itself: if it missed imports, the tests below would pass vacuously.
    pairs = {(i.source, i.target) for i in IMPORTS}
    assert ("popula.run.population", "evolution") in pairs
    assert ("popula.run.population", "popula.league") in pairs
    assert ("popula.run.parts.builders", "popula.learner") in pairs  # a function-level one
    assert ("popula.engines.registry", "popula.engines.torch_engine") in pairs  # by its import path
    assert ("benchmarks.ray_overhead", "benchmarks.population_overhead") in pairs
    assert len(MODULES) > 80


def test_no_module_imports_itself_back():
    graph: dict[str, set[str]] = {}
    for i in IMPORTS:
        graph.setdefault(i.source, set()).add(i.target)
    cycles = _cycles(graph)
    assert not cycles, f"import cycles: {_explain(cycles, graph)}"


def test_populas_parts_import_each_other_in_one_direction():
    graph: dict[str, set[str]] = {}
    for i in IMPORTS:
        a, b = _part(i.source), _part(i.target)
        if a != b and a.startswith("popula"):
            graph.setdefault(a, set()).add(b)
    cycles = _cycles(graph)
    assert not cycles, f"parts importing each other: {_explain(cycles, graph)}"


def test_evolution_imports_nothing_from_popula():
    wrong = [f"{i.source}:{i.line} -> {i.target}" for i in IMPORTS
             if i.source.split(".")[0] == "evolution" and i.target.split(".")[0] != "evolution"]
    assert not wrong, wrong


def test_project_modules_are_imported_inside_functions_only_on_purpose():
    unexplained = []
    for i in IMPORTS:
        if not i.in_function or i.source.split(".")[0] not in PACKAGES:
            continue
        lines = MODULES[i.source][0].read_text().splitlines()
        above = i.line - 2  # the comment stands above the block of imports this one is in
        while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
            above -= 1
        if DEFERRED not in lines[i.line - 1] and not (above >= 0 and lines[above].strip().startswith(DEFERRED)):
            unexplained.append(f"{MODULES[i.source][0].relative_to(ROOT)}:{i.line} imports {i.target}")
    assert not unexplained, f"function-level imports without a `{DEFERRED} <why>` comment: {unexplained}"


OFFLINE = "popula.apps"  # the offline applications: popula eval's targets, popula retention, the ladder
PARTS = "popula.run.parts"  # what the loop is built from and placed with


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_run_loop_stands_on_its_parts_and_imports_no_offline_application():
    loop = [i for i in IMPORTS if _within(i.source, "popula.run") and not _within(i.source, PARTS)]
    assert loop, "the loop's imports were not read"
    wrong = [f"{i.source}:{i.line} -> {i.target}" for i in loop if _within(i.target, OFFLINE)]
    assert not wrong, f"the run loop imports an offline application: {wrong}"
    upward = [f"{i.source}:{i.line} -> {i.target}" for i in IMPORTS if _within(i.source, PARTS)
              and (_within(i.target, "popula.run") and not _within(i.target, PARTS) and i.target != "popula.run"
                   or _within(i.target, OFFLINE))]
    assert not upward, f"the loop's parts import the loop or an application above it: {upward}"
    below = [f"{i.source}:{i.line} -> {i.target}" for i in IMPORTS if _within(i.source, "popula.eval")
             and (_within(i.target, "popula.run") or _within(i.target, OFFLINE))]
    assert not below, f"popula/eval/, below the loop, imports the loop or an application: {below}"


def test_the_layers_architecture_md_draws_are_the_imports():
    """ARCHITECTURE.md § Layers: each line imports only from lines below it."""
    import re

    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    level: dict[str, int] = {}
    lines = [line.split("  ")[0] for line in block.strip().splitlines()]
    for i, line in enumerate(reversed(lines)):
        for name in re.findall(r"\b(popula/\w+|evolution|benchmarks)", line):
            level.setdefault(name.replace("/", "."), i)

    def part(module: str) -> str:
        return "benchmarks" if module.startswith("benchmarks") else _part(module)

    parts = {part(m) for m in MODULES} - {"popula", "popula.__main__"}
    assert parts <= set(level), f"parts the layers leave out: {sorted(parts - set(level))}"
    wrong = sorted({f"{i.source} -> {i.target}" for i in IMPORTS
                    if part(i.source) in level and part(i.target) in level and part(i.source) != part(i.target)
                    and level[part(i.target)] >= level[part(i.source)]})
    assert not wrong, f"imports that do not run down the layers: {wrong}"
