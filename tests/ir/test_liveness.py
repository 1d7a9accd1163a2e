"""Tile liveness (pypto/ir/liveness.py) on a hand-built Block: program positions, ranges stretched over
a loop a tile lives across, the scratch tile of an instruction, and the Block IR verifier's overlap
rule that reads them."""
from __future__ import annotations

import pytest
import sympy

from pypto.dtypes import float32
from pypto.errors import CompileError
from pypto.ir.block import Block, CoreType, For, GMParam, GMRegion, If, Kernel, TileDecl, instr
from pypto.ir.block_verify import verify_kernel
from pypto.ir.isa import MemSpace
from pypto.ir.liveness import live_ranges, positions, touched_tiles
from pypto.machine import get_machine


def _block(addrs=None):
    """a loaded before a loop and read inside it; b, c, r, s live inside one iteration; r stored."""
    addrs = addrs or {}
    names = ("a", "b", "c", "r", "s")
    tiles = {n: TileDecl(n, MemSpace.UB, float32, (8, 64) if n != "r" else (8, 8), addr=addrs.get(n))
             for n in names}
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    body = [instr("TLOAD", ["a", GMRegion("x", (0, 0))], tiles),
            For(i, 0, 4, 1, [instr("TLOAD", ["b", GMRegion("x", (8 * i, 0))], tiles),
                             instr("TADD", ["c", "a", "b"], tiles),
                             instr("TROWSUM", ["r", "c"], tiles, attrs={"tmp": "s"}),
                             If(sympy.Eq(i, 0), [instr("TSTORE", [GMRegion("y", (8 * i, 0)), "r"], tiles)])])]
    params = [GMParam("x", float32, (40, 64)), GMParam("y", float32, (40, 8))]
    return Block("k", CoreType.AIV, params, [], list(tiles.values()), body)


def test_positions_number_instructions_in_program_order():
    order, loops = positions(_block())
    assert [i.op for i in order] == ["TLOAD", "TLOAD", "TADD", "TROWSUM", "TSTORE"]
    assert loops == [(1, 4)]


def test_ranges_stretch_over_a_loop_and_include_the_scratch_tile():
    blk = _block()
    assert touched_tiles(positions(blk)[0][3]) == ["r", "c", "s"]
    assert live_ranges(blk) == {"a": (0, 4), "b": (1, 2), "c": (2, 3), "s": (3, 3), "r": (3, 4)}


def _verify(addrs):
    blk = _block(addrs)
    verify_kernel(Kernel("k", [blk]), get_machine())


def test_verifier_accepts_disjoint_live_tiles_and_reuse_of_dead_bytes():
    # b (dead after TADD) and s (live only at TROWSUM) may share bytes; a and c are live together with them
    _verify({"a": 0, "b": 2048, "c": 4096, "s": 2048, "r": 6144})


@pytest.mark.parametrize("addrs, pair", [
    ({"a": 0, "b": 2048, "c": 4096, "s": 4096, "r": 6144}, "c and s"),      # scratch over the source it reads
    ({"a": 0, "b": 2048, "c": 4096, "s": 0, "r": 6144}, "a and s"),         # scratch over a tile live across the loop
    ({"a": 0, "b": 2048, "c": 4096, "s": 2048, "r": 2048}, "r and s"),      # scratch over the destination
])
def test_verifier_refuses_a_scratch_tile_sharing_bytes_with_a_live_tile(addrs, pair):
    with pytest.raises(CompileError, match=f"tiles {pair} are live together"):
        _verify(addrs)
