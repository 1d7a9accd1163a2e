"""Loop workspaces under a trip count read at run time (passes/multibuffer.py): a loop over groups whose
inner loop runs ceil(counts[g] / B) chunks, counts read by the control program (the MoE block's grouped
matmul). The workspaces get a number of copies fixed by sizes only (buffers are allocated before the
control program runs), each iteration a copy by its loop indices, so independent groups' tasks overlap;
groups of several chunks (iterations sharing a copy), empty groups and tails keep their results
(against torch on sim and cpu)."""
import shutil

import pytest
import torch

import pypto
import pypto.nn.functional as F
from pypto.passes.pipeline import lower
from pypto.runtime import sim
from .passes_helpers import assert_match

G, D, B = 6, 64, 32                      # groups, width, rows per chunk
COUNTS = (40, 0, 96, 7, 33, 32)          # tails, an empty group, one of three chunks, one of exactly one
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
DTYPES = {"fp32": (pypto.float32, torch.float32), "bf16": (pypto.bfloat16, torch.bfloat16)}


def grouped(x, counts, offsets, w1, w2, out):
    """out[rows of group g] = silu(x_g @ w1_g^T) @ w2_g^T: two matmuls meeting in GM workspaces."""
    for g in pypto.loop(G):
        n = counts[g].item()
        start = offsets[g].item()
        a = pypto.view(w1, [D, D], [g * D, 0])
        b = pypto.view(w2, [D, D], [g * D, 0])
        for i in pypto.loop(pypto.ceildiv(n, B)):
            xb = pypto.view(x, [B, D], [start + i * B, 0], valid_shape=[pypto.min(B, n - i * B), D])
            pypto.assemble(F.linear(F.silu(F.linear(xb, a)), b), [start + i * B, 0], out)


def typed(pdt):
    DYN = pypto.DYNAMIC

    def fn(x: pypto.Tensor[[DYN, D], pdt], counts: pypto.Tensor[[G], pypto.int32],
           offsets: pypto.Tensor[[G], pypto.int32], w1: pypto.Tensor[[G * D, D], pdt],
           w2: pypto.Tensor[[G * D, D], pdt], out: pypto.Tensor[[DYN, D], pdt]):
        grouped(x, counts, offsets, w1, w2, out)
    return fn


def inputs(tdt, counts=COUNTS, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.tensor(counts, dtype=torch.int32)
    offsets = (torch.cumsum(c, 0) - c).to(torch.int32)
    n = int(c.sum())
    x = torch.randn(n, D, generator=g).to(tdt)
    w1 = (torch.randn(G * D, D, generator=g) / 8).to(tdt)
    w2 = (torch.randn(G * D, D, generator=g) / 8).to(tdt)
    return x, c, offsets, w1, w2, torch.full((n, D), float("nan"), dtype=tdt)


def expected(x, counts, offsets, w1, w2):
    y = torch.empty(x.shape, dtype=torch.float32)
    for g in range(G):
        s, n = int(offsets[g]), int(counts[g])
        a, b = w1[g * D:(g + 1) * D].float(), w2[g * D:(g + 1) * D].float()
        y[s:s + n] = torch.nn.functional.silu(x[s:s + n].float() @ a.T) @ b.T
    return y


def copies(graph):
    return {b.name: b.shape[0] for b in graph.buffers.values() if b.name.endswith("_copies")}


def test_workspaces_of_a_run_time_trip_count_get_copies_sized_by_sizes():
    graph = lower(pypto.jit(typed(pypto.float32), backend="reference").trace(*inputs(torch.float32)))
    k = copies(graph)
    assert len(k) == 2 and all(isinstance(n, int) and n > 1 for n in k.values()), k
    for b in graph.buffers.values():
        if b.view_of in k:                        # the copy a task uses: by loop indices, no data scalar
            assert not {s.name for s in b.view_offset.free_symbols} & set(graph.scalar_reads)


@pytest.mark.parametrize("backend, dt", [("sim", "fp32"), ("sim", "bf16"),
                                         pytest.param("cpu", "fp32", marks=needs_gxx)])
def test_results_match_torch(backend, dt):
    pdt, tdt = DTYPES[dt]
    f = pypto.jit(typed(pdt), backend=backend)
    tol = (1e-5, 1e-5) if dt == "fp32" else (2e-2, 2e-2)
    for counts in (COUNTS, (0, 0, 70, 0, 1, 0)):
        args = inputs(tdt, counts, seed=len(counts) + counts[2])
        out = args[-1]
        f(*args)
        ref = expected(*args[:5])
        assert not out.isnan().any()
        assert_match(out.float(), ref, tol=tol)
    assert f.trace_count == 1


def test_independent_groups_overlap():
    """With copies the groups' tasks run at the same time: fewer simulated cycles than one copy each
    (where group g + 1's first matmul waits for group g's readers of the workspace)."""
    args = inputs(torch.float32)
    cycles = {}
    for mb in (True, False):
        graph = lower(pypto.jit(typed(pypto.float32), backend="reference").trace(*args), multibuffer=mb)
        _, report = sim.run(graph, dict(zip(graph.inputs, args)), {}, timing_only=True)
        cycles[mb] = report.cycles
    assert cycles[True] < 0.85 * cycles[False], cycles
