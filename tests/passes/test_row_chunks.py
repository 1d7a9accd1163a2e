"""Row chunks (passes/row_chunks.py): a row-parallel program — the LLaMA MLP — lowered as a loop over
row chunks, so that one chunk's vector ops run on the AIVs while the AICs multiply the next chunks
(issue 14 item 3). Results against torch (fp32 / fp16 / bf16, tiles with tails, a dynamic token count
left unchunked) on sim and cpu, which programs are left as they are, and the simulated time."""
from __future__ import annotations

import shutil

import pytest
import torch

import pypto
import pypto.nn.functional as F
from pypto.ir.execution import Loop
from pypto.passes.pipeline import lower
from pypto.runtime import sim
from .passes_helpers import TOL, assert_match

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6


def mlp(x, norm_w, w_gate, w_up, w_down):
    h = F.rms_norm(x, [x.shape[-1]], norm_w, eps=EPS)
    return x + (F.silu(h @ w_gate) * (h @ w_up)) @ w_down


def mlp_torch(x, norm_w, w_gate, w_up, w_down):
    """The same in torch, rounding to the inputs' dtype where the pypto program stores a value."""
    dt = x.dtype
    xf = x.float()
    h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * norm_w.float()).to(dt)
    g = (h.float() @ w_gate.float()).to(dt)
    u = (h.float() @ w_up.float()).to(dt)
    p = (torch.nn.functional.silu(g.float()).to(dt).float() * u.float()).to(dt)
    return (x.float() + (p.float() @ w_down.float()).to(dt).float()).to(dt)


def inputs(t, d, f, dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, d, generator=g)
    nw = 1 + 0.1 * torch.randn(d, generator=g)
    wg, wu = torch.randn(d, f, generator=g) / d ** 0.5, torch.randn(d, f, generator=g) / d ** 0.5
    wd = torch.randn(f, d, generator=g) / f ** 0.5
    return tuple(a.to(dt) for a in (x, nw, wg, wu, wd))


def lowered(fn, args, **kw):
    return lower(pypto.jit(fn, backend="reference").trace(*args), verify=True, **kw)


def loops(eg):
    return [it for it in eg.program if isinstance(it, Loop)]


def run_sim(eg, args):
    outs, _ = sim.run(eg, dict(zip(eg.inputs, args)), {})
    return outs[eg.outputs[0]]


# ---------------------------------------------------------------- results against torch
@pytest.mark.parametrize("dt", ["fp32", "fp16", "bf16"])
def test_chunked_mlp_matches_torch_on_sim(dt):
    """192 tokens in 3 chunks of 64; d = 80 and f = 200 leave tails in every tile shape; the chunked
    program computes what the unchunked one does, row for row."""
    args = inputs(192, 80, 200, DT[dt])
    eg = lowered(mlp, args, row_chunks=3)
    (lp,) = loops(eg)
    assert lp.stop == 3
    out = run_sim(eg, args)
    rtol, atol = TOL[DT[dt]]
    assert_match(out, mlp_torch(*args), tol=(4 * rtol, 4 * atol))
    whole = run_sim(lowered(mlp, args, row_chunks=False), args)
    assert_match(out, whole)


def linear_pair(x, w1, w2):
    """F.linear (a transposed B) and two outputs, each written chunk by chunk."""
    h = F.silu(F.linear(x, w1))
    return h, x + F.linear(h, w2)


def test_transposed_weights_and_two_outputs_on_sim():
    g = torch.Generator().manual_seed(2)
    x, w1, w2 = torch.randn(96, 40, generator=g), torch.randn(72, 40, generator=g) / 7, torch.randn(40, 72, generator=g) / 9
    eg = lowered(linear_pair, (x, w1, w2), row_chunks=3)
    assert len(loops(eg)) == 1
    outs, _ = sim.run(eg, dict(zip(eg.inputs, (x, w1, w2))), {})
    h = torch.nn.functional.silu(x @ w1.T)
    assert_match([outs[o] for o in eg.outputs], [h, x + h @ w2.T], tol=(1e-5, 1e-5))


@needs_gxx
def test_chunked_mlp_matches_torch_on_cpu():
    args = inputs(128, 48, 72, torch.float16, seed=1)
    eg = lowered(mlp, args, row_chunks=2)
    assert len(loops(eg)) == 1
    from pypto.runtime import cpu
    outs, _ = cpu.run(eg, dict(zip(eg.inputs, args)), {})
    rtol, atol = TOL[torch.float16]
    assert_match(outs[eg.outputs[0]], mlp_torch(*args), tol=(4 * rtol, 4 * atol))


def test_dynamic_token_count_is_left_whole_and_right():
    """A dynamic T has no chunk count known at compile time: the program lowers unchunked (one compile
    for 100 and 37 tokens) and computes the MLP."""
    ann = [pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], pypto.Tensor[[64], pypto.float32],
           pypto.Tensor[[64, 96], pypto.float32], pypto.Tensor[[64, 96], pypto.float32],
           pypto.Tensor[[96, 64], pypto.float32]]
    typed = _annotated(mlp, ann)
    eg = lower(pypto.jit(typed, backend="reference").trace(*inputs(100, 64, 96, torch.float32)), row_chunks=4)
    assert not loops(eg)
    f = pypto.jit(typed, backend="sim")
    for t in (100, 37):
        args = inputs(t, 64, 96, torch.float32, seed=t)
        assert_match(f(*args), mlp_torch(*args), tol=(1e-5, 1e-5))
    assert f.trace_count == 1


def _annotated(fn, ann):
    import types
    typed = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    typed.__annotations__ = dict(zip(names, ann))
    return typed


# ---------------------------------------------------------------- what is left as it is
def col_sum_after_matmul(x, w):
    return (x @ w).sum(0, keepdim=True) + (x @ w)          # a reduction over the rows


def rows_as_weights(x, w):
    return (x @ w).exp() @ x.transpose(0, 1)[:, :64]       # the rows feed a matmul's B


def vector_only(x, w):
    return (x * 2).exp() + w


@pytest.mark.parametrize("fn", [col_sum_after_matmul, rows_as_weights], ids=["reduce-over-rows", "rows-as-B"])
def test_programs_not_by_rows_are_left_whole(fn):
    """Not by rows: even asked for 4 chunks, the program lowers whole, and right."""
    g = torch.Generator().manual_seed(3)
    args = (torch.randn(256, 64, generator=g) / 8, torch.randn(64, 64, generator=g) / 8)
    eg = lowered(fn, args, row_chunks=4)
    assert not loops(eg)
    ref = pypto.jit(fn, backend="reference")(*args)
    assert_match(run_sim(eg, args), ref, tol=(1e-5, 1e-5))


def test_by_choice_small_or_vector_only_programs_stay_whole():
    """256 tokens (the MoE expert's) make one chunk too few tiles to keep 24 AICs busy; a program of
    vector ops only has no cube work to overlap; the same MLP at 4096 tokens is chunked."""
    z = torch.zeros
    assert not loops(lowered(mlp, inputs(256, 2048, 512, torch.float16), machine="a2a3"))
    assert not loops(lowered(vector_only, (z(4096, 2048), z(4096, 2048)), machine="a2a3"))
    assert len(loops(lowered(mlp, inputs(4096, 2048, 512, torch.float16), machine="a2a3"))) == 1


# ---------------------------------------------------------------- simulated time
def test_chunks_overlap_cube_and_vector_work():
    """1024 tokens, 512 -> 2816: the pass chooses 4 chunks of 256 rows, the matmuls keep the whole
    problem's tiles, and the MLP takes less simulated time than lowered whole (a2a3, timing only)."""
    z = torch.zeros
    args = (z(1024, 512, dtype=torch.float16), z(512, dtype=torch.float16), z(512, 2816, dtype=torch.float16),
            z(512, 2816, dtype=torch.float16), z(2816, 512, dtype=torch.float16))
    eg = lowered(mlp, args, machine="a2a3")
    (lp,) = loops(eg)
    assert lp.stop == 4
    assert not any(k.startswith("full") for k in eg.kernels)        # no fill of the output first
    _, chunked = sim.run(eg, dict(zip(eg.inputs, args)), {}, machine="a2a3", timing_only=True)
    whole = lowered(mlp, args, machine="a2a3", row_chunks=False)
    _, one = sim.run(whole, dict(zip(whole.inputs, args)), {}, machine="a2a3", timing_only=True)

    def tiles(report):
        return sorted(tuple(d["tile"].values()) for d in report.decisions.values() if d.get("kind") == "matmul")
    assert tiles(chunked) == tiles(one)
    assert chunked.cycles < 0.95 * one.cycles, (chunked.cycles, one.cycles)


def test_the_report_says_the_program_was_chunked():
    """The chunking is a compiler decision the user can see: a note in the run's report; a program left
    whole has no such note."""
    z = torch.zeros
    args = (z(1024, 512, dtype=torch.float16), z(512, dtype=torch.float16), z(512, 2816, dtype=torch.float16),
            z(512, 2816, dtype=torch.float16), z(2816, 512, dtype=torch.float16))
    eg = lowered(mlp, args, machine="a2a3")
    _, report = sim.run(eg, dict(zip(eg.inputs, args)), {}, machine="a2a3", timing_only=True)
    assert any("loop of 4 chunks of 256 rows" in n for n in report.notes), report.notes
    assert "row chunks" in str(report)
    whole = lowered(mlp, args, machine="a2a3", row_chunks=False)
    _, report = sim.run(whole, dict(zip(whole.inputs, args)), {}, machine="a2a3", timing_only=True)
    assert not any("row chunks" in n for n in report.notes)
