"""The simulator's fast paths keep its answers: loads and stores through numpy views move the exact bits
(NaN payloads, -0.0, subnormals, every dtype); operand views kept per valid shape follow a tile's tail;
a GM race is still found among many ordered accesses of the same rows (the per-list clock summary only
skips lists that hold no conflict); the progress bar counts task instances."""
import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import SimError
from pypto.ir.block import Block, CoreType, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.isa import MemSpace, Pipe
from pypto.runtime import sim
from pypto.runtime.sim import scheduler
from pypto.testing import kernels as S

F32, F16, BF16 = dtypes.float32, dtypes.float16, dtypes.bfloat16


def _odd_bits(rows, cols, dtype):
    """Random bit patterns of the dtype's width: NaNs with payloads, infinities, -0.0, subnormals."""
    g = torch.Generator().manual_seed(7)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    lo, hi = (0, 256) if width == torch.uint8 else (-(1 << (8 * dtype.itemsize - 1)), 1 << (8 * dtype.itemsize - 1))
    return torch.randint(lo, hi, (rows, cols), generator=g, dtype=torch.int64).to(width).view(dtype.torch_dtype)


@pytest.mark.parametrize("dtype", [F32, F16, BF16, dtypes.int32, dtypes.int8])
def test_loads_and_stores_move_the_exact_bits(dtype):
    rows = 37                                     # a tail tile: 37 = 2 x 16 + 5
    k = S.copy_kernel(rows, 64, 16, dtype)
    x = _odd_bits(rows, 64, dtype)
    out, _ = sim.run_kernel(k, {"x": x, "y": torch.empty(rows, 64, dtype=dtype.torch_dtype)}, {}, block_dim=2)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    assert torch.equal(out["y"].view(width), x.view(width))


def test_operand_views_follow_each_tail():
    """One compiled block, several run-time sizes: the kept views of each valid shape are that shape's."""
    R = sympy.Symbol("R", integer=True, positive=True)
    k = S.vector_add_kernel(R, 32, 8, F32)
    g = torch.Generator().manual_seed(3)
    for rows in (13, 40, 5, 13):
        x, y = torch.randn(rows, 32, generator=g), torch.randn(rows, 32, generator=g)
        out, _ = sim.run_kernel(k, {"x": x, "y": y, "z": torch.empty(rows, 32)}, {}, block_dim=2)
        assert torch.equal(out["z"], x + y)


def _many_stores_then_unordered_load(n_ordered: int) -> Kernel:
    """Rows 0..n-1 of ws: each stored by MTE3 and loaded back by MTE2, flag pairs both ways (no race); then
    row n stored and loaded with no flag between them (a race). Every access lands in one bucket of rows."""
    tiles = [TileDecl("t", MemSpace.UB, F32, (1, 64), addr=0), TileDecl("u", MemSpace.UB, F32, (1, 64), addr=256)]
    T = {t.name: t for t in tiles}
    body = [instr("TLOAD", ["t", GMRegion("x", (0, 0))], T, loc=S.loc(5)), SetFlag(Pipe.MTE2, Pipe.MTE3, 1),
            WaitFlag(Pipe.MTE2, Pipe.MTE3, 1)]
    for r in range(n_ordered + 1):
        body.append(instr("TSTORE", [GMRegion("ws", (r, 0)), "t"], T, loc=S.loc(10 + r)))
        if r < n_ordered:
            body += [SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0),
                     instr("TLOAD", ["u", GMRegion("ws", (r, 0))], T, loc=S.loc(100 + r)),
                     SetFlag(Pipe.MTE2, Pipe.MTE3, 1), WaitFlag(Pipe.MTE2, Pipe.MTE3, 1)]
    body.append(instr("TLOAD", ["u", GMRegion("ws", (n_ordered, 0))], T, loc=S.loc(200)))
    params = [GMParam("x", F32, (1, 64)), GMParam("ws", F32, (n_ordered + 1, 64))]
    return Kernel("k", [Block("many", CoreType.AIV, params, [], tiles, body)])


def test_a_gm_race_is_found_among_many_ordered_accesses():
    args = {"x": torch.randn(1, 64), "ws": torch.zeros(9, 64)}
    with pytest.raises(SimError, match=r"race on GM: `TLOAD u, ws\[8, 0\]`.*reads ws\[8:9, 0:64\].*`TSTORE ws\[8, 0\]"):
        sim.run_kernel(_many_stores_then_unordered_load(8), args, {})
    ordered = _many_stores_then_unordered_load(8)
    ordered.blocks[0].body.insert(-1, SetFlag(Pipe.MTE3, Pipe.MTE2, 0))
    ordered.blocks[0].body.insert(-1, WaitFlag(Pipe.MTE3, Pipe.MTE2, 0))
    out, _ = sim.run_kernel(ordered, args, {})
    assert torch.equal(out["ws"], args["x"].expand(9, 64))


def test_the_progress_bar_counts_task_instances(monkeypatch):
    seen = []

    class Bar:
        def __init__(self, total):
            self.total, self.done = total, 0

        def update(self, n):
            self.done += n

    from contextlib import contextmanager

    @contextmanager
    def fake_progress(total=None, desc="", unit="it"):
        bar = Bar(total)
        seen.append(bar)
        yield bar
    monkeypatch.setattr(scheduler, "progress", fake_progress)
    k = S.vector_add_kernel(64, 32, 8, F32)
    x = torch.randn(64, 32)
    sim.run_kernel(k, {"x": x, "y": x, "z": torch.empty(64, 32)}, {}, block_dim=4)
    assert [(b.total, b.done) for b in seen] == [(1, 1)]
