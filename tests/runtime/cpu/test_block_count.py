"""Which kernels the cpu backend may run on fewer cores than their task asks for (the analysis
pypto/ir/block_count.py, the backend's choice pypto/runtime/cpu/core_count.py), and that doing so leaves
results unchanged while kernels that depend on the core count keep it."""
from __future__ import annotations

import pytest
import sympy
import torch

from pypto import dtypes
from pypto.ir.block import (BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, GMRegion, If, Kernel, SetFlag,
                            WaitFlag)
from pypto.ir.isa import Pipe
from pypto.runtime import cpu
from pypto.ir.block_count import block_count_free
from pypto.runtime.cpu.core_count import cores_to_run
from pypto.symbolic import index_symbol, smin

from pypto.testing import kernels as ck

F32, UB, M = ck.F32, ck.UB, ck.M
BF16 = dtypes.bfloat16


def running_sum(rows=8, cols=64, carried=True, param_out="y") -> Kernel:
    """y[r] = acc += x[r] over each core's grid-stride row tiles: the sum carries from one of a
    core's iterations to the next, so it depends on which tiles a core takes (``carried=False``:
    acc is reset every iteration). M is a multiple of ``rows``."""
    b = ck.Builder()
    r = index_symbol("r")
    b.tile("acc", UB, F32, (rows, cols))
    b.tile("xt", UB, F32, (rows, cols))
    head = [b("TEXPANDS", "acc", 0.0)]
    body = [b("TLOAD", "xt", GMRegion("x", (r, 0))), SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0)]
    if not carried:
        body.append(b("TEXPANDS", "acc", 0.0))
    body += [b("TADD", "acc", "acc", "xt"), SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
             b("TSTORE", GMRegion(param_out, (r, 0)), "acc"),
             SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    gm = [GMParam("x", F32, (M, cols))] + ([GMParam("y", F32, (M, cols))] if param_out == "y" else [])
    blk = Block("running_sum", CoreType.AIV, gm, [], list(b.tiles.values()),
                head + [For(r, BLOCK_IDX * rows, M, BLOCK_NUM * rows, body)])
    return Kernel(f"running_sum_{int(carried)}_{param_out}", [blk])


def pipelined_scale(rows=8, cols=64, cross_stage=False, cond_and=False) -> Kernel:
    """y = 2 * x in grid-stride row tiles, two tiles per iteration (t and t + block_num * rows,
    the form a pipeline=2 loop takes). ``cross_stage``: the second tile adds the first one's
    result, which ties the output to the core count."""
    b = ck.Builder()
    t = index_symbol("t")
    second = t + BLOCK_NUM * rows
    for k, row in enumerate((t, second)):
        b.tile(f"x{k}", UB, F32, (rows, cols), (smin(rows, M - row), cols))

    def stage(k, row):
        out = [b("TLOAD", f"x{k}", GMRegion("x", (row, 0))), SetFlag(Pipe.MTE2, Pipe.V, k),
               WaitFlag(Pipe.MTE2, Pipe.V, k), b("TMULS", f"x{k}", f"x{k}", 2.0)]
        if cross_stage and k == 1:
            out.append(b("TADD", "x1", "x1", "x0"))
        return out + [SetFlag(Pipe.V, Pipe.MTE3, k), WaitFlag(Pipe.V, Pipe.MTE3, k),
                      b("TSTORE", GMRegion("y", (row, 0)), f"x{k}"),
                      SetFlag(Pipe.MTE3, Pipe.MTE2, k), WaitFlag(Pipe.MTE3, Pipe.MTE2, k)]
    cond = sympy.Lt(second, M)
    if cond_and:        # a compound condition (an And of relations), as masked kernels have
        cond = sympy.And(cond, sympy.Lt(second, M + rows))
    body = stage(0, t) + [If(cond, stage(1, second))]
    gm = [GMParam("x", F32, (M, cols)), GMParam("y", F32, (M, cols))]
    loop = For(t, BLOCK_IDX * rows, M, 2 * BLOCK_NUM * rows, body, {"pipeline": 2})
    blk = Block("pipelined_scale", CoreType.AIV, gm, [], list(b.tiles.values()), [loop])
    return Kernel(f"pipelined_scale_{int(cross_stage)}{'_and' * cond_and}", [blk])


def test_grid_stride_kernels_are_block_count_free():
    assert block_count_free(ck.softmax_rows(F32))
    assert block_count_free(ck.rms_norm(BF16))        # prologue load of w, read in the loop
    assert block_count_free(running_sum(carried=False))
    assert block_count_free(pipelined_scale())
    assert block_count_free(pipelined_scale(cond_and=True))     # was AttributeError: 'And' ... 'expand'
    assert not block_count_free(pipelined_scale(cross_stage=True, cond_and=True))
    assert cores_to_run(ck.softmax_rows(F32), 48, threads=2) == 4
    assert cores_to_run(ck.softmax_rows(F32), 3, threads=2) == 3


@pytest.mark.parametrize("kernel", [
    ck.vector_add(F32),                 # contiguous runs per core: block_num inside the loop bounds
    ck.matmul(F32),                     # tile offsets computed from block_idx
    ck.matmul_relu(F32),                # cube + vector cluster
    running_sum(carried=True),          # a tile carried from one iteration to the next
    running_sum(carried=False, param_out="x"),   # loads and stores the same GM tensor
    pipelined_scale(cross_stage=True),  # the second tile of an iteration reads the first's
], ids=["contiguous-runs", "block-offsets", "cluster", "carried-tile", "gm-read-write", "cross-stage"])
def test_kernels_that_depend_on_the_core_count_keep_it(kernel):
    assert not block_count_free(kernel)
    assert cores_to_run(kernel, 48, threads=2) == 48


def _per_core_running_sum(x, rows, block_dim):
    y = torch.empty_like(x)
    for core in range(block_dim):
        acc = torch.zeros(rows, x.shape[1])
        for r in range(core * rows, x.shape[0], block_dim * rows):
            acc = acc + x[r:r + rows]
            y[r:r + rows] = acc
    return y


def test_fewer_cores_change_no_result():
    torch.manual_seed(0)
    x = torch.randn(8 * 48 + 5, 256)                  # a tail tile
    y = torch.empty_like(x)
    cpu.run_kernel(ck.softmax_rows(F32), {"x": x, "y": y}, block_dim=48, threads=2)
    assert torch.equal(y, _one_core_softmax(x))


def test_pipelined_kernels_on_fewer_cores():
    torch.manual_seed(2)
    x = torch.randn(8 * 61 + 3, 64)
    y = torch.full_like(x, float("nan"))
    cpu.run_kernel(pipelined_scale(), {"x": x, "y": y}, block_dim=48, threads=2)
    assert torch.equal(y, x * 2)
    y = torch.full_like(x, float("nan"))
    cpu.run_kernel(pipelined_scale(cond_and=True), {"x": x, "y": y}, block_dim=48, threads=2)
    assert torch.equal(y, x * 2)
    y = torch.full_like(x, float("nan"))
    cpu.run_kernel(pipelined_scale(cross_stage=True), {"x": x, "y": y}, block_dim=48, threads=2)
    want = x * 2
    for t in range(0, x.shape[0], 8 * 96):            # rows t + 8 * 48 add the tile 48 row tiles earlier
        lo = t + 8 * 48
        hi = min(lo + 8, x.shape[0])
        if lo < x.shape[0]:
            want[lo:hi] += x[t:t + hi - lo] * 2
    for core in range(1, 48):
        for t in range(core * 8, x.shape[0], 8 * 96):
            lo, hi = t + 8 * 48, min(t + 8 * 49, x.shape[0])
            if lo < x.shape[0]:
                want[lo:hi] += x[t:t + hi - lo] * 2
    torch.testing.assert_close(y, want)


def _one_core_softmax(x):
    y = torch.empty_like(x)
    cpu.run_kernel(ck.softmax_rows(F32), {"x": x, "y": y}, block_dim=1, threads=1)
    return y


def test_a_carried_kernel_runs_on_every_core():
    torch.manual_seed(1)
    x = torch.randn(8 * 50, 64)
    y = torch.empty_like(x)
    cpu.run_kernel(running_sum(carried=True), {"x": x, "y": y}, block_dim=48, threads=2)
    torch.testing.assert_close(y, _per_core_running_sum(x, 8, 48))


def test_plans_and_verdicts_go_with_their_graphs():
    import gc

    from pypto.runtime.cpu import core_count
    plans_before, free_before = len(cpu._PLANS), len(core_count._FREE)
    for _ in range(3):
        kernel = running_sum(carried=False)
        x = torch.randn(16, 64)
        cpu.run_kernel(kernel, {"x": x, "y": torch.empty_like(x)}, block_dim=48, threads=2)
        del kernel
    gc.collect()
    assert len(cpu._PLANS) <= plans_before + 1 and len(core_count._FREE) <= free_before + 1
