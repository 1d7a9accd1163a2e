"""Property test: random programs of 2-12 ops (elementwise with broadcasting, scalars, reductions,
softmax, matmul) on random shapes, dtypes and tile hints run on the sim backend exactly as the
reference interpreter does (within the dtype's tolerance)."""
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import pypto
from .passes_helpers import sim_vs_reference

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (6e-2, 6e-2)}
UNARY = ["tanh", "sigmoid", "abs", "relu", "neg", "sin", "exp_tanh", "sqrt1p", "silu"]
BINARY = ["add", "sub", "mul", "maximum", "div1p"]


def apply_unary(name, x):
    if name == "exp_tanh":
        return x.tanh().exp()
    if name == "sqrt1p":
        return (x.abs() + 1).sqrt()
    if name == "silu":
        return pypto.silu(x)
    return getattr(x, name)()


def apply_binary(name, x, y):
    if name == "div1p":
        return x / (y.abs() + 1)
    return getattr(pypto, name)(x, y)


@st.composite
def programs(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([1, 3, 8, 17, 40, 64])) for _ in range(rank - 1)) + \
        (draw(st.sampled_from([8, 16, 24, 48, 96, 130])),)
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    n_ops = draw(st.integers(2, 12))
    ops = []
    for k in range(n_ops):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "scalar", "reduce", "softmax", "matmul"]))
        if kind == "unary":
            ops.append(("unary", draw(st.sampled_from(UNARY)), draw(st.integers(0, k))))
        elif kind == "binary":
            ops.append(("binary", draw(st.sampled_from(BINARY)), draw(st.integers(0, k)), draw(st.integers(0, k))))
        elif kind == "scalar":
            ops.append(("scalar", draw(st.sampled_from(["mul", "add", "rsub"])),
                        draw(st.sampled_from([0.5, 2.0, -1.25])), draw(st.integers(0, k))))
        elif kind == "reduce":
            ops.append(("reduce", draw(st.sampled_from(["sum", "amax", "amin", "mean"])),
                        draw(st.sampled_from([-1, 0])), draw(st.integers(0, k))))
        else:
            ops.append((kind, draw(st.integers(0, k))))
    hint = None
    if draw(st.booleans()):
        last = draw(st.sampled_from([16, 32, 64, 128]))
        hint = tuple(draw(st.sampled_from([1, 2, 4])) for _ in range(rank - 1)) + (last,)
    return shape, DTYPES[dtype], ops, hint


def build(ops, hint):
    def fn(x, w):
        if hint is not None:
            pypto.set_vec_tile_shapes(*hint)
        vals = [x]
        for op in ops:
            pick = lambda i: vals[min(i, len(vals) - 1)]        # noqa: E731
            if op[0] == "unary":
                v = apply_unary(op[1], pick(op[2]))
            elif op[0] == "binary":
                a, b = pick(op[2]), pick(op[3])
                if tuple(a.shape) != tuple(b.shape):
                    b = x
                    a = a if tuple(a.shape) == tuple(x.shape) or a.ndim == x.ndim else x
                v = apply_binary(op[1], a, b)
            elif op[0] == "scalar":
                a = pick(op[3])
                v = a * op[2] if op[1] == "mul" else a + op[2] if op[1] == "add" else op[2] - a
            elif op[0] == "reduce":
                a = pick(op[3])
                v = getattr(pypto, op[1])(a, op[2] if a.ndim > 1 else -1, keepdim=True)
                v = pick(op[3]) - v                    # broadcast back against its input
            elif op[0] == "softmax":
                v = pypto.softmax(pick(op[1]), -1)
            else:   # matmul with a square weight on the last dim
                a = pick(op[1])
                v = (a @ w).tanh() if a.ndim >= 2 else a
            vals.append(v)
        return vals[-1], vals[len(vals) // 2]
    return fn


@settings(max_examples=int(__import__("os").environ.get("PYPTO_HYPOTHESIS_EXAMPLES", 20)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 1000))
def test_random_programs_sim_equals_reference(program, seed):
    shape, dtype, ops, hint = program
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=g) * 4 - 2).to(dtype)
    w = (torch.rand((shape[-1], shape[-1]), generator=g) - 0.5).to(dtype) / shape[-1] ** 0.5
    sim_vs_reference(build(ops, hint), x, w, tol=TOL[dtype])
