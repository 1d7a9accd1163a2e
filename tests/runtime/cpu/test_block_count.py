"""Which kernels the cpu backend may run on fewer cores than their task asks for (block_count.py),
and that doing so leaves results unchanged while kernels that depend on the core count keep it."""
from __future__ import annotations

import pytest
import torch

from pypto import dtypes
from pypto.ir.block import (BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, GMRegion, Kernel, SetFlag,
                            WaitFlag)
from pypto.ir.isa import Pipe
from pypto.runtime import cpu
from pypto.runtime.cpu.block_count import block_count_free, cores_to_run
from pypto.symbolic import index_symbol

import cpu_kernels as ck

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


def test_grid_stride_kernels_are_block_count_free():
    assert block_count_free(ck.softmax_rows(F32))
    assert block_count_free(ck.rms_norm(BF16))        # prologue load of w, read in the loop
    assert block_count_free(running_sum(carried=False))
    assert cores_to_run(ck.softmax_rows(F32), 48, threads=2) == 8
    assert cores_to_run(ck.softmax_rows(F32), 6, threads=2) == 6


@pytest.mark.parametrize("kernel", [
    ck.vector_add(F32),                 # contiguous runs per core: block_num inside the loop bounds
    ck.matmul(F32),                     # tile offsets computed from block_idx
    ck.matmul_relu(F32),                # cube + vector cluster
    running_sum(carried=True),          # a tile carried from one iteration to the next
    running_sum(carried=False, param_out="x"),   # loads and stores the same GM tensor
], ids=["contiguous-runs", "block-offsets", "cluster", "carried-tile", "gm-read-write"])
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

    from pypto.runtime.cpu import block_count
    plans_before, free_before = len(cpu._PLANS), len(block_count._FREE)
    for _ in range(3):
        kernel = running_sum(carried=False)
        x = torch.randn(16, 64)
        cpu.run_kernel(kernel, {"x": x, "y": torch.empty_like(x)}, block_dim=48, threads=2)
        del kernel
    gc.collect()
    assert len(cpu._PLANS) <= plans_before + 1 and len(block_count._FREE) <= free_before + 1
