"""Determinism a teacher cannot game: a task whose output hangs on the hash seed, an
address or the identity masks is refused whatever way it reaches them, and an output must
be a plain value, checked before any of the task's code could change it.

Each probe below is one of a class: sets built without a set display (dict views, names
reached by string), identity hashes of singletons and NaN, combinations of mask bits that
a complemented mask leaves unchanged, outputs that are not values.
"""

from __future__ import annotations

import pytest

from popula.records import TaskRecord
from popula.sandbox import Limits, Sandbox


@pytest.fixture(scope="module")
def strict():
    """16 determinism runs, not the default 10, so that a coin flip passing them all
    (2**-15 at most) never makes these tests flaky."""
    with Sandbox(workers=2, limits=Limits(wall_s=1.5), determinism_runs=16) as sb:
        yield sb


COIN_FLIPS = [
    # sets built by operators on dict views, with no set display or set() in sight
    ("keys_union", "def f(x):\n    return list({'a': 0}.keys() | {'b': 0}.keys())", "0"),
    ("items_and", "def f(x):\n    return [k for k, _ in {'a': 1, 'b': 2}.items() & {'b': 2, 'a': 1}.items()]", "0"),
    ("keys_view_class", "import collections.abc\ndef f(d):\n    return list(collections.abc.KeysView(d) | ['zz'])", "{'p': 1, 'q': 2}"),
    ("operator_on_views", "import operator\ndef f(d):\n    return list(operator.xor(d.keys(), {'x': 1}.keys()))", "{'y': 1}"),
    ("computed_keys", "def f(d):\n    n = 'ke' + 'ys'\n    return list(getattr(d, n)() - {'q': 0}.keys())", "{'m': 1, 'n': 2}"),
    # identity hashes: None and NaN hash by address on 3.11
    ("hash_none", "def f(x):\n    return hash(None) % 2", "0"),
    ("hash_nan", "def f(x):\n    return hash(float('nan')) % 2", "0"),
    ("hash_tuple_with_none", "def f(x):\n    return hash((None, 1)) % 2", "0"),
    ("hash_complex_nan", "def f(x):\n    return hash(complex(float('nan'), 1)) % 2", "0"),
    # bit k XOR bit k+1 survives a complemented mask: the runs after the second have fresh masks
    ("hash_adjacent_bits", "def f(x):\n    h = hash(object())\n    return (h ^ (h >> 1)) & 1", "0"),
    ("id_adjacent_bits", "def f(x):\n    i = id(x)\n    return ((i >> 5) ^ (i >> 6)) & 1", "0"),
    ("str_hash_two_bits", "def f(s):\n    h = hash(s)\n    return (h ^ (h >> 7)) & 1", "'popula'"),
    # combinations in which the masks cancel: the digest key and id counters change too
    ("hash_pair_parity", "def f(x):\n    a, b = hash('a'), hash('b')\n    return (a ^ b) & 3", "0"),
    ("id_difference", "def f(x):\n    a, b = object(), object()\n    return (id(a) - id(b)) % 5", "0"),
    ("object_hash_pair", "def f(x):\n    a, b = object(), object()\n    return (hash(a) ^ hash(b)) % 3", "0"),
    # hashes that are not their value's own: seeded str/tuple hashes behind a subclass or an
    # enum, library code hashing a dataclass's fields
    ("str_subclass_hash", "class S(str):\n    pass\ndef f(x):\n    return hash(S('ab')) & 1", "0"),
    ("tuple_subclass_hash", "class T(tuple):\n    pass\ndef f(x):\n    return hash(T(('a',))) & 1", "0"),
    ("enum_hash", "import enum\nclass E(enum.Enum):\n    A = 1\ndef f(x):\n    return hash(E.A) & 1", "0"),
    ("own_hash_of_strings", "class K:\n    def __init__(self, s):\n        self.s = s\n    def __hash__(self):\n"
     "        return hash(self.s)\ndef f(x):\n    return hash(K('ab')) & 1", "0"),
    # an address shown in the default repr of a task's class
    ("default_repr_address", "class A:\n    pass\ndef f(x):\n    return (int(repr(A())[-5:-1], 16) >> 4) & 1", "0"),
    ("default_str_address", "class A:\n    pass\ndef f(x):\n    return (int(f'{A()}'[-5:-1], 16) >> 4) & 1", "0"),
    # text no run controls (an address, a set's order), read back from a caught exception
    ("address_in_error_message", "def f(x):\n    try:\n        raise ValueError(object())\n"
     "    except ValueError as err:\n        return (int(str(err)[-5:-1], 16) >> 4) & 1", "0"),
]


@pytest.mark.parametrize("name,program,inp", COIN_FLIPS, ids=[c[0] for c in COIN_FLIPS])
def test_coin_flips_of_every_class_are_refused(strict, name, program, inp):
    [result] = strict.verify([TaskRecord(id=name, type="code_o", program=program, inputs=[inp])])
    assert not result.valid and result.reason == "nondeterministic", (result.reason, result.detail)


DETERMINISTIC = [
    ("sorted_view_union", "def f(x):\n    return sorted({'a': 0}.keys() | {'b': 0}.keys())", "0"),
    ("items_loop", "def f(d):\n    return [k * v for k, v in d.items()]", "{'a': 2, 'b': 3}"),
    ("hash_of_int", "def f(x):\n    return hash(x) % 7", "12345"),
    ("hash_equal_strings", "def f(s):\n    return hash(s) == hash(s[:])", "'abc'"),
    ("id_identity", "def f(x):\n    y = x\n    return id(x) == id(y)", "[1]"),
]


@pytest.mark.parametrize("name,program,inp", DETERMINISTIC, ids=[c[0] for c in DETERMINISTIC])
def test_deterministic_programs_on_the_same_paths_are_valid(strict, name, program, inp):
    [result] = strict.verify([TaskRecord(id=name, type="code_o", program=program, inputs=[inp])])
    assert result.valid, (result.reason, result.detail)


NOT_VALUES = [
    # a repr that empties its list before any check could see it
    ("repr_rewrites_list", "L = []\nclass E:\n    def __repr__(self):\n        L.clear()\n        return '1'\ndef f(x):\n"
     "    L.append(E())\n    return L", "0"),
    # an object that claims a value's repr and equals anything
    ("lying_object", "class L:\n    def __repr__(self):\n        return '[1, 2]'\n    def __eq__(self, o):\n        return True\n"
     "    __hash__ = None\ndef f(x):\n    return L()", "0"),
    ("str_subclass", "class S(str):\n    pass\ndef f(x):\n    return S('a')", "0"),
    ("int_subclass_in_dict", "class I(int):\n    pass\ndef f(x):\n    return {'k': I(3)}", "0"),
]


@pytest.mark.parametrize("name,program,inp", NOT_VALUES, ids=[c[0] for c in NOT_VALUES])
def test_an_output_that_is_not_built_of_values_is_refused_unread(strict, name, program, inp):
    [result] = strict.verify([TaskRecord(id=name, type="code_o", program=program, inputs=[inp])])
    assert not result.valid and result.reason == "unrepresentable", (result.reason, result.detail)
