"""Planted bugs: each corrupted Block IR program must raise the matching SimError, naming the
instruction, the block and the user's source line."""
import copy

import pytest
import torch

from pypto import dtypes
from pypto.errors import SimError
from pypto.ir.block import (Block, CoreType, CrossCoreSetFlag, GMParam, GMRegion, Kernel, SetFlag, TileDecl,
                            WaitFlag, instr)
from pypto.ir.isa import MemSpace, Pipe
from pypto.runtime import sim
from pypto.testing import kernels as S

F32 = dtypes.float32
V, MTE2, MTE3 = Pipe.V, Pipe.MTE2, Pipe.MTE3


def _vadd(buffers=2):
    return S.vector_add_kernel(64, 64, 16, F32, buffers=buffers)


def _args(rows=64, cols=64):
    return {"x": torch.randn(rows, cols), "y": torch.randn(rows, cols), "z": torch.empty(rows, cols)}


def _run(kernel, args=None, **kw):
    return sim.run_kernel(kernel, _args() if args is None else args, {}, **kw)


def _remove(kernel, pred, count=1):
    """Delete the first ``count`` statements matching pred anywhere in the kernel's blocks."""
    k = copy.deepcopy(kernel)
    removed = 0
    for blk in k.blocks:
        def rec(stmts):
            nonlocal removed
            i = 0
            while i < len(stmts):
                s = stmts[i]
                if removed < count and pred(s):
                    del stmts[i]
                    removed += 1
                    continue
                for attr in ("body", "then_body", "else_body"):
                    if hasattr(s, attr):
                        rec(getattr(s, attr))
                i += 1
        rec(blk.body)
    assert removed == count
    return k


def _is_wait(src, dst, ev=None):
    return lambda s: isinstance(s, WaitFlag) and s.src == src and s.dst == dst and (ev is None or s.event == ev)


def _is_set(src, dst, ev=None):
    return lambda s: isinstance(s, SetFlag) and s.src == src and s.dst == dst and (ev is None or s.event == ev)


def test_the_unmodified_kernel_passes_every_check():
    out, _ = _run(_vadd(), a := _args())
    assert torch.equal(out["z"], a["x"] + a["y"])


def test_dropped_wait_flag_is_a_race_naming_both_instructions():
    bad = _remove(_vadd(), _is_wait(MTE2, V, 0))
    with pytest.raises(SimError, match=r"race: `TADD z0, x0, y0` \(V pipe, block vadd at model.py:20\) reads "
                                       r"tile 'x0'.*`TLOAD x0, .*MTE2 pipe.*model.py:11") as e:
        _run(bad)
    assert e.value.loc.line == 20 and "set_flag(MTE2, V, ev)" in str(e.value)


def test_write_after_read_without_ordering_is_a_race():
    # no V -> MTE2 flags at all: the load of iteration 2 overwrites x0 while TADD of iteration 0 may read it
    bad = _remove(_vadd(), lambda s: isinstance(s, (SetFlag, WaitFlag)) and s.src == V and s.dst == MTE2, count=6)
    with pytest.raises(SimError, match=r"race: `TLOAD x0.*writes tile 'x0'.*`TADD z0, x0, y0`.*read"):
        _run(bad)


def _two_loads_one_event():
    f = F32
    tiles = [TileDecl("a", MemSpace.UB, f, (16, 64), addr=0), TileDecl("b", MemSpace.UB, f, (16, 64), addr=4096),
             TileDecl("c", MemSpace.UB, f, (16, 64), addr=8192)]
    T = {t.name: t for t in tiles}
    body = [instr("TLOAD", ["a", GMRegion("x", (0, 0))], T, loc=S.loc(5)), SetFlag(MTE2, V, 0, loc=S.loc(6)),
            instr("TLOAD", ["b", GMRegion("y", (0, 0))], T, loc=S.loc(7)), SetFlag(MTE2, V, 0, loc=S.loc(8)),
            WaitFlag(MTE2, V, 0), WaitFlag(MTE2, V, 0),
            instr("TADD", ["c", "a", "b"], T, loc=S.loc(9)), SetFlag(V, MTE3, 1), WaitFlag(V, MTE3, 1),
            instr("TSTORE", [GMRegion("z", (0, 0)), "c"], T, loc=S.loc(10))]
    params = [GMParam(n, f, (16, 64)) for n in "xyz"]
    return Kernel("k", [Block("two_loads", CoreType.AIV, params, [], tiles, body)])


def test_event_id_reused_while_live():
    with pytest.raises(SimError, match=r"event reused while live: `set_flag MTE2 -> V ev0` .*model.py:8.*"
                                       r"the set by `set_flag MTE2 -> V ev0` .*model.py:6") as e:
        _run(_two_loads_one_event(), _args(16, 64))
    assert e.value.loc.line == 8


def test_overlapping_live_buffers_corrupt_and_are_reported():
    bad = copy.deepcopy(_vadd())
    tiles = {t.name: t for t in bad.blocks[0].tiles}
    tiles["y0"].addr = tiles["x0"].addr + 1024          # y0 overlaps the second half of x0
    with pytest.raises(SimError, match=r"overlapping live buffers: `TADD z0, x0, y0`.*reads tile 'x0'.*"
                                       r"`TLOAD y0.*wrote tile 'y0'"):
        _run(bad)
    # without the checks the simulator computes what the hardware would: a corrupted sum
    out, _ = _run(bad, a := _args(), check=False)
    assert not torch.equal(out["z"], a["x"] + a["y"])


@pytest.mark.parametrize("addr,msg", [(196608 - 1024, r"over capacity"), (100, r"not aligned to 32 bytes")])
def test_tile_placement(addr, msg):
    bad = copy.deepcopy(_vadd())
    next(t for t in bad.blocks[0].tiles if t.name == "z1").addr = addr
    with pytest.raises(SimError, match=r"tile 'z1'.*" + msg + r"(.|\n)*in `TADD z1, x1, y1` \(V pipe, block vadd"):
        _run(bad)


def test_wait_that_nothing_sets_is_a_deadlock():
    bad = _remove(_vadd(), _is_set(V, MTE2, 0))          # the prologue's set: the first wait never passes
    with pytest.raises(SimError, match=r"deadlock(.|\n)*MTE2 pipe waits at `wait_flag V -> MTE2 ev0`"):
        _run(bad)


def test_unbalanced_set_at_block_end():
    bad = copy.deepcopy(_vadd())
    body = bad.blocks[0].body                            # drop the epilogue wait of buffer 1's output event
    body.remove(next(s for s in reversed(body) if _is_wait(MTE3, V, 1)(s)))
    with pytest.raises(SimError, match=r"unbalanced set_flag: `set_flag MTE3 -> V ev1`"):
        _run(bad)


def test_missing_cross_core_set_deadlocks_the_cluster():
    k = S.matmul_relu_kernel(64, 64, 64, 64, 64, 32)
    bad = _remove(k, lambda s: isinstance(s, CrossCoreSetFlag) and s.pipe == Pipe.FIX)
    args = {"a": torch.randn(64, 64).half(), "b": torch.randn(64, 64).half(), "ws": torch.empty(64, 64),
            "out": torch.empty(64, 64, dtype=torch.float16)}
    with pytest.raises(SimError, match=r"deadlock(.|\n)*AIV0 MTE2 pipe waits at `cross_core_wait_flag MTE2 flag0`"):
        _run(bad, args)


def test_gm_access_outside_the_tensor():
    bad = copy.deepcopy(_two_loads_one_event())
    blk = bad.blocks[0]
    blk.body = [s for s in blk.body if not isinstance(s, (SetFlag, WaitFlag))][:1]
    blk.body[0].operands[1] = GMRegion("x", (8, 0))       # rows 8..24 of a 16-row tensor
    with pytest.raises(SimError, match=r"GM access outside its tensor: `TLOAD a, x\[8, 0\]` \(block two_loads\) reads "
                                     r"x\[8:24, 0:64\] .*but x has shape \[16, 64\]: dim 0: the box ends at 24"):
        _run(bad, _args(16, 64))
    with pytest.raises(SimError, match=r"outside its tensor"):
        _run(bad, {"x": (16, 64), "y": (16, 64), "z": (16, 64)}, timing_only=True)


def test_static_program_errors():
    f = F32
    t = {"a": TileDecl("a", MemSpace.L1, f, (16, 64), addr=0)}
    blk = Block("wrong_core", CoreType.AIV, [GMParam("x", f, (16, 64))], [], list(t.values()),
                [instr("TLOAD", ["a", GMRegion("x", (0, 0))], t, loc=S.loc(3))])
    with pytest.raises(SimError, match=r"tile 'a' is in l1, which a AIV core does not have"):
        _run(Kernel("k", [blk]), {"x": torch.zeros(16, 64)})
    t = {"a": TileDecl("a", MemSpace.UB, f, (16, 64), addr=0, valid=(20, 64))}
    blk = Block("too_valid", CoreType.AIV, [GMParam("x", f, (16, 64))], [], list(t.values()),
                [instr("TLOAD", ["a", GMRegion("x", (0, 0))], t, loc=S.loc(3))])
    with pytest.raises(SimError, match=r"valid shape \(20, 64\) exceeds its shape"):
        _run(Kernel("k", [blk]), {"x": torch.zeros(16, 64)})
    t = {"a": TileDecl("a", MemSpace.UB, f, (16, 64), addr=0)}
    ins = instr("TLOAD", ["a", GMRegion("x", (0, 0))], t, loc=S.loc(3))
    ins.pipe = Pipe.MTE3
    blk = Block("wrong_pipe", CoreType.AIV, [GMParam("x", f, (16, 64))], [], list(t.values()), [ins])
    with pytest.raises(SimError, match=r"runs on the MTE2 pipe, but the instruction is bound to MTE3"):
        _run(Kernel("k", [blk]), {"x": torch.zeros(16, 64)})
    blk = Block("bad_event", CoreType.AIV, [], [], [], [SetFlag(MTE2, V, 9)])
    with pytest.raises(SimError, match=r"event id 9 is outside the 8 ids"):
        _run(Kernel("k", [blk]), {})


def test_gm_handoff_without_cross_core_flag_is_a_race():
    from pypto.ir.block import CrossCoreWaitFlag
    k = S.matmul_relu_kernel(64, 64, 64, 64, 64, 32)
    bad = _remove(k, lambda s: isinstance(s, CrossCoreSetFlag) and s.pipe == Pipe.FIX)
    bad = _remove(bad, lambda s: isinstance(s, CrossCoreWaitFlag) and s.pipe == Pipe.MTE2)
    args = {"a": torch.randn(64, 64).half(), "b": torch.randn(64, 64).half(), "ws": torch.empty(64, 64),
            "out": torch.empty(64, 64, dtype=torch.float16)}
    with pytest.raises(SimError, match=r"race on GM: .*ws\[.*(TSTORE ws|TLOAD w, ws)"):
        _run(bad, args)


def _store_then_reload(ordered: bool):
    from pypto.ir.block import PipeBarrier
    f = F32
    tiles = [TileDecl("a", MemSpace.UB, f, (16, 64), addr=0), TileDecl("b", MemSpace.UB, f, (16, 64), addr=4096)]
    T = {t.name: t for t in tiles}
    sync = [PipeBarrier(Pipe.S)] if ordered else []
    body = [instr("TLOAD", ["a", GMRegion("x", (0, 0))], T, loc=S.loc(5)), SetFlag(MTE2, MTE3, 0),
            WaitFlag(MTE2, MTE3, 0), instr("TSTORE", [GMRegion("ws", (0, 0)), "a"], T, loc=S.loc(6)), *sync,
            instr("TLOAD", ["b", GMRegion("ws", (0, 0))], T, loc=S.loc(7)), SetFlag(MTE2, MTE3, 1),
            WaitFlag(MTE2, MTE3, 1), instr("TSTORE", [GMRegion("z", (0, 0)), "b"], T, loc=S.loc(8))]
    params = [GMParam(n, f, (16, 64)) for n in ("x", "ws", "z")]
    return Kernel("k", [Block("reload", CoreType.AIV, params, [], tiles, body)])


def test_store_then_reload_needs_ordering_and_a_full_barrier_gives_it():
    x = torch.randn(16, 64)
    with pytest.raises(SimError, match=r"race on GM: `TLOAD b, ws\[0, 0\]`.*reads ws\[0:16, 0:64\].*`TSTORE ws"):
        _run(_store_then_reload(False), {"x": x, "ws": torch.empty(16, 64), "z": torch.empty(16, 64)})
    out, _ = _run(_store_then_reload(True), {"x": x, "ws": torch.empty(16, 64), "z": torch.empty(16, 64)})
    assert torch.equal(out["z"], x)
