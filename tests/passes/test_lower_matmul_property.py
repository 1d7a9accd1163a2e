"""Property test: matmuls with broadcast batch dims, transposed operands (a.transpose(-1, -2) @ b,
x @ w.t(), a_trans/b_trans), fp32/fp16/bf16 inputs with an fp32 or input-dtype result, odd sizes,
operands that are slices of a bigger tensor, and an epilogue (elementwise, reductions, softmax) fused
or not, run on the sim backend as on the reference interpreter."""
import os

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import pypto
from .passes_helpers import sim_vs_reference

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SIZES = [1, 7, 17, 64, 130, 257]
EPILOGUES = ["none", "bias_relu", "sum_last", "amax_rows", "softmax", "scale_cast", "mean_all_rows"]
LAYOUTS = ["plain", "a_view_t", "b_view_t", "a_trans", "b_trans", "both_view_t"]


@st.composite
def matmul_programs(draw):
    m, n = draw(st.sampled_from(SIZES)), draw(st.sampled_from(SIZES))
    k = draw(st.sampled_from(SIZES + [2000]))          # a long K with few output tiles splits K over cores
    a_batch = draw(st.sampled_from([(), (2,), (1,), (3, 1), (2, 3)]))
    b_batch = tuple(draw(st.sampled_from([1, d])) for d in a_batch)
    b_batch = b_batch[draw(st.integers(0, len(b_batch))):]            # fewer leading dims broadcast too
    if draw(st.booleans()):
        a_batch, b_batch = b_batch, a_batch
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    out_f32 = dtype != "f32" and draw(st.booleans())
    layout = draw(st.sampled_from(LAYOUTS))
    slice_a = draw(st.sampled_from([None, (0, 3), (5, 0), (2, 1)]))     # offsets into a bigger tensor
    epi = draw(st.sampled_from(EPILOGUES))
    return m, k, n, a_batch, b_batch, dtype, out_f32, layout, slice_a, epi


def stored_shapes(m, k, n, a_batch, b_batch, layout, slice_a):
    a_t = layout in ("a_view_t", "a_trans", "both_view_t")
    b_t = layout in ("b_view_t", "b_trans", "both_view_t")
    a = a_batch + ((k, m) if a_t else (m, k))
    b = b_batch + ((n, k) if b_t else (k, n))
    if slice_a is not None:
        a = a[:-2] + (a[-2] + slice_a[0], a[-1] + slice_a[1])
    return a, b


def build(m, k, n, a_batch, layout, slice_a, epi, out_dtype):
    def fn(a, b, bias):
        if slice_a is not None:
            r, c = a.shape[-2] - slice_a[0], a.shape[-1] - slice_a[1]
            idx = (slice(None),) * len(a_batch) + (slice(slice_a[0], slice_a[0] + r), slice(slice_a[1], slice_a[1] + c))
            a = a[idx]
        if layout == "a_view_t":
            y = pypto.matmul(a.transpose(-1, -2), b, out_dtype)
        elif layout == "b_view_t":
            y = pypto.matmul(a, b.transpose(-1, -2), out_dtype)
        elif layout == "both_view_t":
            y = pypto.matmul(a.transpose(-1, -2), b.transpose(-1, -2), out_dtype)
        elif layout == "a_trans":
            y = pypto.matmul(a, b, out_dtype, a_trans=True)
        elif layout == "b_trans":
            y = pypto.matmul(a, b, out_dtype, b_trans=True)
        else:
            y = pypto.matmul(a, b, out_dtype)
        if epi == "bias_relu":
            return (y + pypto.cast(bias, y.dtype)).relu()
        if epi == "sum_last":
            return pypto.sum(y, -1)
        if epi == "amax_rows":
            return pypto.amax(y, -2, keepdim=True)
        if epi == "softmax":
            return pypto.softmax(y, -1)
        if epi == "scale_cast":
            return pypto.cast(y * 0.5, pypto.float32)
        if epi == "mean_all_rows":
            return y - pypto.mean(y, -2, keepdim=True)
        return y
    return fn


@settings(max_examples=int(os.environ.get("PYPTO_HYPOTHESIS_EXAMPLES", 15)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(matmul_programs(), st.integers(0, 1000))
def test_random_matmuls_sim_equals_reference(program, seed):
    m, k, n, a_batch, b_batch, dt, out_f32, layout, slice_a, epi = program
    dtype = DTYPES[dt]
    a_shape, b_shape = stored_shapes(m, k, n, a_batch, b_batch, layout, slice_a)
    g = torch.Generator().manual_seed(seed)
    a = ((torch.rand(a_shape, generator=g) * 2 - 1)).to(dtype)
    b = ((torch.rand(b_shape, generator=g) * 2 - 1) / k ** 0.5).to(dtype)
    bias = (torch.rand((n,), generator=g) - 0.5).to(dtype)
    out_dtype = pypto.float32 if out_f32 else None
    mm_dtype = torch.float32 if (out_f32 or dt == "f32") else dtype
    # the cube and the reference sum K in different orders: one rounding of the matmul's result dtype apart
    tol = {torch.float32: (1e-4, 1e-4), torch.float16: (5e-3, 5e-3), torch.bfloat16: (3e-2, 3e-2)}[mm_dtype]
    sim_vs_reference(build(m, k, n, a_batch, layout, slice_a, epi, out_dtype), a, b, bias, tol=tol)
