"""Property: random chains of elementwise, reduction, matmul and shape ops on random shapes, run by the
reference interpreter from one traced graph, equal torch eager running the same chain."""
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import pypto
from pypto.ops.registry import REGISTRY

from .op_testing import assert_close, compile_case

UNARY = ["exp", "tanh", "sigmoid", "neg", "abs", "relu", "sin", "silu", "sqrt", "log"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div"]
REDUCE = ["sum", "mean", "amax", "amin"]


def _broadcastable(draw, shape):
    """A shape that broadcasts against ``shape``: some dims set to 1, some leading dims dropped."""
    keep = draw(st.integers(0, len(shape) - 1)) if len(shape) > 1 else 0
    return tuple(1 if draw(st.booleans()) else d for d in shape[keep:])


@st.composite
def programs(draw):
    """-> (dtype, input shapes, steps); a step is a tuple naming an op and its static arguments."""
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    shapes, steps = [shape], []
    for _ in range(draw(st.integers(1, 6))):
        kinds = ["unary", "binary", "scalar", "softmax"]
        if len(shape) >= 2:
            kinds += ["matmul", "transpose"]
        if len(shape) >= 2 or shape[-1] > 1:
            kinds.append("reduce")
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY))))
        elif kind == "scalar":
            steps.append(("scalar", draw(st.sampled_from(["add", "mul", "sub"])), draw(st.sampled_from([0.5, 2.0, -3.0]))))
        elif kind == "binary":
            other = _broadcastable(draw, shape)
            shapes.append(other)
            steps.append(("binary", draw(st.sampled_from(BINARY)), len(shapes) - 1))
        elif kind == "softmax":
            steps.append(("softmax", draw(st.integers(-len(shape), len(shape) - 1))))
        elif kind == "transpose":
            steps.append(("transpose",))
            shape = (*shape[:-2], shape[-1], shape[-2])
        elif kind == "matmul":
            n = draw(st.integers(1, 9))
            shapes.append((shape[-1], n))
            steps.append(("matmul", len(shapes) - 1))
            shape = (*shape[:-1], n)
        else:
            dim = draw(st.integers(-len(shape), len(shape) - 1))
            keepdim = draw(st.booleans()) or len(shape) == 1
            steps.append(("reduce", draw(st.sampled_from(REDUCE)), dim, keepdim))
            shape = tuple(1 if i == dim % len(shape) else d for i, d in enumerate(shape)) if keepdim else \
                tuple(d for i, d in enumerate(shape) if i != dim % len(shape))
    return draw(st.sampled_from([torch.float32, torch.float16])), shapes, steps


def run_program(m, steps, x, *others):
    """The chain, written once for m = pypto (traced) and m = torch (eager)."""
    for step in steps:
        kind = step[0]
        if kind == "unary":
            x = getattr(m, step[1])(x) if step[1] != "silu" else (x * m.sigmoid(x))
        elif kind == "scalar":
            x = getattr(m, step[1])(x, step[2])
        elif kind == "binary":
            x = getattr(m, step[1])(x, others[step[2] - 1])
        elif kind == "softmax":
            x = m.softmax(x, step[1])
        elif kind == "transpose":
            x = x.transpose(-1, -2)
        elif kind == "matmul":
            x = m.matmul(x, others[step[1] - 1])
        else:
            x = getattr(m, step[1])(x, step[2], keepdim=step[3])
    return x


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2 ** 16))
def test_random_chains_match_torch_eager(program, seed):
    dtype, shapes, steps = program
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
    f = compile_case(lambda m, *args: run_program(m, steps, *args),
                     [pypto.Tensor[list(s), pypto.dtypes.from_torch(dtype)] for s in shapes])
    got = f(*xs)
    f.trace(*xs).verify(REGISTRY)
    # fp16 chains: per-op rounding matches torch, but a chain can amplify a 1-ulp difference
    assert_close(got, run_program(torch, steps, *xs), dtype, factor=4.0 if dtype == torch.float16 else 1.0,
                 what=f"{steps} on {shapes}")
