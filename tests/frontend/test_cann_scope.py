"""CANN's size methods (n.min(m), n.max(m), n.item()) and Python's min / max of sizes take pypto's meaning
only on the thread that traces a jit function (frontend/cann.py): sympy and builtins elsewhere in the
process stay as they are — another thread during a trace, code outside a trace, after a failed trace."""
import builtins
import threading

import pytest
import sympy
import torch

import pypto

PY_MIN, PY_MAX = builtins.min, builtins.max
WAIT = 60      # seconds: a generous bound on the hand-over between the two threads


def _python_minmax_checks(a):
    """What Python's own min / max (and plain sympy) do, checked where a trace must not reach."""
    assert min(3, 5) == 3 and max([1, 4]) == 4 and min("ab", "b") == "ab" and min([3, 1], key=lambda v: -v) == 3
    with pytest.raises(TypeError):
        min(a, 3)                           # Python's min of a symbolic size: sympy cannot order it
    with pytest.raises(TypeError):
        max(a, 2, a + 1)
    assert not hasattr(a, "min") and not hasattr(a, "max") and not hasattr(a, "item")


def test_another_thread_during_a_trace_gets_pythons_min():
    a = sympy.Symbol("a", integer=True, positive=True)
    in_trace, checked = threading.Event(), threading.Event()
    seen = {}

    def other():
        assert in_trace.wait(WAIT)
        try:
            _python_minmax_checks(a)
            seen["ok"] = True
        except BaseException as e:          # noqa: BLE001  reported by the main thread
            seen["error"] = e
        finally:
            checked.set()

    @pypto.jit(backend="reference")
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        n = x.shape[0]
        in_trace.set()
        assert checked.wait(WAIT)
        m = min(n, 16)                      # this thread: the symbolic min, during the other's checks
        assert isinstance(m, sympy.Expr) and m.free_symbols
        assert n.min(16) == m and n.max(16) == pypto.max(n, 16) and n.item() is n
        return pypto.view(x, [16, 64], [0, 0], valid_shape=[m, 64]) * 2.0

    t = threading.Thread(target=other)
    t.start()
    try:
        x = torch.randn(5, 64)
        y = f(x)
    finally:
        checked.set()
        t.join(WAIT)
    assert seen.get("ok"), seen.get("error")
    torch.testing.assert_close(y[:5], x * 2.0)
    assert builtins.min is PY_MIN and builtins.max is PY_MAX
    _python_minmax_checks(a)               # after the trace: the same in this thread


def test_a_failed_trace_restores_the_builtins():
    @pypto.jit(backend="reference")
    def g(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        assert builtins.min is not PY_MIN
        raise ValueError("user error inside the trace")

    with pytest.raises(ValueError, match="user error inside the trace"):
        g(torch.randn(3, 64))
    assert builtins.min is PY_MIN and builtins.max is PY_MAX
    _python_minmax_checks(sympy.Symbol("b", integer=True))


def test_threads_tracing_in_turn_on_the_compile_lock_each_get_the_symbolic_min():
    # traces serialise on the compile lock; each thread's min of sizes is symbolic, and the builtins come back
    results, errors = [], []

    def run(rows):
        try:
            @pypto.jit(backend="reference")
            def h(x: pypto.Tensor[[pypto.DYNAMIC, 32], pypto.float32]):
                n = x.shape[0]
                return pypto.view(x, [8, 32], [0, 0], valid_shape=[min(n, 8), 32]) + 1.0
            x = torch.randn(rows, 32)
            results.append((h(x)[:min(rows, 8)], x[:8] + 1.0))
        except BaseException as e:          # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in (3, 8, 5, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors, errors
    assert len(results) == 4
    for got, want in results:
        torch.testing.assert_close(got, want)
    assert builtins.min is PY_MIN and builtins.max is PY_MAX
