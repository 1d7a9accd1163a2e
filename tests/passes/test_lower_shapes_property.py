"""Property test: chains of shape ops (permute, transpose, unsqueeze + expand, concat, flatten,
slices) and dtype ops (cast between fp32/fp16/bf16/int32, compare, where) feeding a reduction, scan
or arg-reduction along any dim, run on the sim backend as on the reference interpreter."""
import os

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import pypto
from .passes_helpers import sim_vs_reference

STEPS = ["permute", "transpose", "expand", "concat", "flatten", "slice", "cast", "where", "compare_mul", "exp"]
FINALS = ["sum", "amax", "amin", "mean", "cumsum", "argmax", "argmin", "none", "sum_keep_sub"]
CASTS = {"f16": pypto.float16, "bf16": pypto.bfloat16, "f32": pypto.float32, "i32": pypto.int32}


@st.composite
def shape_programs(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 8, 17, 32, 130])) for _ in range(rank))
    steps = []
    r = rank
    for _ in range(draw(st.integers(1, 4))):
        s = draw(st.sampled_from(STEPS))
        if s == "permute":
            steps.append((s, tuple(draw(st.permutations(list(range(r)))))))
        elif s == "transpose":
            steps.append((s, draw(st.integers(0, r - 1)), draw(st.integers(0, r - 1))))
        elif s == "expand":
            if r >= 4:
                continue
            steps.append((s, draw(st.integers(0, r)), draw(st.sampled_from([1, 3, 8]))))
            r += 1
        elif s == "concat":
            steps.append((s, draw(st.integers(0, r - 1))))
        elif s == "flatten":
            if r < 2:
                continue
            steps.append((s, draw(st.integers(0, r - 2))))
            r -= 1
        elif s == "slice":
            steps.append((s, draw(st.integers(0, r - 1)), draw(st.integers(0, 3))))
        elif s == "cast":
            steps.append((s, draw(st.sampled_from(sorted(CASTS)))))
        else:
            steps.append((s,))
    final = draw(st.sampled_from(FINALS))
    return shape, steps, final, draw(st.integers(0, 3))


def build(steps, final, fdim):
    def fn(x):
        for s in steps:
            op = s[0]
            if op == "permute":
                x = x.permute(*s[1]) if len(s[1]) == x.ndim else x
            elif op == "transpose":
                x = x.transpose(s[1] % x.ndim, s[2] % x.ndim)
            elif op == "expand":
                p = s[1] % (x.ndim + 1)
                y = pypto.unsqueeze(x, p)
                sizes = list(y.shape)
                sizes[p] = s[2]
                x = pypto.expand(y, *sizes)
            elif op == "concat":
                d = s[1] % x.ndim
                x = pypto.concat([x, x * 2], d)
            elif op == "flatten":
                d = s[1] % max(x.ndim - 1, 1)
                x = pypto.flatten(x, d, d + 1) if x.ndim >= 2 else x
            elif op == "slice":
                d = s[1] % x.ndim
                n = x.shape[d]
                lo = min(s[2], n - 1)
                idx = [slice(None)] * x.ndim
                idx[d] = slice(lo, n)
                x = x[tuple(idx)]
            elif op == "cast":
                x = pypto.cast(x * 4 if s[1] == "i32" else x, CASTS[s[1]])
            elif op == "where":
                x = pypto.where(x > 0, x, x * 0.5)
            elif op == "compare_mul":
                x = pypto.cast(x >= 1, x.dtype) * x + x
            else:
                x = pypto.exp(pypto.cast(x, pypto.float32) * 0.25) if x.dtype == pypto.int32 else (x * 0.25).exp()
        d = fdim % x.ndim
        if final == "none":
            return x * 1
        if final in ("sum", "amax", "amin"):
            return getattr(pypto, final)(x, d)
        if final == "mean":
            return pypto.mean(pypto.cast(x, pypto.float32) if x.dtype == pypto.int32 else x, d)
        if final == "cumsum":
            return pypto.cumsum(x, d)
        if final in ("argmax", "argmin"):
            return getattr(pypto, final)(x, d)
        return x - pypto.sum(x, d, keepdim=True)
    return fn


@settings(max_examples=int(os.environ.get("PYPTO_HYPOTHESIS_EXAMPLES", 25)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(shape_programs(), st.integers(0, 1000))
def test_random_shape_chains_sim_equals_reference(program, seed):
    shape, steps, final, fdim = program
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g) * 4 - 2
    fn = build(steps, final, fdim)
    ref = pypto.jit(fn, backend="reference")(x.clone())
    # tolerance of the result's dtype, absolute against the result's magnitude (a long sum is summed in
    # another order: x - sum(x) differs by an ulp of the sum, not of x)
    tol = {torch.float32: (1e-5, 1e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}.get(ref.dtype)
    if tol is not None and ref.numel():
        tol = (tol[0], tol[1] * max(1.0, float(ref.abs().nan_to_num(0, 0, 0).max())))
    sim_vs_reference(fn, x, tol=tol)
