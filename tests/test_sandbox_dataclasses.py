"""dataclasses in the sandbox (issue 48, item 8): ordinary dataclass programs are judged like
CPython, and what dataclasses trusts cannot be forged
(docs/security.md § What enforces it (popula/sandbox/), item 6; § Refused, and why).

dataclass() writes its methods as source text from the field names and exec()s it, reads
`sys.modules[cls.__module__]`, and computes a class docstring with inspect.signature, which
eval()s text. The worker's copy (zygote._safe_dataclasses) keeps CPython's code and checks
what goes into it: field names are identifiers a task may use as attributes, fields are
Field objects, field dicts are the ones dataclass() made, the class is the task's own.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox
from test_sandbox_determinism import STRICT_RUNS
from test_sandbox_probes import _no_trace

LIMITS = Limits(cpu_s=2, wall_s=4.0, memory_mb=256)

# (program, input): dataclass programs as people write them; outputs must be CPython's own
BENIGN_DATACLASSES = [
    ("from dataclasses import dataclass, field, asdict, astuple, replace, fields, is_dataclass\n"
     "@dataclass(order=True)\nclass P:\n    x: int\n    y: int = 0\n    tags: list = field(default_factory=list)\n"
     "def f(a):\n    p = P(a, 2)\n    q = replace(p, y=5)\n    q.tags.append('t')\n"
     "    return (repr(p), asdict(q), astuple(p), [fl.name for fl in fields(P)], is_dataclass(p), is_dataclass(P),\n"
     "            is_dataclass(a), p < q, sorted([q, p]) == [p, q], p == P(a, 2), p != q, P.__doc__, str(q))", "3"),
    ("from dataclasses import dataclass, FrozenInstanceError\n@dataclass(frozen=True)\nclass K:\n    a: str\n    b: int = 1\n"
     "def f(s):\n    k = K(s)\n    try:\n        k.a = 'z'\n    except FrozenInstanceError as e:\n        err = (type(e).__name__, str(e))\n"
     "    try:\n        del k.b\n    except AttributeError as e:\n        gone = str(e)\n"
     "    return repr(k), err, gone, {k: 1}[K(s)], hash(k) == hash(K(s)), len({K(s), K(s), K('w')})", "'q'"),
    ("import dataclasses\nfrom typing import ClassVar\n@dataclasses.dataclass\nclass C:\n    n: ClassVar[int] = 3\n    s: 'ClassVar[int]' = 4\n"
     "    x: dataclasses.InitVar[int] = 0\n    y: int = 0\n    def __post_init__(self, x):\n        self.y = x * 2\n"
     "def f(v):\n    c = C(v)\n    return repr(c), [g.name for g in dataclasses.fields(c)], C.__doc__, C.n, C.s, dataclasses.astuple(c)", "5"),
    ("from dataclasses import dataclass, field\n@dataclass\nclass Base:\n    name: str\n    size: int = 1\n"
     "    def __post_init__(self):\n        self.name = self.name.title()\n"
     "@dataclass\nclass Child(Base):\n    extra: list = field(default_factory=lambda: [0])\n    hidden: int = field(default=7, repr=False, compare=False)\n"
     "    def __post_init__(self):\n        super().__post_init__()\n        self.extra.append(self.size)\n"
     "def f(n):\n    a, b = Child('ann lee', n), Child('ann lee', n, hidden=9)\n    return repr(a), a == b, a.hidden, b.hidden, Child.__doc__, isinstance(a, Base)", "4"),
    ("from dataclasses import dataclass, asdict, astuple, field\n@dataclass\nclass Item:\n    name: str\n    price: float\n"
     "@dataclass\nclass Order:\n    id: int\n    items: list[Item] = field(default_factory=list)\n    meta: dict = field(default_factory=dict)\n"
     "    def total(self):\n        return sum(i.price for i in self.items)\n"
     "def f(rows):\n    o = Order(1, [Item(n, p) for n, p in rows], {'k': Item('z', 0.5)})\n"
     "    return asdict(o), astuple(o), o.total(), [i.name for i in sorted(o.items, key=lambda i: (-i.price, i.name))]",
     "[('pen', 1.5), ('ink', 2.25), ('cap', 1.5)]"),
    ("from dataclasses import dataclass, KW_ONLY, field, fields, MISSING\n@dataclass\nclass Opt:\n    a: int\n    _: KW_ONLY\n    b: int = 2\n"
     "    c: str = field(default='c', metadata={'unit': 'cm'})\n@dataclass(kw_only=True)\nclass K:\n    z: int\n"
     "@dataclass(eq=False)\nclass Same:\n    v: int\n"
     "def f(n):\n    o = Opt(n, c='d')\n    fs = fields(o)\n    return (repr(o), repr(K(z=n)), Same(1) == Same(1), [(x.name, x.kw_only, x.default is MISSING) for x in fs],\n"
     "            dict(fs[2].metadata), fs[0].type is int, Opt.__doc__, K.__doc__)", "1"),
    ("from dataclasses import dataclass\n@dataclass(slots=True, frozen=True)\nclass V:\n    x: int\n    y: str = 'a'\n"
     "@dataclass(unsafe_hash=True, order=True)\nclass W:\n    w: str\n"
     "def f(n):\n    v = V(n)\n    try:\n        v.z = 1\n        slotted = False\n    except (AttributeError, TypeError):\n        slotted = True\n"
     "    match v:\n        case V(x=0):\n            kind = 'zero'\n        case V(x=k, y='a'):\n            kind = f'x={k}'\n"
     "    return repr(v), slotted, kind, V.__doc__, repr(sorted([W('b'), W('a')])), hash(W('a')) == hash(W('a'))", "3"),
    ("from dataclasses import dataclass, field, replace, fields, asdict, InitVar\n@dataclass\nclass R:\n    a: int\n    b: InitVar[int]\n"
     "    c: int = field(init=False, default=0)\n    def __post_init__(self, b):\n        self.c = self.a + b\n"
     "def f(n):\n    out = []\n    for call in (lambda: replace(R(n, 1)), lambda: replace(R(n, 1), c=2), lambda: fields(5),\n"
     "                 lambda: asdict(R), lambda: replace(R, a=1), lambda: R(n)):\n        try:\n            out.append(repr(call()))\n"
     "        except (TypeError, ValueError) as e:\n            out.append(f'{type(e).__name__}: {e}')\n    return out, repr(replace(R(n, 1), b=5))", "2"),
    ("from dataclasses import dataclass, field\nfrom typing import Generic, TypeVar\nfrom abc import ABC, abstractmethod\nT = TypeVar('T')\n"
     "@dataclass\nclass Box(Generic[T]):\n    item: T\n    _cache: dict = field(default_factory=dict, repr=False)\n"
     "    def get(self) -> T:\n        self._cache['n'] = self._cache.get('n', 0) + 1\n        return self.item\n"
     "class Shape(ABC):\n    @abstractmethod\n    def area(self) -> float: ...\n"
     "@dataclass\nclass Sq(Shape):\n    side: float\n    def area(self) -> float:\n        return self.side ** 2\n"
     "def f(s):\n    b = Box(s)\n    b.get()\n    return repr(b), b.get(), b._cache, repr(Sq(s)), Sq(s).area(), Box.__doc__, Sq.__doc__", "1.5"),
    ("import typing, dataclasses\n@dataclasses.dataclass\nclass A:\n    n: 'typing.ClassVar[int]' = 3\n    i: 'dataclasses.InitVar[int]' = 1\n"
     "    a: int = 0\n    _: 'dataclasses.KW_ONLY'\n    b: 'int' = 2\n    def __post_init__(self, i):\n        self.a += i\n"
     "def f(v):\n    return [x.name for x in dataclasses.fields(A)], repr(A(v, 5, b=7)), A.n, A.__doc__", "4"),
    ("from dataclasses import dataclass\n@dataclass(init=False)\nclass E:\n    x: int = 0\n@dataclass\nclass I:\n    x: int\n"
     "    def __init__(self, x, *, scale=2):\n        self.x = x * scale\n@dataclass(init=False)\nclass J(I):\n    y: str = 'j'\n"
     "def f(v):\n    return E.__doc__, I.__doc__, J.__doc__, repr(E()), repr(I(v)), repr(J(v, scale=3)), I(v) == I(v)", "5"),
    ("from dataclasses import dataclass\n@dataclass\nclass Node:\n    val: int\n    next: 'Node | None' = None\n"
     "    def to_list(self):\n        return [self.val] + (self.next.to_list() if self.next else [])\n"
     "def f(xs):\n    head = None\n    for x in reversed(xs):\n        head = Node(x, head)\n    return head.to_list(), repr(head), Node.__doc__", "[1, 2, 3]"),
]


# CPython's outputs, each program run as a module of its own (registered in sys.modules, as a
# script's __main__ is: dataclasses looks its class's module up there), in a fresh interpreter
_CPYTHON = r"""
import json, sys, types
out = []
for k, (program, inp) in enumerate(json.loads(sys.stdin.read())):
    module = types.ModuleType(f"expected{k}")
    sys.modules[module.__name__] = module
    exec(program, vars(module))
    args, kwargs = eval(f"(lambda *a, **k: (a, k))({inp})", vars(module))
    out.append(repr(vars(module)["f"](*args, **kwargs)))
print("\n" + json.dumps(out))
"""


def _cpythons_outputs(programs: list[tuple[str, str]]) -> list[str]:
    done = subprocess.run([sys.executable, "-I", "-c", _CPYTHON], input=json.dumps(programs),
                          capture_output=True, text=True, timeout=120, env={"PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=LIMITS, determinism_runs=STRICT_RUNS) as sb:
        yield sb


def _verify(sandbox, programs):
    return sandbox.verify([TaskRecord(id=str(k), type="code_o", program=p, inputs=[i]) for k, (p, i) in enumerate(programs)])


def test_dataclass_programs_give_exactly_cpythons_outputs(sandbox):
    results = _verify(sandbox, BENIGN_DATACLASSES)
    for (program, _), result, want in zip(BENIGN_DATACLASSES, results, _cpythons_outputs(BENIGN_DATACLASSES)):
        assert result.valid and result.outputs == [want], (program, result.reason, result.detail, want)


def test_a_dataclass_instance_is_not_a_value(sandbox):
    # like any object of a task's class: its repr is the task's code (a dataclass's __repr__
    # calls the fields' reprs), so an output must be
    # built of values (docs/security.md § What enforces it (popula/sandbox/), item 4)
    (result,) = _verify(sandbox, [("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\ndef f(x):\n    return P(x)", "1")])
    assert not result.valid and result.reason == "unrepresentable", result


HELD_FIELD = ("import dataclasses\nheld = dataclasses.field(default=0)\n"
              "class Sneaky:\n    def __get__(self, obj, owner):\n        held.name = NAME\n        return 1\n")

TAMPERED = ("import dataclasses, functools\n@dataclasses.dataclass\nclass A:\n    x: int = 0\nclass Holder:\n    pass\n"
            "class Fake:\n    name = 'y=print()'\n    init = True\n"
            "h = Holder()\nfunctools.update_wrapper(h, A)\nh.__dict__[''.join(['__data', 'class_fields__'])]['y'] = Fake()\n")

# (name, program, input): attacks on what dataclasses trusts; each must be refused (forbidden,
# or a runtime error that leaks nothing of the worker)
DATACLASS_ESCAPES = [
    # field names go into the text dataclass() exec()s: only identifiers a task may use as attributes
    ("dc_annotation_key_code", "import dataclasses\nclass A:\n    y: int\n    __annotations__['x=__import__(\"os\").getuid()'] = int\n"
     "A = dataclasses.dataclass(A)\ndef f(x):\n    return 1", "0"),
    ("dc_annotation_key_newline", "import dataclasses\nclass A:\n    y: int\n    __annotations__['x):\\n  import os\\n  def g('] = int\n"
     "A = dataclasses.dataclass(A)\ndef f(x):\n    return 1", "0"),
    ("dc_annotation_dunder_field", "import dataclasses\nclass A:\n    y: int\n    __annotations__['__cl' + 'ass__'] = int\n"
     "A = dataclasses.dataclass(A)\ndef f(x):\n    return repr(A(x))", "int"),
    ("dc_annotation_frame_field", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    gi_frame: int = 0\ndef f(x):\n    return 1", "0"),
    ("dc_annotation_stdlib_private", "import dataclasses, enum\n@dataclasses.dataclass\nclass A:\n    _convert_: int = 0\n"
     "def f(x):\n    return 1", "0"),
    ("dc_annotations_replaced", "import dataclasses\nclass Ann(dict):\n    def items(self):\n        return [('y=[c for c in ().__class__.__base__.__subclasses__()]', int)]\n"
     "class A:\n    __annotations__ = Ann()\nA = dataclasses.dataclass(A)\ndef f(x):\n    return 1", "0"),
    ("dc_field_name_set", "import dataclasses\nfl = dataclasses.field(default=1)\nfl.name = 'x=1):\\n import os\\n def g('\ndef f(x):\n    return 1", "0"),
    ("dc_field_name_set_after", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "def f(x):\n    dataclasses.fields(A)[0].name = ''.join(['__glo', 'bals__'])\n    return 1", "0"),
    ("dc_field_name_set_by_setattr", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "def f(x):\n    setattr(dataclasses.fields(A)[0], 'name', 'x, y=print()')\n    return 1", "0"),
    ("dc_field_name_while_processing", HELD_FIELD.replace("NAME", "'x=0):\\n import os\\n def g('")
     + "@dataclasses.dataclass\nclass A:\n    a: int = held\n    b: int = Sneaky()\ndef f(x):\n    return 1", "0"),
    ("dc_field_subclass", "import dataclasses\nclass F(dataclasses.Field):\n    name = property(lambda self: 'x=print()', lambda self, v: None)\n"
     "@dataclasses.dataclass\nclass A:\n    x: int = F(0, dataclasses.MISSING, True, True, None, True, None, False)\n"
     "def f(x):\n    return 1", "0"),
    ("dc_field_impostor", "import dataclasses\nclass Fake:\n    __class__ = dataclasses.Field\n"
     "    name = property(lambda self: 'x=print()', lambda self, v: None)\n"
     "    kw_only, default, default_factory = False, 0, dataclasses.MISSING\n"
     "@dataclasses.dataclass\nclass A:\n    x: int = Fake()\ndef f(x):\n    return 1", "0"),
    # forged field dicts, made with a computed dunder key (type() and an instance's __dict__)
    ("dc_forged_base_fields", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "fl = dataclasses.fields(A)[0]\nB = type('B', (), {''.join(['__data', 'class_fields__']): {'z=print()': fl}})\n"
     "@dataclasses.dataclass\nclass C(B):\n    y: int = 0\ndef f(x):\n    return 1", "0"),
    ("dc_forged_class_body_fields", "import dataclasses\nclass Fake:\n    name = 'z=print()'\n"
     "class B:\n    __dataclass_fields__ = {'z': Fake()}\n@dataclasses.dataclass\nclass C(B):\n    y: int = 0\ndef f(x):\n    return 1", "0"),
    ("dc_forged_fields_asdict", "import dataclasses\nclass Fake:\n    name = '__init__'\n    init = True\n"
     "B = type('B', (), {''.join(['__data', 'class_fields__']): {'x': Fake()}})\ndef f(x):\n    return str(dataclasses.asdict(B()))", "0"),
    ("dc_forged_fields_replace", "import dataclasses\nclass Fake:\n    name = '__init__'\n    init = True\n"
     "class B:\n    def __init__(self, **kw):\n        self.kw = kw\n"
     "C = type('C', (B,), {''.join(['__data', 'class_fields__']): {'x': Fake()}})\ndef f(x):\n    return str(dataclasses.replace(C()).kw)", "0"),
    ("dc_forged_instance_fields", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "class Fake:\n    name = '__init__'\n    init = True\n"
     "def f(x):\n    a = A()\n    a.__dict__[''.join(['__data', 'class_fields__'])] = {'x': Fake()}\n    return str(dataclasses.replace(a))", "0"),
    # a real field dict, reached by copying the class's namespace into an instance's __dict__
    # (functools.update_wrapper would update the wrapper's __dict__ with the wrapped class's: it
    # wraps no class in the sandbox), then given an impostor: dataclasses writes only Fields'
    # names into text, whatever the dict holds
    ("dc_tampered_fields_base", TAMPERED + "@dataclasses.dataclass\nclass B(A):\n    z: int = 0\ndef f(x):\n    return 1", "0"),
    ("dc_tampered_fields_asdict", TAMPERED + "def f(x):\n    return str(dataclasses.asdict(A()))", "0"),
    ("dc_tampered_fields_replace", TAMPERED + "def f(x):\n    return str(dataclasses.replace(A()))", "0"),
    ("dc_forged_params", "import dataclasses\nclass P:\n    @property\n    def frozen(self):\n        return 1\n"
     "@dataclasses.dataclass\nclass A:\n    x: int = 0\nB = type('B', (A,), {''.join(['__data', 'class_params__']): P()})\n"
     "@dataclasses.dataclass\nclass C(B):\n    y: int = 0\ndef f(x):\n    return 1", "0"),
    # the class must be the task's own, its module the task's (the globals its methods are made in)
    ("dc_module_typing", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    __module__ = 'typing'\n    x: int = 0\ndef f(x):\n    return 1", "0"),
    ("dc_metaclass_hooks", "import dataclasses\nclass M(type):\n    def __getattr__(cls, name):\n        return {}\n"
     "@dataclasses.dataclass\nclass A(metaclass=M):\n    x: int = 0\ndef f(x):\n    return 1", "0"),
    ("dc_str_format", "import dataclasses\n@dataclasses.dataclass\nclass S(str):\n    format: int = dataclasses.field(init=False)\n"
     "def f(x):\n    return dataclasses.asdict(S('{0.__glo' + 'bals__}'))['format'](f)", "0"),
    ("dc_not_a_class", "import dataclasses\ndef f(x):\n    return dataclasses.dataclass(f)", "0"),
    # what stays out: make_dataclass (a namespace of computed keys, methods made in 'types')
    ("dc_make_dataclass", "import dataclasses\ndef f(x):\n    return dataclasses.make_dataclass('P', [('x', int)])", "0"),
    ("dc_make_dataclass_from", "from dataclasses import make_dataclass\ndef f(x):\n    return 1", "0"),
    # the methods it makes are the task's own functions: no route to their globals or a bypass
    ("dc_init_globals", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\ndef f(x):\n    return str(A.__init__.__globals__)", "0"),
    ("dc_init_globals_computed", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "def f(x):\n    return str(getattr(A.__init__, ''.join(['__glo', 'bals__'])))", "0"),
    ("dc_init_globals_format", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "def f(x):\n    return ('{0.__init__.__glo' + 'bals__}').format(A(1))", "0"),
    ("dc_frozen_object_setattr", "import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass A:\n    x: int = 0\n"
     "def f(x):\n    a = A()\n    object.__setattr__(a, 'x', 5)\n    return a.x", "0"),
    ("dc_fields_dict_read", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 0\n"
     "def f(x):\n    return str(getattr(A, ''.join(['__data', 'class_fields__'])))", "0"),
    ("dc_default_factory_vars", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: dict = dataclasses.field(default_factory=vars)\n"
     "def f(x):\n    return sorted(A().x)", "0"),
]

# (name, program, input, output): attacks that run but reach nothing; the output is CPython's
# where CPython's would be harmless too, and says what happened where it would not
HARMLESS = [
    # string annotations are never evaluated (dataclasses matches them with a regex)
    ("dc_string_annotation", "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: '__import__(\"os\").getuid()' = 0\n"
     "def f(v):\n    return dataclasses.fields(A)[0].type, repr(A(v))", "1",
     "('__import__(\"os\").getuid()', 'A(x=1)')"),
    ("dc_string_initvar", "import dataclasses\nInitVar = print\n@dataclasses.dataclass\nclass A:\n    x: 'InitVar[int]' = 0\n"
     "def f(v):\n    return repr(A(v))", "1", "'A(x=1)'"),
    # a base's docstring that reads as a text signature: CPython's inspect.signature would eval()
    # its names (here, the worker's modules); the sandbox does not compute such a docstring
    ("dc_text_signature_doc", "import dataclasses\nclass Base:\n    'Base(x=sys.prefix)\\n--\\n\\n'\n"
     "@dataclasses.dataclass(init=False)\nclass A(Base):\n    x: int = 0\ndef f(v):\n    return A.__doc__", "0", "'A(...)'"),
    # a default's repr is never exec'd: defaults reach the generated __init__ as values
    ("dc_default_repr", "import dataclasses\nclass D:\n    def __repr__(self):\n        return '__import__(\"os\").getuid()'\n"
     "@dataclasses.dataclass\nclass A:\n    x: object = D()\ndef f(v):\n    return repr(A()), A.__doc__", "0",
     "('A(x=__import__(\"os\").getuid())', 'A(x: object = __import__(\"os\").getuid())')"),
]


def test_every_dataclass_escape_is_refused_and_leaks_nothing(sandbox):
    results = _verify(sandbox, [(p, i) for _, p, i in DATACLASS_ESCAPES])
    bad = [(name, r.reason, r.detail) for (name, _, _), r in zip(DATACLASS_ESCAPES, results)
           if r.valid or r.reason not in ("forbidden", "runtime_error") or not _no_trace(r.detail)]
    assert not bad, bad


@pytest.mark.parametrize("name, program, inp, output", HARMLESS, ids=[h[0] for h in HARMLESS])
def test_dataclass_attacks_that_run_reach_nothing(sandbox, name, program, inp, output):
    (result,) = _verify(sandbox, [(program, inp)])
    assert result.valid and result.outputs == [output], (result.reason, result.detail, result.outputs)


def test_the_refusals_say_why(sandbox):
    picked = {"dc_annotation_key_code": "is not allowed in the sandbox",
              "dc_field_impostor": "is not a dataclasses.Field",
              "dc_forged_base_fields": "has fields that dataclass() did not make",
              # update_wrapper no longer copies a class's namespace; dataclass() would refuse the impostor too
              "dc_tampered_fields_base": "wrap functions and the task's own objects only",
              "dc_forged_fields_asdict": "must be called with a dataclass type or instance",
              "dc_module_typing": "a class the task defines",
              "dc_metaclass_hooks": "no metaclass but type or ABCMeta",
              "dc_str_format": "may not derive from str",
              "dc_make_dataclass": "make_dataclass"}
    programs = {name: (p, i) for name, p, i in DATACLASS_ESCAPES}
    results = _verify(sandbox, [programs[name] for name in picked])
    for (name, expected), result in zip(picked.items(), results):
        assert expected in result.detail, (name, result.reason, result.detail)


# (program, input): coin flips through a dataclass: its generated __hash__ calls the task's
# (masked) hash, and a set of instances iterates in hash order
DATACLASS_COIN_FLIPS = [
    ("import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass K:\n    s: str\ndef f(x):\n    return hash(K(x)) % 2", "'a'"),
    ("import dataclasses\n@dataclasses.dataclass(unsafe_hash=True)\nclass K:\n    s: str\n"
     "def f(xs):\n    return [k.s for k in {K(x) for x in xs}]", "['pear', 'fig', 'kiwi', 'plum']"),
    ("import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass K:\n    s: str\n"
     "def f(x):\n    return (hash(K(x)) >> 7) % 2", "'b'"),
]


def test_dataclass_coin_flips_are_nondeterministic(sandbox):
    results = _verify(sandbox, DATACLASS_COIN_FLIPS)
    assert all(not r.valid and r.reason == "nondeterministic" for r in results), [(r.reason, r.detail) for r in results]
