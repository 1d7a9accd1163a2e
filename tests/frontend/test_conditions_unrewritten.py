"""Python's own truth tests of run-time values where frontend/conditions.py's rewrite does not reach
(issue 16: "no silent False remains"): a lambda made outside the jit function, exec'd code, a
decorator's wrapper, a method calling super(), bool() / any() / sorted() of a run-time value. Each
form is planted with data on which Python's default answer (sympy's structural ``==`` False, an
expression's truth True) would be wrong: it is a PyptoError at the user's line (frontend/truth.py),
or, when the loops' ranges decide it, the right answer (checked against torch). Also a shape compared
with a tuple in the jit function (element by element, a run-time branch)."""
import functools
import threading

import pytest
import sympy
import torch

import pypto
from pypto.testing.source import line_of
from pypto.errors import PyptoError

# ---- forms the rewrite cannot reach: module-level lambdas, exec'd code, wrappers, super()
pick_eq = lambda n, a, b: a if n == 3 else b                 # noqa: E731
pick_ne = lambda n, a, b: b if n != 3 else a                 # noqa: E731
pick_truth = lambda c, a, b: a if c else b                   # noqa: E731  (c: a condition made elsewhere)
smallest = lambda n: sorted([n, 3])[0]                       # noqa: E731
is_last = lambda i: pypto.is_loop_end(i) and 1 or 0          # noqa: E731
index_scale = lambda i: 2.0 if i < 4 else 5.0                # noqa: E731  (decided: i in loop(4))
index_is_seven = lambda i: i == 7                            # noqa: E731  (decided False)

_SRC = "def exec_pick(n, a, b):\n    return a if n in (2, 3) else b\n"
_NS: dict = {}
exec(compile(_SRC, "<generated>", "exec"), _NS)              # noqa: S102
exec_pick = _NS["exec_pick"]


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@_logged
def wrapped_pick(n, a, b):
    if n:                                                    # a decorator's wrapper runs as written
        return a
    return b


class Base:
    def pick(self, n, a, b):
        return a


class Child(Base):
    def pick(self, n, a, b):
        if n == 3:                                           # super() keeps this method as written
            return super().pick(n, a, b)
        return b


def _module_line(text):
    with open(__file__) as f:
        return 1 + next(k for k, line in enumerate(f) if text in line)


def run(form, k=3):
    """form(x, n) inside a jit function whose n is a data scalar read from lens[0] (= k)."""
    @pypto.jit
    def f(lens: pypto.Tensor[[2], pypto.int32], x: pypto.Tensor[[4, 64], pypto.float32]):
        n = lens[0].item()
        return form(x, n)
    return f(torch.tensor([k, 0], dtype=torch.int32), torch.ones(4, 64))


UNDECIDABLE = {
    "lambda ==": (lambda x, n: pick_eq(n, x * 2.0, x), "pick_eq = lambda"),
    "lambda !=": (lambda x, n: pick_ne(n, x * 2.0, x), "pick_ne = lambda"),
    "exec'd in": (lambda x, n: exec_pick(n, x * 2.0, x), None),
    "wrapper if n": (lambda x, n: wrapped_pick(n, x * 2.0, x), "if n:"),
    "super() method": (lambda x, n: Child().pick(n, x * 2.0, x), "if n == 3:"),
    "sorted": (lambda x, n: x * smallest(n), "smallest = lambda"),
}


@pytest.mark.parametrize("form", list(UNDECIDABLE))
def test_an_undecidable_test_outside_the_rewrite_is_an_error_at_its_line(form):
    fn, text = UNDECIDABLE[form]
    with pytest.raises(PyptoError, match="Python's own test of a run-time value") as e:
        run(fn)
    if text is None:                                         # exec'd code: its own file name and line
        assert e.value.loc.file == "<generated>" and e.value.loc.line == 2
    else:
        assert e.value.loc.line == _module_line(text), str(e.value)


def test_bool_and_any_of_a_run_time_value_in_the_jit_function_are_errors():
    @pypto.jit
    def f(lens: pypto.Tensor[[2], pypto.int32], x: pypto.Tensor[[4, 64], pypto.float32]):
        n = lens[0].item()
        return x * 2.0 if bool(n - 3) else x
    with pytest.raises(PyptoError, match="Python's own test") as e:
        f(torch.tensor([3, 0], dtype=torch.int32), torch.ones(4, 64))
    assert e.value.loc.line == line_of(f.fn, "bool(n - 3)")

    @pypto.jit
    def g(lens: pypto.Tensor[[2], pypto.int32], x: pypto.Tensor[[4, 64], pypto.float32]):
        n = lens[0].item()
        return x * 2.0 if any([n == 3, n == 4]) else x
    with pytest.raises(PyptoError, match="Python's own test") as e:
        g(torch.tensor([3, 0], dtype=torch.int32), torch.ones(4, 64))
    assert e.value.loc.line == line_of(g.fn, "any([n == 3")


def test_a_condition_made_by_and_in_the_jit_function_tested_by_a_lambda_is_an_error():
    @pypto.jit
    def f(lens: pypto.Tensor[[2], pypto.int32], x: pypto.Tensor[[4, 64], pypto.float32]):
        n = lens[0].item()
        c = n > 1 and n < 5                                  # a sympy And: the rewrite's and
        return pick_truth(c, x * 2.0, x)
    with pytest.raises(PyptoError, match="Python's own test") as e:
        f(torch.tensor([3, 0], dtype=torch.int32), torch.ones(4, 64))
    assert e.value.loc.line == _module_line("pick_truth = lambda")


def test_is_loop_end_tested_by_a_lambda_is_an_error():
    @pypto.jit
    def f(x: pypto.Tensor[[4, 64], pypto.float32], out: pypto.Tensor[[4, 64], pypto.float32]):
        for i in pypto.loop(4):
            out[i:i + 1, :] = pypto.view(x, [1, 64], [i, 0]) * float(is_last(i))
    with pytest.raises(PyptoError, match="Python's own test") as e:
        f(torch.ones(4, 64), torch.zeros(4, 64))
    assert e.value.loc.line == _module_line("is_last = lambda")


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_a_test_the_loop_ranges_decide_gives_the_right_answer(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[4, 64], pypto.float32], out: pypto.Tensor[[4, 64], pypto.float32]):
        for i in pypto.loop(4):
            v = pypto.view(x, [1, 64], [i, 0]) * index_scale(i)
            out[i:i + 1, :] = v + 1.0 if index_is_seven(i) else v
    x = torch.randn(4, 64)
    out = torch.zeros(4, 64)
    f(x, out)
    torch.testing.assert_close(out, x * 2.0)


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_a_shape_compared_with_a_tuple_is_a_run_time_branch(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        if x.shape == (8, 64):
            return x * 2.0
        return x + 3.0

    @pypto.jit(backend=backend)
    def g(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        return x * 2.0 if list(x.shape) != [8, 64] else x + 3.0
    for rows in (8, 5):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(f(x), x * 2 if rows == 8 else x + 3)
        torch.testing.assert_close(g(x), x * 2 if rows != 8 else x + 3)
    assert f.trace_count == g.trace_count == 1


def test_sympy_is_plain_outside_a_trace_and_on_other_threads():
    n = sympy.Symbol("n", integer=True)
    assert (n == 3) is False and bool(n) is True             # sympy's own answers
    assert "__bool__" not in vars(sympy.Expr)
    seen = {}
    started, release = threading.Event(), threading.Event()

    def other():
        started.wait(10)
        seen["eq"], seen["bool"] = (n == 3), bool(n + 1)
        release.set()

    t = threading.Thread(target=other)
    t.start()

    @pypto.jit
    def f(x: pypto.Tensor[[4, 64], pypto.float32]):
        started.set()
        release.wait(10)                                      # the other thread tests while this one traces
        return x + 1.0
    f(torch.ones(4, 64))
    t.join(10)
    assert seen == {"eq": False, "bool": True}
    assert "__bool__" not in vars(sympy.Expr)
