"""The shared memory pass (pypto/passes/memory.py) on hand-built Blocks: both planning strategies give
every tile an aligned address within capacity with no two live tiles sharing bytes (checked by the Block
IR verifier's independent overlap rule), reductions get a planned scratch tile that codegen declares and
the simulator checks, and user addresses (Professional mode) are checked with errors at the user's line."""
from __future__ import annotations

import pytest
import sympy
import torch

from pypto.dtypes import float32
from pypto.errors import CompileError, MemoryPlanError, SimError, SourceLoc, TilingError
from pypto.ir.block import Block, CoreType, For, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.block_verify import _check_overlaps
from pypto.ir.isa import MemSpace, Pipe
from pypto.machine import get_machine
from pypto.passes.memory import check_addresses, plan_memory

UB = MemSpace.UB
ROWS, COLS = 8, 64


def loc(line):
    return SourceLoc("model.py", line, "k")


def row_sum_block(n_loops=2, cols=COLS, addrs=None):
    """y[i] = rowsum(x[i] * 2) over row tiles, body copied ``n_loops`` times (ping-pong regions)."""
    addrs = addrs or {}
    tiles, body = {}, []
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    for c in range(n_loops):
        for n, shape in ((f"x{c}", (ROWS, cols)), (f"m{c}", (ROWS, cols)), (f"r{c}", (ROWS, 1))):
            tiles[n] = TileDecl(n, UB, float32, shape, addr=addrs.get(n))
        row = (n_loops * i + c) * ROWS
        body += [instr("TLOAD", [f"x{c}", GMRegion("x", (row, 0))], tiles, loc=loc(10 + c)),
                 SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
                 instr("TMULS", [f"m{c}", f"x{c}", 2.0], tiles, loc=loc(20 + c)),
                 instr("TROWSUM", [f"r{c}", f"m{c}"], tiles, loc=loc(30 + c)),
                 SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
                 instr("TSTORE", [GMRegion("y", (row, 0)), f"r{c}"], tiles, loc=loc(40 + c)),
                 SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    params = [GMParam("x", float32, (4 * n_loops * ROWS, cols)), GMParam("y", float32, (4 * n_loops * ROWS, 1))]
    return Block("row_sum", CoreType.AIV, params, [], list(tiles.values()), [For(i, 0, 4, 1, body)], loc=loc(1))


def _scratch(block):
    return {i.attrs["tmp"]: i for i in block.instructions() if "tmp" in i.attrs}


@pytest.mark.parametrize("strategy", ["first_fit", "pools"])
def test_every_tile_planned_and_each_reduction_gets_a_scratch_tile(strategy):
    m = get_machine()
    blk = row_sum_block()
    regions = {t.name: f"inner{t.name[-1]}" for t in blk.tiles} if strategy == "first_fit" else None
    used = plan_memory(blk, m, regions, strategy=strategy)
    scratch = _scratch(blk)
    assert sorted(scratch) == ["tmp0", "tmp1"] and {i.op for i in scratch.values()} == {"TROWSUM"}
    by_name = {t.name: t for t in blk.tiles}
    assert all(by_name[s].shape == (ROWS, COLS) for s in scratch)        # shaped like the reduced source
    others = [t for t in blk.tiles if t.name not in scratch]
    assert all(t.addr % m.alignment == 0 for t in blk.tiles)
    # the scratch sits past every other tile, and the space's use counts it
    assert min(by_name[s].addr for s in scratch) >= max(t.addr + t.nbytes for t in others)
    assert used[UB] == max(t.addr + t.nbytes for t in blk.tiles) <= m.capacity["UB"]
    _check_overlaps(blk)                                                   # independent rule: no live overlap
    assert plan_memory(blk, m, regions, strategy=strategy) == used         # a second run re-plans the same
    assert len(blk.tiles) == len(others) + 2


def test_the_scratch_tile_counts_against_capacity():
    m = get_machine()
    cap = m.capacity["UB"]
    cols = (cap * 6 // 10) // (ROWS * 4) // 8 * 8      # x0 (m0 in place over it) takes 60% of the UB
    x_bytes = ROWS * cols * 4
    assert x_bytes + 32 < cap < 2 * x_bytes + 32        # fits without its scratch, not with it
    with pytest.raises(CompileError, match=f"TROWSUM needs a {x_bytes}-byte scratch tile in ub") as e:
        plan_memory(row_sum_block(n_loops=1, cols=cols), m)
    assert e.value.loc.line == 30                       # the reduction's line
    with pytest.raises(TilingError, match="scratch tile"):
        plan_memory(row_sum_block(n_loops=1, cols=cols), m, strategy="pools")
    plan_memory(row_sum_block(n_loops=1, cols=cols // 2), m)   # half the columns: room for both


def _dead_tile_block(cols):
    """e = a * 2; f = a + e (over a); r = rowsum(f): at the reduction e is dead, and only the vector pipe
    ever touched it; a is a load's."""
    tiles = {n: TileDecl(n, UB, float32, (ROWS, cols) if n != "r" else (ROWS, 1)) for n in "aefr"}
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    body = [instr("TLOAD", ["a", GMRegion("x", (ROWS * i, 0))], tiles, loc=loc(10)),
            instr("TMULS", ["e", "a", 2.0], tiles, loc=loc(11)),
            instr("TADD", ["f", "a", "e"], tiles, loc=loc(12)),
            instr("TROWSUM", ["r", "f"], tiles, loc=loc(13)),
            instr("TSTORE", [GMRegion("y", (ROWS * i, 0)), "r"], tiles, loc=loc(14))]
    params = [GMParam("x", float32, (4 * ROWS, cols)), GMParam("y", float32, (4 * ROWS, 1))]
    return Block("dead", CoreType.AIV, params, [], list(tiles.values()), [For(i, 0, 4, 1, body)], loc=loc(1))


def test_scratch_takes_the_bytes_of_a_dead_vector_tile_when_none_are_free_past_the_others():
    m = get_machine()
    cols = (m.capacity["UB"] * 35 // 100) // (ROWS * 4) // 8 * 8      # a and e: 70% of the UB
    blk = _dead_tile_block(cols)
    plan_memory(blk, m)
    by = {t.name: t for t in blk.tiles}
    assert by["f"].addr == by["a"].addr                                  # in place
    tmp, e = by["tmp0"], by["e"]
    assert max(t.addr + t.nbytes for t in blk.tiles if t is not tmp) + tmp.nbytes > m.capacity["UB"]
    assert e.addr <= tmp.addr < e.addr + e.nbytes                        # on the dead tile's bytes
    _check_overlaps(blk)
    from pypto.passes.pipe_sync import block_resources
    res = block_resources(blk)
    row_sum = next(i for i in blk.instructions() if i.op == "TROWSUM")
    assert ("tile", f"ub@{tmp.addr:#07x}") in res(row_sum)   # pipe sync sees the reduction touch its scratch


def test_no_room_for_the_scratch_past_a_full_pool_plan_replans_with_fewer_buffers():
    """A loop of loads into one pool (up to 4 buffers) fills the UB; loads and stores are not flag-free bytes,
    so the pass plans the tiles again in a UB smaller by the scratch: 3 buffers, the scratch past them."""
    m = get_machine()
    cap = m.capacity["UB"]
    cols = int(cap / 4.5) // (ROWS * 4) // 8 * 8
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    copies = []                                         # x = load; r = rowsum(x); store r: unrolled 4 times
    for c in range(4):
        copies += [TileDecl(f"x{c}", UB, float32, (ROWS, cols)), TileDecl(f"r{c}", UB, float32, (ROWS, 1))]
    names = {t.name: t for t in copies}
    unrolled = []
    for c in range(4):
        row = (4 * i + c) * ROWS
        unrolled += [instr("TLOAD", [f"x{c}", GMRegion("x", (row, 0))], names, loc=loc(10)),
                     instr("TROWSUM", [f"r{c}", f"x{c}"], names, loc=loc(11)),
                     instr("TSTORE", [GMRegion("y", (row, 0)), f"r{c}"], names, loc=loc(12))]
    params = [GMParam("x", float32, (16 * ROWS, cols)), GMParam("y", float32, (16 * ROWS, 1))]
    blk = Block("pool", CoreType.AIV, params, [], copies, [For(i, 0, 4, 1, unrolled)], loc=loc(1))
    plan_memory(blk, m, strategy="pools")
    by = {t.name: t for t in blk.tiles}
    x_addrs = {by[f"x{c}"].addr for c in range(4)}
    assert len(x_addrs) == 3                            # one buffer fewer than the pool would take
    scratch = [by[n] for n in _scratch(blk)]
    assert len(scratch) == 4 and all(t.addr >= max(x_addrs) + by["x0"].nbytes for t in scratch)
    assert max(t.addr + t.nbytes for t in blk.tiles) <= cap
    _check_overlaps(blk)


def test_codegen_declares_the_planned_scratch_tile_at_its_address():
    from pypto.codegen.abi import kernel_abi
    from pypto.codegen.kernel import BlockEmitter
    m = get_machine()
    blk = row_sum_block(n_loops=1)
    plan_memory(blk, m)
    text = "\n".join(BlockEmitter(blk, kernel_abi(Kernel("row_sum", [blk])), m).emit())
    tmp = next(t for t in blk.tiles if t.name == "tmp0")
    assert f"TASSIGN(tmp0, 0x{tmp.addr:05x});" in text
    assert "TROWSUM(r0, m0, tmp0);" in text
    assert "placed after the planned UB tiles" not in text and "left to the toolchain" not in text


def test_the_simulator_checks_the_scratch_tile_capacity():
    from pypto.runtime import sim
    m = get_machine()
    blk = row_sum_block(n_loops=1)
    plan_memory(blk, m)
    x = torch.randn(4 * ROWS, COLS)
    y = torch.zeros(4 * ROWS, 1)
    sim.run_kernel(Kernel("row_sum", [blk]), {"x": x, "y": y}, block_dim=1)
    torch.testing.assert_close(y, (x * 2).sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    next(t for t in blk.tiles if t.name == "tmp0").addr = m.capacity["UB"] - 64   # moved past the UB's end
    with pytest.raises(SimError, match="tmp0.*over capacity"):
        sim.run_kernel(Kernel("row_sum", [blk]), {"x": x, "y": y}, block_dim=1)


def _user_block(addrs):
    return row_sum_block(n_loops=1, addrs=addrs)


def test_user_addresses_checked_and_scratch_placed_past_them():
    m = get_machine()
    blk = _user_block({"x0": 0, "m0": 0x800, "r0": 0x1000})
    used = check_addresses(blk, m)
    tmp = next(t for t in blk.tiles if t.name == "tmp0")
    assert tmp.addr == 0x1000 + 32 * 1 and used[UB] == tmp.addr + tmp.nbytes   # r0 is 8x1 f32: 32 bytes
    assert [t.addr for t in blk.tiles if t.name != "tmp0"] == [0, 0x800, 0x1000]  # the user's, unchanged


def _add_block(a_addr, b_addr):
    """a = x[0]; b = x[1]; a = a + b; y = a."""
    tiles = {n: TileDecl(n, UB, float32, (ROWS, COLS), addr=addr) for n, addr in (("a", a_addr), ("b", b_addr))}
    body = [instr("TLOAD", ["a", GMRegion("x", (0, 0))], tiles, loc=loc(10)),
            instr("TLOAD", ["b", GMRegion("x", (ROWS, 0))], tiles, loc=loc(11)),
            instr("TADD", ["a", "a", "b"], tiles, loc=loc(12)),
            instr("TSTORE", [GMRegion("y", (0, 0)), "a"], tiles, loc=loc(13))]
    params = [GMParam("x", float32, (2 * ROWS, COLS)), GMParam("y", float32, (ROWS, COLS))]
    return Block("add", CoreType.AIV, params, [], list(tiles.values()), body, loc=loc(1))


def test_user_tiles_live_together_on_shared_bytes_are_refused_at_the_later_declaration():
    m = get_machine()
    decl = {"a": loc(3), "b": loc(4)}
    with pytest.raises(MemoryPlanError, match="tile 'b' .* overlaps tile 'a' .* TLOAD at line 11 writes 'b'") as e:
        check_addresses(_add_block(0, 0x400), m, tile_loc=decl)      # b loaded while a is still to be read
    assert e.value.loc.line == 4
    check_addresses(_add_block(0, 0x400), m, tile_loc=decl, groups={"a": 1, "b": 1})   # one group: deliberate
    check_addresses(_add_block(0, 0x800), m, tile_loc=decl)          # disjoint bytes
    # a dead tile's bytes may be reused: x0 is read for the last time by the TMULS that writes m0 there
    check_addresses(_user_block({"x0": 0, "m0": 0, "r0": 0x1000}), m)


@pytest.mark.parametrize("addrs, what", [({"x0": 0, "m0": 0x810, "r0": 0x1000}, "aligned"),
                                         ({"x0": 0, "m0": 0x800, "r0": 1 << 30}, "capacity")])
def test_user_address_misaligned_or_past_capacity(addrs, what):
    with pytest.raises(MemoryPlanError, match=what):
        check_addresses(_user_block(addrs), get_machine())


def test_user_scratch_on_free_bytes_or_left_out_when_there_are_none():
    m = get_machine()
    blk = _user_block({"x0": 0, "m0": 0x800, "r0": m.capacity["UB"] - 32})   # nothing free past r0
    check_addresses(blk, m)
    # bytes no tile uses, before x0's (dead at the reduction, but a load's: the vector pipe alone is flag-free)
    assert next(t for t in blk.tiles if t.name == "tmp0").addr == 0x1000
    _check_overlaps(blk)
    cols = (m.capacity["UB"] * 6 // 10) // (ROWS * 4) // 8 * 8               # m0 (over x0) takes 60% of the UB
    blk = row_sum_block(n_loops=1, cols=cols, addrs={"x0": 0, "m0": 0, "r0": ROWS * cols * 4})
    check_addresses(blk, m)
    assert [t.name for t in blk.tiles] == ["x0", "m0", "r0"] and not _scratch(blk)
