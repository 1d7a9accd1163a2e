"""Property test: pypto.loop programs (row blocks with tails, recurrences through a carried tensor
written with x[i:i+1] = ..., accumulators, views of carried values read before and after a write,
nested loops, whole-tensor reductions of a carried value) on static and DYNAMIC sizes run on the sim
backend exactly as on the reference interpreter; one sim compilation serves every dynamic size."""
import os

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import pypto
from .passes_helpers import assert_match

F32 = pypto.float32
KINDS = ["blocks", "recurrence", "accum", "view_before_write", "carried_reduce", "nested", "two_carried",
         "blocks_reduce", "scan_rows", "col_blocks", "matmul_k_blocks", "online_max", "carried_view_sum"]
UNARY = ["exp", "neg", "tanh", "abs"]


def _un(name, v):
    return getattr(v, name)()


def build(kind, block, un):
    def fn(x, y):
        n, c = x.shape[0], x.shape[1]
        dt = x.dtype
        if kind == "blocks":
            out = pypto.zeros(n, c, dtype=dt)
            for i in pypto.loop(pypto.ceildiv(n, block)):
                v = pypto.view(x, [block, c], [i * block, 0], valid_shape=[pypto.min(block, n - i * block), c])
                pypto.assemble(_un(un, v) * 2, [i * block, 0], out)
            return out
        if kind == "blocks_reduce":
            out = pypto.zeros(n, 1, dtype=dt)
            for i in pypto.loop(pypto.ceildiv(n, block)):
                v = pypto.view(x, [block, c], [i * block, 0], valid_shape=[pypto.min(block, n - i * block), c])
                pypto.assemble(pypto.amax(_un(un, v), -1, keepdim=True) + pypto.sum(v, -1, keepdim=True),
                               [i * block, 0], out)
            return out
        if kind == "recurrence":
            for i in pypto.loop(1, n):
                y[i:i + 1] = y[i - 1:i] * 0.5 + _un(un, x[i:i + 1])
            return y * 1
        if kind == "accum":
            acc = pypto.zeros(1, c, dtype=dt)
            for i in pypto.loop(n):
                acc[:, :] = acc + _un(un, x[i:i + 1])
            return acc
        if kind == "view_before_write":
            z = pypto.zeros(n, c, dtype=dt)
            for i in pypto.loop(n):
                a = y[i:i + 1]                  # a view of the carried tensor, taken before the write
                y[i:i + 1] = a * 2 + x[i:i + 1]
                z[i:i + 1] = a + 1              # torch: a sees the write
            return y * 1, z
        if kind == "carried_reduce":
            for i in pypto.loop(n):
                y[i:i + 1] = x[i:i + 1] + pypto.amax(y, 0, keepdim=True) * 0.25
            return y * 1
        if kind == "nested":
            out = pypto.zeros(n, c, dtype=dt)
            for i in pypto.loop(pypto.ceildiv(n, 2)):
                for j in pypto.loop(pypto.min(2, n - i * 2)):
                    r = i * 2 + j
                    out[r:r + 1] = _un(un, x[r:r + 1]) + y[r:r + 1]
            return out
        if kind == "two_carried":
            s = pypto.zeros(1, c, dtype=dt)
            m = pypto.zeros(n, c, dtype=dt)
            for i in pypto.loop(n):
                s[:, :] = s + x[i:i + 1]
                m[i:i + 1] = s * y[i:i + 1]
            return s * 1, m
        if kind == "col_blocks":             # column blocks of every row, the last one a tail
            out = pypto.zeros(n, c, dtype=dt)
            for j in pypto.loop(pypto.ceildiv(c, block)):
                w = pypto.min(block, c - j * block)
                v = pypto.view(x, [n, block], [0, j * block], valid_shape=[n, w])
                out[:, j * block:j * block + w] = _un(un, v) - pypto.amax(v, 0, keepdim=True)
            return out
        if kind == "matmul_k_blocks":        # y^T x accumulated over row blocks of both (K split by the loop)
            acc = pypto.zeros(c, c, dtype=dt)
            for i in pypto.loop(pypto.ceildiv(n, block)):
                r = pypto.min(block, n - i * block)
                xv = pypto.view(x, [block, c], [i * block, 0], valid_shape=[r, c])
                yv = pypto.view(y, [block, c], [i * block, 0], valid_shape=[r, c])
                acc[:, :] = acc + yv.transpose(0, 1) @ _un(un, xv)
            return acc
        if kind == "online_max":             # a running max and a rescaled running sum, as in flash attention
            m = pypto.full((1, c), -6e4, dt)
            s = pypto.zeros(1, c, dtype=dt)
            for i in pypto.loop(n):
                row = x[i:i + 1]
                m_new = pypto.maximum(m, row)
                s[:, :] = s * (m - m_new).exp() + (row - m_new).exp()
                m[:, :] = m_new
            return s * 1, m * 1
        if kind == "carried_view_sum":       # a view of the carried tensor read after the tensor was written
            out = pypto.zeros(n, c, dtype=dt)
            head = out[0:1]
            for i in pypto.loop(n):
                out[i:i + 1] = x[i:i + 1] + head * 0.5
            return out, head * 1
        # scan_rows: a running sum kept in the output, row i read back as row i + 1's base
        out = pypto.zeros(n, c, dtype=dt)
        out[0:1] = x[0:1]
        for i in pypto.loop(1, n):
            out[i:i + 1] = out[i - 1:i] + _un(un, x[i:i + 1])
        return out
    return fn


@st.composite
def loop_programs(draw):
    kind = draw(st.sampled_from(KINDS))
    c = draw(st.sampled_from([1, 8, 17, 64, 130]))
    sizes = draw(st.lists(st.sampled_from([1, 2, 3, 5, 8, 17]), min_size=1, max_size=2, unique=True))
    block = draw(st.sampled_from([1, 4, 8, 16]))
    dynamic = draw(st.booleans())
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float16, torch.bfloat16]))
    return kind, c, sizes, block, draw(st.sampled_from(UNARY)), dynamic, dtype


def _annotated(fn, c, dynamic, dtype):
    if not dynamic:
        return fn
    dt = pypto.dtypes.from_torch(dtype)

    def f(x: pypto.Tensor[[pypto.DYNAMIC, c], dt], y: pypto.Tensor[[pypto.DYNAMIC, c], dt]):
        return fn(x, y)
    return f


# fp16/bf16: each op rounds to the storage dtype, and recurrences carry it along the loop
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (8e-2, 8e-2)}


@settings(max_examples=int(os.environ.get("PYPTO_HYPOTHESIS_EXAMPLES", 20)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(loop_programs(), st.integers(0, 1000))
def test_random_loop_programs_sim_equals_reference(program, seed):
    kind, c, sizes, block, un, dynamic, dtype = program
    fn = _annotated(build(kind, block, un), c, dynamic, dtype)
    sim = pypto.jit(fn, backend="sim")
    ref = pypto.jit(fn, backend="reference")
    g = torch.Generator().manual_seed(seed)
    for n in sizes:
        x = (torch.rand((n, c), generator=g) * 2 - 1).to(dtype)
        y = (torch.rand((n, c), generator=g) * 2 - 1).to(dtype)
        xs, ys, xr, yr = x.clone(), y.clone(), x.clone(), y.clone()
        out = sim(xs, ys)
        expected = ref(xr, yr)
        scale = max(1.0, max(float(t.float().abs().max()) for t in (expected if isinstance(expected, tuple)
                                                                       else (expected,)) if t.numel()))
        tol = (TOL[dtype][0], TOL[dtype][1] * scale)
        assert_match(out, expected, tol)
        assert_match([xs, ys], [xr, yr], tol)
    if dynamic:
        assert sim.trace_count == 1
