"""Run-time control on the AICPU (issue 16): data scalars read from tensors (pypto.item, a loop bound
from a one-element int tensor) and run-time branches (if / elif / else, a if c else b, pypto.cond,
is_loop_begin / is_loop_end), each on sim and cpu against torch; the errors name the user's line and
no undecidable condition is silently False."""
import dataclasses
import functools
import inspect
import sys

import pytest
import torch

import pypto
from pypto.testing.source import line_of
from pypto.errors import IndexOutOfRangeError, PyptoError, TypeMismatchError

BACKENDS = ("sim", "cpu")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def close(a, b, dtype):
    torch.testing.assert_close(a.float(), b.float(), rtol=TOL[dtype], atol=TOL[dtype])


# ------------------------------------------------------------------------------------------ data scalars
def varlen_scale(backend, dtype):
    """Every sequence of a packed batch (cu_seqlens a device tensor) in chunks of 16 rows, the last one a
    tail: out = x * 2 + 1 on the sequences' rows, untouched elsewhere."""
    dt = pypto.dtypes.from_torch(dtype)

    @pypto.jit(backend=backend)
    def f(cu: pypto.Tensor[[pypto.DYNAMIC], pypto.int32], x: pypto.Tensor[[pypto.DYNAMIC, 64], dt],
          out: pypto.Tensor[[pypto.DYNAMIC, 64], dt]):
        for b in pypto.loop(cu.shape[0] - 1):
            s = pypto.item(cu, b)
            n = cu[b + 1].item() - s                        # torch's spelling of the same read
            for c in pypto.loop(pypto.ceildiv(n, 16)):
                rows = pypto.min(16, n - c * 16)
                xv = pypto.view(x, [16, 64], [s + c * 16, 0], valid_shape=[rows, 64])
                pypto.assemble(xv * 2.0 + 1.0, [s + c * 16, 0], out)
    return f


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_varlen_loop_bounds_from_tensor_data(backend, dtype):
    f = varlen_scale(backend, dtype)
    for lens in ([5, 0, 16, 33], [1, 40]):                  # tails, a sequence of length 0, other sizes
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
        total = int(cu[-1]) + 3                             # rows past the last sequence stay untouched
        x = torch.randn(total, 64).to(dtype)
        out = torch.full((total, 64), -7.0).to(dtype)
        f(cu, x, out)
        ref = torch.full((total, 64), -7.0).to(dtype)
        ref[:int(cu[-1])] = (x[:int(cu[-1])].float() * 2 + 1).to(dtype)
        close(out, ref, dtype)
    assert f.trace_count == 1                              # sizes and lengths are run-time values


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_dependent_trip_count_of_zero(backend):
    @pypto.jit(backend=backend)
    def f(lens: pypto.Tensor[[4], pypto.int32], x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32],
          out: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        for i in pypto.loop(lens[1]):                       # a one-element int tensor as the bound
            out[i:i + 1, :] = pypto.view(x, [1, 64], [i, 0]) * 3.0
    x = torch.randn(6, 64)
    for k in (0, 4, 6):
        out = torch.zeros(6, 64)
        f(torch.tensor([9, k, 1, 1], dtype=torch.int32), x, out)
        ref = torch.zeros(6, 64)
        ref[:k] = x[:k] * 3
        close(out, ref, torch.float32)


def test_sim_charges_each_read_to_the_control_thread():
    spec = pypto.get_machine()
    assert spec.dispatch["scalar_read_cycles"] > 0
    free = dataclasses.replace(spec, dispatch={**spec.dispatch, "scalar_read_cycles": 0})

    def run(machine):
        @pypto.jit(backend="sim", machine=machine)
        def f(lens: pypto.Tensor[[4], pypto.int32], x: pypto.Tensor[[8, 64], pypto.float32],
              out: pypto.Tensor[[8, 64], pypto.float32]):
            for i in pypto.loop(pypto.item(lens, 0)):
                out[i:i + 1, :] = pypto.view(x, [1, 64], [i, 0]) + 1.0
        f(torch.tensor([3, 0, 0, 0], dtype=torch.int32), torch.randn(8, 64), torch.zeros(8, 64))
        return pypto.last_report().cycles
    # one read (the bound) before the first submission: the whole run starts that much later
    assert run(spec) - run(free) == pytest.approx(spec.dispatch["scalar_read_cycles"])


# ------------------------------------------------------------------------------------------ branches
def branchy(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 64], [i, 0])
            if i == 0:
                y = xv * 2.0
            elif i < 2:
                y = xv - 1.0
            else:
                y = xv + 1.0
            out[i:i + 1, :] = y
            if pypto.is_loop_end(i) and i > 0:
                out[i:i + 1, :] = y * 10.0
    return f


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_a_loop_index_gives_torchs_answer(backend):
    f = branchy(backend)
    for rows in (1, 2, 5):
        x = torch.randn(rows, 64)
        out = torch.zeros(rows, 64)
        f(x, out)
        ref = x + 1
        ref[0] = x[0] * 2
        if rows > 1:
            ref[1] = x[1] - 1
            ref[-1] = ref[-1] * 10
        close(out, ref, torch.float32)
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_on_a_data_scalar_and_one_taken_by_no_iteration(backend):
    @pypto.jit(backend=backend)
    def f(flags: pypto.Tensor[[8], pypto.int32], x: pypto.Tensor[[8, 64], pypto.float32],
          out: pypto.Tensor[[8, 64], pypto.float32]):
        for i in pypto.loop(8):
            xv = pypto.view(x, [1, 64], [i, 0])
            k = pypto.item(flags, i)
            y = pypto.cond(k > 0, lambda: xv * -1.0, lambda: xv)
            out[i:i + 1, :] = y + 1.0 if k == 2 else y
            if k > 100:                                      # no iteration takes it
                out[i:i + 1, :] = xv * 0.0
    x = torch.randn(8, 64)
    flags = torch.tensor([0, 1, 2, 0, 2, 0, 0, 1], dtype=torch.int32)
    out = torch.zeros(8, 64)
    f(flags, x, out)
    y = torch.where(flags[:, None] > 0, -x, x)
    close(out, torch.where(flags[:, None] == 2, y + 1, y), torch.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_merge_after_a_run_time_branch(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[8, 64], pypto.float32], out: pypto.Tensor[[8, 64], pypto.float32]):
        for i in pypto.loop(4):
            row = i * 2 if i < 2 else i + 4                  # a scalar: merged as Piecewise
            out[row:row + 1, :] = pypto.view(x, [1, 64], [row, 0]) * 5.0
    x = torch.randn(8, 64)
    out = torch.zeros(8, 64)
    f(x, out)
    ref = torch.zeros(8, 64)
    for i in range(4):
        r = i * 2 if i < 2 else i + 4
        ref[r] = x[r] * 5
    close(out, ref, torch.float32)


def test_conditions_decided_at_trace_time_trace_one_side():
    @pypto.jit(backend="reference")
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 8], pypto.float32]):
        n = x.shape[0]
        for i in pypto.loop(n):
            if i < n and not (i >= n):                      # always true over the loop's range: one side
                pass
        return x * 2.0 if n >= 1 else x                     # a positive size: decided
    g = f.trace(torch.randn(3, 8))
    assert not any(g.op(k) == "loop" and "then" in str(g.node(k)["attrs"]["var"]) for k in g.nodes())


# ------------------------------------------------------------------------------------------ errors
def test_float_tensor_as_a_loop_bound():
    def body(lens, x):
        for i in pypto.loop(lens[0]):
            pass
        return x
    with pytest.raises(TypeMismatchError, match="loop bound is an integer") as e:
        pypto.jit(body, backend="reference")(torch.ones(2), torch.randn(3))
    assert e.value.loc.line == line_of(body, "pypto.loop(lens[0])")


def test_item_of_a_float_tensor():
    def body(lens, x):
        n = pypto.item(lens, 0)
        return x * 2.0
    with pytest.raises(TypeMismatchError, match="reads an integer tensor") as e:
        pypto.jit(body, backend="reference")(torch.ones(2), torch.randn(3))
    assert e.value.loc.line == line_of(body, "pypto.item(lens, 0)")


def test_out_of_range_reads():
    def known(lens, x):
        n = pypto.item(lens, 7)
        return x * 2.0
    with pytest.raises(IndexOutOfRangeError, match="outside") as e:
        pypto.jit(known, backend="reference")(torch.ones(4, dtype=torch.int32), torch.randn(3))
    assert e.value.loc.line == line_of(known, "pypto.item(lens, 7)")

    def at_run_time(lens, x, out):
        for b in pypto.loop(x.shape[0]):
            j = pypto.item(lens, b)
            out[b:b + 1, :] = pypto.view(x, [1, 4], [pypto.item(lens, j), 0])
    for backend in ("sim", "reference"):
        with pytest.raises(IndexOutOfRangeError, match=r"lens\[9\]") as e:
            pypto.jit(at_run_time, backend=backend)(torch.tensor([0, 9, 1], dtype=torch.int32),
                                                   torch.randn(3, 4), torch.zeros(3, 4))
        assert e.value.loc.line == line_of(at_run_time, "pypto.item(lens, j)")


def test_a_negative_data_scalar_is_an_error():
    def body(lens, x, out):
        for i in pypto.loop(pypto.item(lens, 0)):
            out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0])
    with pytest.raises(PyptoError, match="read -2 from lens") as e:
        pypto.jit(body, backend="sim")(torch.tensor([-2], dtype=torch.int32), torch.randn(3, 4), torch.zeros(3, 4))
    assert e.value.loc.line == line_of(body, "pypto.item(lens, 0)")


def test_item_of_a_written_argument():
    def after(lens, x, out):                # the written value, read once the write is done
        lens[0:1] = lens[0:1] + 1           # (tests/frontend/test_item_of_computed.py)
        for i in pypto.loop(pypto.item(lens, 0)):
            out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0])
    for backend in ("reference", "sim"):
        lens, x, out = torch.ones(2, dtype=torch.int32), torch.randn(3, 4), torch.zeros(3, 4)
        pypto.jit(after, backend=backend)(lens, x, out)
        assert lens.tolist() == [2, 1]
        assert torch.equal(out[:2], x[:2]) and not out[2].any()

    def before(lens, x, out):
        for i in pypto.loop(pypto.item(lens, 0)):
            out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0])
        lens[0:1] = lens[0:1] + 1
    with pytest.raises(PyptoError, match="which a task of this program writes") as e:
        pypto.jit(before, backend="sim")(torch.ones(2, dtype=torch.int32), torch.randn(3, 4), torch.zeros(3, 4))
    assert e.value.loc.line == line_of(before, "pypto.item(lens, 0)")


def _scaled(xv, i):
    if i == 0:                          # a helper of the user's file: rewritten like the jit function
        return xv * 3.0                 # (an early return: the rest of the body is the else side)
    return xv


_pick = lambda i: 1 if i < 2 else 0     # noqa: E731  a lambda is not rewritten: sympy's error, at this line
_PICK_LINE = inspect.currentframe().f_lineno - 1


def _first_rows(i, n):
    return i < n and not i >= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_helper_functions_branch_like_the_jit_function(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32]):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            y = xv * 2.0 if _first_rows(i, x.shape[0]) else xv
            out[i:i + 1, :] = _scaled(y, i)
    x = torch.randn(4, 16)
    out = torch.zeros(4, 16)
    f(x, out)
    ref = x.clone()
    ref[:2] *= 2
    ref[0] *= 3
    close(out, ref, torch.float32)


def _undecidable_forms():
    """Each form of a condition on a run-time value that can be neither decided nor branched on."""
    def tensor_value(x, out):
        for i in pypto.loop(x.shape[0]):
            if x.sum() > 0:
                out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0])

    def while_loop(x, out):
        for i in pypto.loop(x.shape[0]):
            while i < 2:
                out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0])

    def if_with_return(x, out):
        for i in pypto.loop(x.shape[0]):
            if i == 0:
                return None

    def assertion(x, out):
        for i in pypto.loop(x.shape[0]):
            assert i < 2

    def lambda_lt(x, out):
        for i in pypto.loop(x.shape[0]):
            out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0]) * _pick(i)

    def data_while(lens, x, out):
        while pypto.item(lens, 0) > 0:
            out[0:1, :] = pypto.view(x, [1, 4], [0, 0])
    def closure_reads_a_branch_value(x, out):
        def scale():
            return s                # reads the function's s: an if binding s cannot move into side functions
        for i in pypto.loop(x.shape[0]):
            s = 1.0
            if i == 0:
                s = 2.0
            out[i:i + 1, :] = pypto.view(x, [1, 4], [i, 0]) * scale()
    return [(tensor_value, "if x.sum() > 0", TypeMismatchError),
            (closure_reads_a_branch_value, "if i == 0", PyptoError),
            (while_loop, "while i < 2", PyptoError),
            (if_with_return, "if i == 0", PyptoError),
            (assertion, "assert i < 2", PyptoError),
            (lambda_lt, "_pick = lambda i", PyptoError, _PICK_LINE),
            (data_while, "while pypto.item(lens, 0) > 0", PyptoError)]


@pytest.mark.parametrize("form", _undecidable_forms(), ids=lambda f: f[0].__name__)
def test_undecidable_conditions_are_errors_at_the_users_line(form):
    fn, text, err, where = (*form, None)[:4]
    args = (torch.randn(3, 4), torch.zeros(3, 4))
    if fn.__name__ == "data_while":
        args = (torch.ones(1, dtype=torch.int32),) + args
    with pytest.raises(err) as e:
        pypto.jit(fn, backend="reference")(*args)
    want = where if isinstance(where, int) else line_of(fn, text)
    assert e.value.loc is not None and e.value.loc.line == want, str(e.value)


def test_both_sides_must_agree():
    def body(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 4], [i, 0])
            y = xv if i == 0 else pypto.view(x, [2, 4], [0, 0])
            out[0:1, :] = y[0:1, :]
    with pytest.raises(PyptoError, match="same shape and dtype") as e:
        pypto.jit(body, backend="reference")(torch.randn(3, 4), torch.zeros(3, 4))
    assert e.value.loc.line == line_of(body, "y = xv if i == 0")


def test_loop_cann_keywords():
    @pypto.jit(backend="reference")
    def f(x: pypto.Tensor[[4, 8], pypto.float32], out: pypto.Tensor[[4, 8], pypto.float32]):
        for i in pypto.loop(0, 4, 1, idx_name="row", unroll_list=[1, 2]):
            out[i:i + 1, :] = pypto.view(x, [1, 8], [i, 0]) * 2.0
    x = torch.randn(4, 8)
    out = torch.zeros(4, 8)
    f(x, out)
    close(out, x * 2, torch.float32)
    assert "row" in str(f.trace(x, out))
    from pypto.frontend.cann import ignored_options
    assert ignored_options()[("loop_options", "unroll_list")] == [1, 2]


def test_the_execution_graph_prints_branches_and_data_scalars():
    from pypto.passes.pipeline import lower

    @pypto.jit(backend="reference")
    def f(lens: pypto.Tensor[[4], pypto.int32], x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32],
          out: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        for i in pypto.loop(lens[1]):
            xv = pypto.view(x, [1, 64], [i, 0])
            out[i:i + 1, :] = xv * 2.0 if i == 0 else xv
    g = f.trace(torch.tensor([0, 3, 0, 0], dtype=torch.int32), torch.randn(5, 64), torch.zeros(5, 64))
    text = str(lower(g))
    import re
    assert "data scalar d0 = lens[1]" in text
    i = re.search(r"loop (i\d+) in range\(0, d0, 1\)", text).group(1)     # names count per process
    assert f"if Eq({i}, 0):" in text and f"if Ne({i}, 0):" in text


def test_a_timing_only_run_reads_the_callers_tensors():
    @pypto.jit(backend="sim", timing_only=True)
    def f(lens: pypto.Tensor[[4], pypto.int32], x: pypto.Tensor[[8, 64], pypto.float32],
          out: pypto.Tensor[[8, 64], pypto.float32]):
        for i in pypto.loop(pypto.item(lens, 0)):
            out[i:i + 1, :] = pypto.view(x, [1, 64], [i, 0]) + 1.0
    tasks = []
    for n in (0, 2, 5):
        f(torch.tensor([n, 0, 0, 0], dtype=torch.int32), torch.randn(8, 64), torch.zeros(8, 64))
        tasks.append(pypto.last_report().tasks)
    assert tasks[0] < tasks[1] < tasks[2]                   # the trip count came from the data


# ------------------------------------------------------ the rewrite keeps the meaning of plain Python
COUNTER = 0


def _twice(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        return fn(*a, **k) * 2.0
    return wrapper


@_twice
def _plus_one(x):
    return x + 1.0


def _scaled_by(x, f=1.0):
    return x * f


def _boom():
    raise AssertionError("a chained comparison evaluated an operand past its first false link")


X = pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32]     # x.shape[0] a size symbol, x.shape[1] 16


def _plain_python_forms():
    """(name, body, factor): each body returns x * factor in plain Python; none has a symbolic condition
    except `x.shape[0] or 1` (a size, decided true)."""
    def keyword_named_f(x: X):
        return _scaled_by(x, f=2.0)                 # call(f, ...) of the rewrite must not take f=

    def decorated_helper(x: X):
        return _plus_one(x)                         # functools.wraps: the decorator stays

    def global_in_if(x: X):
        global COUNTER
        if x.shape[1] == 16:
            COUNTER += 1
        return x * float(COUNTER > 0)

    def chain_stops_at_first_false(x: X):
        if 1 < 0 < _boom():
            return x * 0.0
        return x * 3.0

    def del_in_if(x: X):
        tmp = 5.0
        if x.shape[1] == 16:
            del tmp
        return x * 1.0

    def closure_reads_a_name_bound_after_an_early_return(x: X):
        def g():
            return scale
        if x.shape[1] == 8:
            return x
        scale = 3.0
        return x * g()

    def closure_called_in_an_if(x: X):
        def g():
            return scale
        scale = 1.0
        if x.shape[1] == 16:
            scale = 4.0
            y = x * g()
        return y

    def walrus_in_a_comprehension(x: X):
        last = 0.0
        if x.shape[1] == 16:
            _ = [last := v for v in (1.0, 5.0)]
        return x * last

    def walrus_in_and(x: X):
        if (k := x.shape[1]) == 16 and k > 8:
            return x * 2.0
        return x

    def match_captures_in_an_if(x: X):
        w, rest, kw = 0, [], {}
        if x.shape[1] == 16:
            match (2, 3, 4):
                case (w, *rest):
                    pass
            match {"a": 1, "b": 5}:
                case {"a": 1, **kw}:
                    pass
        return x * float(w * sum(rest) * kw["b"])   # 2 * 7 * 5

    def class_body_names(x: X):
        class Local:
            a = 2.0
            if x.shape[1] == 16:
                b = a * 2                           # a class body's names: not visible to side functions
            c = 1 if a > 1 else 0
            d = a and 3.0
        return x * (Local.b * Local.c * Local.d)     # 4 * 1 * 3

    def size_or_value(x: X):
        n = x.shape[0] or 1                         # Python's value of `or`: the size, not True
        return pypto.view(x, [1, 16], [n - 1, 0]) * 1.0

    def none_comparison(x: X):
        if x.shape[0] == None:                      # noqa: E711  Python's answer (False), no sympy error
            return x * 0.0
        return x * 1.0

    return [(keyword_named_f, 2.0), (decorated_helper, None), (global_in_if, 1.0),
            (chain_stops_at_first_false, 3.0), (del_in_if, 1.0),
            (closure_reads_a_name_bound_after_an_early_return, 3.0), (closure_called_in_an_if, 4.0),
            (walrus_in_a_comprehension, 5.0), (walrus_in_and, 2.0), (match_captures_in_an_if, 70.0),
            (class_body_names, 12.0), (size_or_value, "last_row"),
            (none_comparison, 1.0)]


@pytest.mark.parametrize("form", _plain_python_forms(), ids=lambda f: f[0].__name__)
def test_the_rewrite_keeps_plain_pythons_meaning(form):
    fn, factor = form
    x = torch.randn(5, 16)
    out = pypto.jit(fn, backend="reference")(x)
    ref = (x + 1.0) * 2.0 if factor is None else (x[4:5] if factor == "last_row" else x * factor)
    close(out, ref, torch.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_and_or_on_loop_indices(backend):
    """`i in (0, 3)` is a condition on the index (Python's `in` would compare structurally: never true);
    `i or k` is Python's value of `or` (i when i != 0), merged as a scalar when only the run decides."""
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32]):
        for i in pypto.loop(x.shape[0]):
            src = i or 2                                    # row 2 for i == 0, else row i
            xv = pypto.view(x, [1, 16], [src, 0])
            if i in (0, 3):
                out[i:i + 1, :] = xv * 2.0
            elif i not in range(1, 3):
                out[i:i + 1, :] = xv * 5.0
            else:
                out[i:i + 1, :] = xv
    x = torch.randn(5, 16)
    out = torch.zeros(5, 16)
    f(x, out)
    rows = torch.tensor([2, 1, 2, 3, 4])
    ref = x[rows] * torch.tensor([2.0, 1.0, 1.0, 2.0, 5.0])[:, None]
    close(out, ref, torch.float32)


def test_installed_libraries_functions_run_as_written(tmp_path, monkeypatch):
    """A call in a rewritten body runs an installed package's function as it is (only the user's own
    files are rewritten), wherever site-packages lies (a virtual environment's is outside the stdlib)."""
    from pypto.frontend import conditions
    lib = tmp_path / "venv" / "lib" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "rv_lib_mod.py").write_text("def pick(a, b):\n    if a:\n        return a\n    return b\n")
    (tmp_path / "rv_user_mod.py").write_text("def pick(a, b):\n    if a:\n        return a\n    return b\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(tmp_path))
    import rv_lib_mod
    import rv_user_mod
    assert conditions._helper_version(rv_lib_mod.pick) is rv_lib_mod.pick
    user = conditions._helper_version(rv_user_mod.pick)
    assert user is not rv_user_mod.pick and user(0, 3) == 3 and user(2, 3) == 2


def test_functions_made_by_a_rewritten_body_are_not_rewritten_again(monkeypatch):
    """A nested def of a rewritten body is rewritten with it: calling it does not parse its source again
    (each new closure object did, and failed: 0.15 -> 0.04 CPU s for 300 nested defs and lambdas in a
    traced loop)."""
    from pypto.frontend import conditions

    def outer():
        def inner(v):
            return v if v > 0 else -v
        return inner
    inner = conditions.traceable(outer)()
    tried = []
    real = conditions._rewritten
    monkeypatch.setattr(conditions, "_rewritten", lambda fn: tried.append(fn) or real(fn))
    assert conditions._HELPER in inner.__code__.co_freevars
    assert conditions._helper_version(inner) is inner and inner(-2) == 2 and inner(3) == 3
    lam = lambda v: v + 1                                   # noqa: E731  no source of its own to rewrite
    assert conditions._helper_version(lam) is lam
    assert tried == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_temporary_of_one_side_of_a_run_time_branch(backend):
    """A name only one side binds (and not bound before) needs no merge (it was 'a tensor on one side
    and <unbound> on the other'); using it after the branch is an error at that line."""
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 16], pypto.float32]):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            if i == 0:
                t = xv * 2.0
                out[i:i + 1, :] = t
            else:
                u = xv - 1.0
                out[i:i + 1, :] = u
    x = torch.randn(3, 16)
    out = torch.zeros(3, 16)
    f(x, out)
    ref = x - 1
    ref[0] = x[0] * 2
    close(out, ref, torch.float32)

    def used_after(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 4], [i, 0])
            if i == 0:
                t = xv * 2.0
            out[i:i + 1, :] = t + 1.0
    with pytest.raises(PyptoError, match="only one side") as e:
        pypto.jit(used_after, backend="reference")(torch.randn(3, 4), torch.zeros(3, 4))
    assert e.value.loc.line == line_of(used_after, "t + 1.0")


# ------------------------------------------------------------------ shapes a branch side's condition decides
def tail_chunks(backend, dtype, L=32):
    """A loop over a dynamic T in chunks of L, the last one a tail: where pypto.is_loop_end(i) is False a
    later chunk exists, so the view's valid shape min(L, T - i) is L there and tril @ view multiplies
    [L, L] by [L, 1] (a prefix sum of the chunk); the tail chunk is scaled by 2."""
    dt = pypto.dtypes.from_torch(dtype)

    @pypto.jit(backend=backend)
    def f(tril: pypto.Tensor[[L, L], dt], g: pypto.Tensor[[pypto.DYNAMIC, 1], dt],
          out: pypto.Tensor[[pypto.DYNAMIC, 1], dt]):
        t = g.shape[0]
        for i in pypto.loop(0, t, L):
            gv = pypto.view(g, [L, 1], [i, 0], valid_shape=[(t - i).min(L), 1])
            if pypto.is_loop_end(i):
                pypto.assemble(gv * 2.0, [i, 0], out)
            else:
                out[i:i + L, :] = pypto.matmul(tril, gv)      # a [L, 1] box: min(L, T - i) is L here
    return f


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_non_last_iteration_sees_full_chunks(backend, dtype):
    L = 32
    f = tail_chunks(backend, dtype, L)
    tril = torch.ones(L, L).tril().to(dtype)
    for t in (70, 64, 20, 33):                              # tails of 6, none, only a tail, 1
        g = torch.randn(t, 1).to(dtype)
        out = torch.zeros(t, 1).to(dtype)
        f(tril, g, out)
        last = (t - 1) // L * L
        ref = torch.cat([g[k:k + L].double().cumsum(0) for k in range(0, t, L)])
        ref[last:] = g[last:].double() * 2
        close(out, ref, dtype)      # fp16: the output's one rounding (the cube sums in fp32)
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_first_iteration_sees_its_static_extent(backend):
    # loop(0, 200, 64): at i == start min(64, 200 - i) is 64, so the first chunk is a full [64, 1]
    @pypto.jit(backend=backend)
    def f(tril: pypto.Tensor[[64, 64], pypto.float32], g: pypto.Tensor[[200, 1], pypto.float32],
          out: pypto.Tensor[[200, 1], pypto.float32]):
        for i in pypto.loop(0, 200, 64):
            gv = pypto.view(g, [64, 1], [i, 0], valid_shape=[pypto.min(64, 200 - i), 1])
            if pypto.is_loop_begin(i):
                pypto.assemble(pypto.matmul(tril, gv), [0, 0], out)
            else:
                pypto.assemble(gv - 1.0, [i, 0], out)
    tril = torch.ones(64, 64).tril()
    g = torch.randn(200, 1)
    out = torch.zeros(200, 1)
    f(tril, g, out)
    ref = g - 1
    ref[:64] = g[:64].cumsum(0)
    close(out, ref, torch.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_made_inside_a_side_sees_its_static_extent(backend):
    # pypto.view's valid shape inside the side where i is not the last index: min(L, T - i) is L there, as
    # for a captured view or a slice's box (was the K-mismatch ShapeError); the tail side keeps its extent
    L = 32

    @pypto.jit(backend=backend)
    def f(tril: pypto.Tensor[[L, L], pypto.float32], g: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32],
          out: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32]):
        t = g.shape[0]
        for i in pypto.loop(0, t, L):
            if pypto.is_loop_end(i):
                gv = pypto.view(g, [L, 1], [i, 0], valid_shape=[(t - i).min(L), 1])
                pypto.assemble(gv * 2.0, [i, 0], out)
            else:
                gv = pypto.view(g, [L, 1], [i, 0], valid_shape=[(t - i).min(L), 1])
                pypto.assemble(pypto.matmul(tril, gv), [i, 0], out)
    tril = torch.ones(L, L).tril()
    for t in (70, 33):
        g, out = torch.randn(t, 1), torch.zeros(t, 1)
        f(tril, g, out)
        last = (t - 1) // L * L
        ref = torch.cat([g[k:k + L].cumsum(0) for k in range(0, t, L)])
        ref[last:] = g[last:] * 2
        close(out, ref, torch.float32)


@pytest.mark.parametrize("make", ["full", "zeros", "reshape"])
def test_a_tensor_made_on_a_side_with_the_tail_size_meets_the_refined_captures(make):
    # on the side where i is not the last index a captured view's min(L, T - i) is L; a tensor the side makes
    # with that size (full / zeros / reshape) is [L, 1] too, so the two broadcast (was: 'cannot broadcast
    # [Min(32, g_d0 - i0), 1] and [32, 1]' since 0b5e92f); the tail side keeps the run-time extent
    L = 32

    @pypto.jit(backend="sim")
    def f(g: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32]):
        t = g.shape[0]
        for i in pypto.loop(0, t, L):
            gv = pypto.view(g, [L, 1], [i, 0], valid_shape=[(t - i).min(L), 1])
            if pypto.is_loop_end(i):
                pypto.assemble(gv * 2.0, [i, 0], out)
            else:
                n = (t - i).min(L)
                if make == "full":
                    z = pypto.full([n, 1], 1.0, pypto.float32)
                elif make == "zeros":
                    z = pypto.zeros(n, 1) + 1.0
                else:
                    z = pypto.reshape(gv * 0.0 + 1.0, [n, 1])
                pypto.assemble(z + gv, [i, 0], out)
    for t in (70, 33):
        g, out = torch.randn(t, 1), torch.zeros(t, 1)
        f(g, out)
        last = (t - 1) // L * L
        ref = g + 1.0
        ref[last:] = g[last:] * 2
        close(out, ref, torch.float32)


def test_the_tail_side_keeps_its_run_time_extent():
    # the side where i is the last index knows nothing that fixes min(32, T - i): a matmul on the tail
    # view there is still the K mismatch (the facts are not applied to the wrong side)
    @pypto.jit(backend="sim")
    def f(tril: pypto.Tensor[[32, 32], pypto.float32], g: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32],
          out: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32]):
        t = g.shape[0]
        for i in pypto.loop(0, t, 32):
            gv = pypto.view(g, [32, 1], [i, 0], valid_shape=[(t - i).min(32), 1])
            if pypto.is_loop_end(i):
                pypto.assemble(pypto.matmul(tril, gv), [i, 0], out)     # tail matmul
            else:
                pypto.assemble(gv * 1.0, [i, 0], out)
    with pytest.raises(PyptoError, match="inner dimensions differ") as e:
        f(torch.ones(32, 32), torch.randn(40, 1), torch.zeros(40, 1))
    # the user's file and line (was the `else` side's last line, 2 below: the rewrite's helper calls took
    # the location of the whole `if`)
    assert e.value.loc.file == __file__ and e.value.loc.line == line_of(f, "# tail matmul"), str(e.value)
    assert f"test_runtime_control.py:{e.value.loc.line}:" in str(e.value)


# ------------------------------------------------------------ the line an error inside a branch side names
def _early_return_side(xv, i):
    if i == 0:
        y = pypto.matmul(xv, xv)                    # bad: then side of an early return
        y = y * 2.0
        return y
    return xv


def _early_return_rest(xv, i):
    if i == 0:
        return xv
    y = pypto.matmul(xv, xv)                        # bad: the rest of the body (the else side)
    y = y * 2.0
    return y


def _side_error_forms():
    """Each form of a run-time branch with an error (a K mismatch: [1, 16] @ [1, 16]) on a side, on a line
    that is not the branch's last one (an error named the `if`'s last line, or one between)."""
    def then_side(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            if i == 0:
                y = pypto.matmul(xv, xv)            # bad: then side
                y = y + 1.0
            else:
                y = xv * 2.0
                y = y + 1.0
            out[i:i + 1, :] = y

    def elif_side(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            if i == 0:
                y = xv
            elif i == 1:
                y = pypto.matmul(xv, xv)            # bad: elif side
                y = y + 1.0
            else:
                y = xv * 2.0
            out[i:i + 1, :] = y

    def nested_if(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            if i < 2:
                y = xv * 3.0
                if i == 0:
                    y = pypto.matmul(xv, y)         # bad: inner then side
                    y = y + 1.0
                else:
                    y = y - 1.0
                y = y * 2.0
            else:
                y = xv
            out[i:i + 1, :] = y

    def conditional_expression(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            if i == 0:
                y = (xv * 2.0
                     if i == 0 else
                     pypto.matmul(                  # bad: a side of `a if c else b`, its call over 2 lines
                         xv, xv))
                y = y + 1.0
            else:
                y = xv
            out[i:i + 1, :] = y

    def early_return_then(x, out):
        for i in pypto.loop(x.shape[0]):
            out[i:i + 1, :] = _early_return_side(pypto.view(x, [1, 16], [i, 0]), i)

    def early_return_rest(x, out):
        for i in pypto.loop(x.shape[0]):
            out[i:i + 1, :] = _early_return_rest(pypto.view(x, [1, 16], [i, 0]), i)

    return [(then_side, then_side, "# bad: then side"), (elif_side, elif_side, "# bad: elif side"),
            (nested_if, nested_if, "# bad: inner then side"),
            (conditional_expression, conditional_expression, "# bad: a side of"),
            (early_return_then, _early_return_side, "# bad: then side of an early return"),
            (early_return_rest, _early_return_rest, "# bad: the rest of the body")]


@pytest.mark.parametrize("form", _side_error_forms(), ids=lambda f: f[0].__name__)
def test_an_error_inside_a_branch_side_names_the_users_line(form):
    fn, where, text = form
    with pytest.raises(PyptoError, match="inner dimensions differ") as e:
        pypto.jit(fn, backend="reference")(torch.randn(3, 16), torch.zeros(3, 16))
    assert e.value.loc.file == __file__ and e.value.loc.line == line_of(where, text), str(e.value)


_HELPER_MODULE = """\
import pypto


def helper(xv, i):
    if i == 0:
        y = pypto.matmul(xv, xv)                    # bad: helper
        y = y + 1.0
    else:
        y = xv
    return y


class Scaler:
    def apply(self, xv, i):
        if i == 0:
            y = xv * 2.0
            y = y + 1.0
        else:
            y = pypto.matmul(xv, xv)                # bad: method
            y = y + 1.0
        return y

    def plain(self, xv, i):
        if i == 0:
            y = xv
        else:
            y = xv * fail(i)                        # bad: plain
            y = y + 1.0
        return y


def fail(i):
    raise ValueError("a plain exception")
"""


@pytest.fixture
def helper_module(tmp_path, monkeypatch):
    path = tmp_path / "rv_lines_helpers.py"
    path.write_text(_HELPER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rv_lines_helpers
    yield rv_lines_helpers, str(path)
    sys.modules.pop("rv_lines_helpers", None)


def _module_line(text):
    return next(k for k, line in enumerate(_HELPER_MODULE.splitlines(), 1) if text in line)


@pytest.mark.parametrize("which", ["helper", "method"])
def test_an_error_in_a_helper_of_another_file_names_its_line(helper_module, which):
    """A helper function (and a method: an indented source) of another file: the error names that file
    and the line in it."""
    mod, path = helper_module

    def f(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            out[i:i + 1, :] = mod.helper(xv, i) if which == "helper" else mod.Scaler().apply(xv, i)
    with pytest.raises(PyptoError, match="inner dimensions differ") as e:
        pypto.jit(f, backend="reference")(torch.randn(3, 16), torch.zeros(3, 16))
    assert e.value.loc.file == path and e.value.loc.line == _module_line(f"# bad: {which}"), str(e.value)


def _boom(i):
    raise ValueError("a plain exception")


def test_a_python_traceback_inside_a_branch_shows_the_users_lines(helper_module):
    """A plain exception raised inside a branch side: Python's traceback shows the user's lines (the
    jit function's frame at its `if`, the side's at the raising line) and, on Python >= 3.11, underlines
    the user's expression, an indented method's too (its source is parsed at its own columns)."""
    import traceback
    mod, path = helper_module

    def f(x, out):
        for i in pypto.loop(x.shape[0]):
            xv = pypto.view(x, [1, 16], [i, 0])
            if i == 0:
                y = xv
            elif i == 1:
                y = xv * _boom(i)                   # raises
                y = y + 1.0
            else:
                y = xv
            out[i:i + 1, :] = y

    def g(x, out):
        for i in pypto.loop(x.shape[0]):
            out[i:i + 1, :] = mod.Scaler().plain(pypto.view(x, [1, 16], [i, 0]), i)

    raise_line = line_of(_boom, "raise ValueError")
    for fn, file, line, want in (
            (f, __file__, line_of(f, "# raises"),
             [line_of(f, "if i == 0:"), line_of(f, "elif i == 1:"), line_of(f, "# raises"), raise_line]),
            (g, path, _module_line("# bad: plain"),
             [line_of(g, "mod.Scaler()"), _module_line("def plain") + 1, _module_line("# bad: plain"),
              _module_line('raise ValueError("a plain')])):
        with pytest.raises(ValueError, match="a plain exception") as e:
            pypto.jit(fn, backend="reference")(torch.randn(3, 16), torch.zeros(3, 16))
        tb = [t for t in traceback.extract_tb(e.value.__traceback__) if t.filename in (__file__, path)]
        names = [t.name for t in tb]
        tb = tb[names.index(fn.__name__):]                  # from the jit function's frame on
        assert [t.lineno for t in tb] == want, tb
        side = tb[-2]                                       # the branch side that raised
        assert side.name.startswith("_pypto_") and side.filename == file, tb
        if sys.version_info >= (3, 11):                     # the underlined text is the user's call
            src = open(file).read().splitlines()[line - 1]
            assert src[side.colno:side.end_colno] in ("_boom(i)", "fail(i)"), (src, side.colno, side.end_colno)
