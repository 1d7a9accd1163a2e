"""Tracing behaviour of @pypto.jit and pypto.loop: the compile cache, duck sizing, named dims, output
parameters, writes through views, loop-carried tensors, nested loops, escaping loop values, source
locations, and call-time checks."""

import pytest
import torch

import pypto
from pypto.testing.source import line_of
from pypto.errors import DTypeError, PyptoError, ShapeError, SymbolicError, TypeMismatchError
from pypto.ops.registry import REGISTRY

F32 = pypto.float32


def ref_jit(fn=None, **kw):
    return pypto.jit(fn, backend="reference", **kw) if fn else pypto.jit(backend="reference", **kw)


# ------------------------------------------------------------------ the compile cache
def test_cache_per_signature():
    @ref_jit
    def f(x, scale):
        return x * scale

    x = torch.randn(4, 8)
    f(x, 2.0)
    f(torch.randn(4, 8), 2.0)                      # same shapes, dtype and constant: cached
    assert f.trace_count == 1
    f(x.half(), 2.0)                               # dtype
    f(torch.randn(5, 8), 2.0)                      # a static dim
    f(x, 3.0)                                      # a non-tensor argument
    assert f.trace_count == 4
    torch.testing.assert_close(f(x, 3.0), x * 3)
    assert f.trace_count == 4


def test_dynamic_dim_traces_once_for_every_size():
    @ref_jit
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 16], F32]):
        return x.exp().sum(-1)

    for t in (1, 7, 64, 1000):
        x = torch.randn(t, 16)
        torch.testing.assert_close(f(x), x.exp().sum(-1))
    assert f.trace_count == 1
    g = f.trace(torch.randn(3, 16))
    assert [str(s) for s in g.symbols] == ["x_d0"] and str(g.info(g.inputs[0]).shape[0]) == "x_d0"


def test_duck_sizing_shares_symbols_of_equal_dynamic_sizes():
    @ref_jit
    def f(x: pypto.Tensor[[pypto.DYNAMIC], F32], y: pypto.Tensor[[pypto.DYNAMIC], F32]):
        return x + y if x.shape[0] is y.shape[0] else pypto.concat([x, y])

    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(f(a, b), a + b)     # equal at trace time: one symbol, x + y broadcasts
    torch.testing.assert_close(f(torch.randn(9), torch.randn(9)).shape, torch.Size([9]))
    assert f.trace_count == 1
    c = torch.randn(3)
    torch.testing.assert_close(f(a, c), torch.cat([a, c]))   # unequal: another equality pattern, a new trace
    assert f.trace_count == 2


def test_named_dims_bind_across_arguments():
    T = pypto.dynamic("T")

    @ref_jit
    def f(x: pypto.Tensor[[T, 8], F32], y: pypto.Tensor[[T, 1], F32]):
        return x * y

    x, y = torch.randn(6, 8), torch.randn(6, 1)
    torch.testing.assert_close(f(x, y), x * y)
    with pytest.raises(SymbolicError, match="size 'T' is 6 in one argument and 4 in 'y'") as e:
        f(x, torch.randn(4, 1))
    assert e.value.loc.line == line_of(test_named_dims_bind_across_arguments, "f(x, torch.randn(4, 1))")


def test_cann_style_annotation():
    @ref_jit
    def f(x: pypto.Tensor((pypto.DYNAMIC, 4), pypto.DT_FP16)):
        return x + 1

    x = torch.randn(3, 4, dtype=torch.float16)
    torch.testing.assert_close(f(x), x + 1)
    f(torch.randn(11, 4, dtype=torch.float16))
    assert f.trace_count == 1


# ------------------------------------------------------------------ writes
def test_output_parameter_written_in_place():
    @ref_jit
    def add(x: pypto.Tensor[[pypto.DYNAMIC, 8], F32], y: pypto.Tensor[[pypto.DYNAMIC, 8], F32],
            out: pypto.Tensor[[pypto.DYNAMIC, 8], F32]):
        out[:] = x + y

    x, y, out = torch.randn(5, 8), torch.randn(5, 8), torch.zeros(5, 8)
    assert add(x, y, out) is None
    torch.testing.assert_close(out, x + y)


def test_partial_write_keeps_the_rest():
    @ref_jit
    def f(x: pypto.Tensor[[6, 4], F32]):
        y = pypto.zeros(6, 4)
        y[2:4] = x[0:2] * 10
        y[:, -1] = 1.0
        return y

    x = torch.randn(6, 4)
    want = torch.zeros(6, 4)
    want[2:4] = x[0:2] * 10
    want[:, -1] = 1.0
    torch.testing.assert_close(f(x), want)


def test_write_through_a_view_reaches_the_base_and_the_input():
    @ref_jit
    def f(x: pypto.Tensor[[4, 6], F32]):
        v = x[1:3, 2:]
        v[:, 1:3] = 0.0                          # writes x[1:3, 3:5]
        return v * 1                              # the view sees its own write

    x = torch.randn(4, 6)
    want = x.clone()
    want[1:3, 3:5] = 0
    got = f(x)
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(got, want[1:3, 2:])


def test_write_into_a_reshaped_view_is_an_error():
    def body(x):
        r = x.reshape(24)
        r[0:2] = 1.0

    with pytest.raises(PyptoError, match="in-place write into a reshaped") as e:
        ref_jit(body)(torch.randn(4, 6))
    assert e.value.loc.line == line_of(body, "r[0:2] = 1.0")


# ------------------------------------------------------------------ loops
def test_loop_carried_accumulator_and_tail_blocks():
    @ref_jit
    def colsum(x: pypto.Tensor[[pypto.DYNAMIC, 8], F32]):
        n = x.shape[0]
        acc = pypto.zeros(1, 8)
        for i in pypto.loop(pypto.ceildiv(n, 4)):
            acc[:] = acc + x[i * 4:(i + 1) * 4].sum(0, keepdim=True)
        return acc

    for t in (1, 7, 64, 1000):
        x = torch.randn(t, 8)
        torch.testing.assert_close(colsum(x), x.sum(0, keepdim=True), rtol=1e-5, atol=1e-4)
    assert colsum.trace_count == 1
    g = colsum.trace(torch.randn(3, 8))
    assert [g.op(n) for n in g.nodes()].count("loop") == 1
    g.verify(REGISTRY)


def test_nested_loops_write_tiles():
    @ref_jit
    def scale_tiles(x: pypto.Tensor[[pypto.dynamic("R"), pypto.dynamic("C")], F32]):   # distinct even if equal
        rows, cols = x.shape
        out = pypto.zeros(rows, cols)
        for i in pypto.loop(pypto.ceildiv(rows, 3)):
            for j in pypto.loop(pypto.ceildiv(cols, 5)):
                tile = x[i * 3:(i + 1) * 3, j * 5:(j + 1) * 5]
                out[i * 3:(i + 1) * 3, j * 5:(j + 1) * 5] = tile * (i + 1) + j

        return out

    for r, c in ((1, 1), (7, 11), (9, 10)):
        x = torch.randn(r, c)
        want = x.clone()
        for i in range(-(-r // 3)):
            for j in range(-(-c // 5)):
                want[i * 3:(i + 1) * 3, j * 5:(j + 1) * 5] = x[i * 3:(i + 1) * 3, j * 5:(j + 1) * 5] * (i + 1) + j
        torch.testing.assert_close(scale_tiles(x), want)
    assert scale_tiles.trace_count == 1
    scale_tiles.trace(torch.randn(9, 10)).verify(REGISTRY)


def test_loop_with_start_stop_step():
    @ref_jit
    def f(x: pypto.Tensor[[12], F32]):
        out = pypto.zeros(12)
        for i in pypto.loop(2, 12, 3):               # i = 2, 5, 8, 11
            out[i:i + 1] = x[i:i + 1] + i
        return out

    x = torch.randn(12)
    want = torch.zeros(12)
    for i in range(2, 12, 3):
        want[i] = x[i] + i
    torch.testing.assert_close(f(x), want)


def test_loop_local_tensor_returned_is_an_error():
    def body(x):
        for i in pypto.loop(2):
            y = x * 2
        return y

    with pytest.raises(PyptoError, match="returned value 0 was created inside a pypto.loop body"):
        ref_jit(body)(torch.randn(3))


def test_loop_local_tensor_used_after_the_loop_is_an_error():
    def body(x):
        for i in pypto.loop(2):
            y = x * 2
        return y + 1

    with pytest.raises(PyptoError, match="belongs to a finished trace") as e:
        ref_jit(body)(torch.randn(3))
    assert e.value.loc.line == line_of(body, "return y + 1")


def test_loop_bound_must_be_a_size():
    def body(x):
        for i in pypto.loop(x):
            pass
        return x

    # a one-element integer tensor is a bound (a data scalar: tests/frontend/test_runtime_control.py)
    with pytest.raises(PyptoError, match="pypto.loop stop is a f32 tensor; a loop bound is an integer") as e:
        ref_jit(body)(torch.randn(3))
    assert e.value.loc.line == line_of(body, "pypto.loop(x)")


# ------------------------------------------------------------------ graph metadata and call-time checks
def test_every_node_records_the_user_line():
    def body(x):
        y = x.exp()
        return y.sum(-1)

    g = ref_jit(body).trace(torch.randn(2, 3))
    locs = {g.op(n): g.node(n)["loc"] for n in g.nodes() if g.op(n) != "input"}
    assert locs["exp"].line == line_of(body, "x.exp()") and locs["sum"].line == line_of(body, "y.sum(-1)")
    assert locs["exp"].file == __file__


@pytest.mark.parametrize("arg,exc,match", [
    (torch.randn(4), ShapeError, r"argument 'x' must have rank 2"),
    (torch.randn(4, 9), ShapeError, r"argument 'x' dim 1 must be 8"),
    (torch.randn(4, 8, dtype=torch.float16), DTypeError, r"argument 'x' must be float32, found torch.float16"),
])
def test_call_time_checks_name_the_call_site(arg, exc, match):
    @ref_jit
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 8], F32]):
        return x + 1

    with pytest.raises(exc, match=match) as e:
        f(arg)
    assert e.value.loc.file == __file__ and e.value.loc.line == line_of(test_call_time_checks_name_the_call_site,
                                                                        "f(arg)")


def test_traced_values_have_no_truth_value_and_do_not_iterate():
    def truth(x):
        return x if x > 0 else -x

    def iterate(x):
        return [r for r in x]

    with pytest.raises(TypeMismatchError, match="no truth value"):
        ref_jit(truth)(torch.randn(3))
    with pytest.raises(TypeMismatchError, match="iterating over a traced pypto.Tensor"):
        ref_jit(iterate)(torch.randn(3))


def test_function_must_return_or_write():
    with pytest.raises(PyptoError, match="neither returns a tensor nor writes into an argument"):
        ref_jit(lambda x: None)(torch.randn(3))
    with pytest.raises(TypeMismatchError, match="must return a pypto.Tensor"):
        ref_jit(lambda x: 3)(torch.randn(3))


def test_tensor_methods_mirror_torch():
    def body(x):
        return (x.sum(-1, keepdim=True), x.mean(0), x.amax(1), x.var(-1), x.argmax(-1), x.cumsum(0),
                x.softmax(-1), x.transpose(0, 1), x.permute(1, 0), x.T, x.unsqueeze(1), x.reshape(-1),
                x.view(4, 3), x.flatten(), x.expand(2, 3, 4), x.tril(), x.triu(1), x @ x.t(), x.numel() * x,
                x.max(-1).values, x.min(), x.float(), x.contiguous(), x.where(x > 0, x * 2), x.erf(), x.abs().log2())

    x = torch.randn(3, 4)
    got = ref_jit(body)(x)
    want = body(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
