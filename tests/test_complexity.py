"""Complexity measures must rise with program complexity, the signal of a live curriculum."""

import warnings

import pytest

from popula.complexity import ast_depth, ignores_input, is_multiline, measure, written_multiline
from popula.novelty import program_form

TRIVIAL = "def f(x):\n    return x\n"

RICHER = '''def f(xs, k):
    # keep the running maxima above k
    def clip(v):
        if v > k:
            return v
        return k

    best, out = None, []
    for i, x in enumerate(xs):
        if best is None or x > best:
            best = x
        while len(out) > 3 and out[0] < k:
            out.pop(0)
        out.append(clip(best))
    return [y * 2 for y in out if y % 2 == 0]
'''


def test_trivial_program_has_minimal_measures():
    c = measure(TRIVIAL)
    assert (c.cyclomatic, c.loc, c.n_vars) == (1, 2, 1)
    assert c.ast_depth == 4  # Module > FunctionDef > Return > Name > Load


def test_ast_depth_alone_is_the_depth_measure_gives():
    assert [ast_depth(p) for p in (TRIVIAL, RICHER)] == [measure(p).ast_depth for p in (TRIVIAL, RICHER)] == [4, 8]


def test_lines_of_code_skip_blanks_and_comments():
    assert measure(RICHER).loc == 13


def test_variables_are_distinct_bound_names_not_function_names():
    # xs, k, v, best, out, i, x, y
    assert measure(RICHER).n_vars == 8


def test_cyclomatic_counts_nested_helpers_too():
    # f: 1 + for + if + or + while + and + comprehension + its if = 8; clip: 1 + if = 2
    assert measure(RICHER).cyclomatic == 10


def test_every_measure_grows_from_trivial_to_richer():
    low, high = measure(TRIVIAL), measure(RICHER)
    assert high.ast_depth > low.ast_depth
    assert high.cyclomatic > low.cyclomatic
    assert high.loc > low.loc
    assert high.n_vars > low.n_vars


def test_deep_nesting_does_not_overflow_the_stack():
    program = "def f(x):\n    return " + "(" * 90 + "x" + ")" * 90 + "\n"
    assert measure(program).ast_depth >= 4


def test_unparsable_program_raises_syntax_error():
    with pytest.raises(SyntaxError):
        measure("def f(:\n")


def test_a_program_is_multiline_when_its_body_has_more_than_one_line_of_code():
    assert not is_multiline("def f(a):\n    return a + 1")
    assert not is_multiline("def f(a):\n    # a comment\n\n    return a + 1\n# (int) -> int")  # comments and blanks don't count
    assert is_multiline("def f(a):\n    b = a * 2\n    return b")
    with pytest.raises(SyntaxError):
        is_multiline("def f(:")


def test_a_broken_attempt_at_a_long_program_still_counts_as_multi_line():
    assert written_multiline("def f(a):\n    return a + 1") is False
    assert written_multiline("def f(a):\n    t = 0\n    return t + a") is True
    # a stray token breaks the parse; its body lines still make it an attempt at a multi-line program
    assert written_multiline("def f(a):\n    t = 0\n    t += (a))\n    returnzdde") is True
    assert written_multiline("def f(a):\n    # add one\n    return (a +") is False


@pytest.mark.parametrize("program", [
    "def f(v):\n    return [5]",
    "def f(a, b=[3]):\n    return [2]",
    "def f(n):\n    n = 4\n    return 9",  # written over, never read
    "g = 1\ndef f(x):\n    return g * 2",
])
def test_a_program_whose_f_never_reads_its_parameters_ignores_its_input(program):
    assert ignores_input(program)


@pytest.mark.parametrize("program", [
    TRIVIAL,
    RICHER,
    "def f(n):\n    return [n, 9 - 3]",
    "def f(a):\n    def g():\n        return a\n    return g()",  # read by a nested function
    "def f(*args, **kw):\n    return len(kw)",
    "def f(n):\n    n += 1\n    return 3",  # an augmented assignment reads first
    "def f(a):\n    return sorted(locals())",  # reached without its name: counted as read
    "def g(x):\n    return 1",  # no f: the sandbox rejects it, nothing here calls it blind
])
def test_a_program_that_may_read_its_input_is_not_called_blind(program):
    assert not ignores_input(program)


@pytest.mark.parametrize("program", ["def f(x):\n    return 1if x else 2", "def f(x):\n    return 0x1or x"])
def test_measuring_a_program_prints_no_syntax_warning(program):
    """A small model writes these by the dozen; their warnings used to reach the run's console."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ast_depth(program) >= 2
        program_form(program)
    assert [str(w.message) for w in caught] == []
