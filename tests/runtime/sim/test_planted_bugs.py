"""Planted bugs in the compiled examples (examples/pro, examples/tile): every planted overlap of two live
buffers and every planted sync bug (a dropped set or wait, a dropped pair, another event id) is either
reported by the simulator naming the instructions, or — for a sync — proven redundant: all outputs still
equal torch and the race checker saw every conflicting pair of accesses ordered by another chain.
The helpers are in planting.py; the full sweep is slow (--runslow), a fixed subset runs every time."""
import pytest
import torch

from pypto import dtypes
from pypto.errors import SimError
from pypto.ir.block import Block, CoreType, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.isa import MemSpace, Pipe
from pypto.runtime import sim

import planting as P

F32 = dtypes.float32
MTE2, V, MTE3 = Pipe.MTE2, Pipe.V, Pipe.MTE3


# ---------------------------------------------------------------------------------------- buffer identity
def _two_loads_then_add(b_buffer=None):
    """Load x into a and y into b (same bytes, same geometry), then a + b: b overwrote a's value."""
    tiles = {"a": TileDecl("a", MemSpace.UB, F32, (8, 64), addr=0),
             "b": TileDecl("b", MemSpace.UB, F32, (8, 64), addr=0, buffer=b_buffer),
             "c": TileDecl("c", MemSpace.UB, F32, (8, 64), addr=4096)}
    body = [instr("TLOAD", ["a", GMRegion("x", (0, 0))], tiles), instr("TLOAD", ["b", GMRegion("y", (0, 0))], tiles),
            SetFlag(MTE2, V, 0), WaitFlag(MTE2, V, 0), instr("TADD", ["c", "a", "b"], tiles),
            SetFlag(V, MTE3, 0), WaitFlag(V, MTE3, 0), instr("TSTORE", [GMRegion("z", (0, 0)), "c"], tiles)]
    params = [GMParam(n, F32, (8, 64)) for n in "xyz"]
    return Kernel("k", [Block("twoloads", CoreType.AIV, params, [], list(tiles.values()), body)])


def _xyz():
    return {"x": torch.randn(8, 64), "y": torch.randn(8, 64), "z": torch.empty(8, 64)}


def test_a_tile_of_another_buffer_at_the_same_bytes_and_geometry_is_a_clobber():
    with pytest.raises(SimError, match=r"overlapping live buffers: `TADD c, a, b`.* reads tile 'a' "
                                       r"ub\[0x00000, 0x00800\), but `TLOAD b, y\[0, 0\]`.*wrote tile 'b'"):
        sim.run_kernel(_two_loads_then_add(), _xyz())


def test_declarations_of_one_buffer_read_what_each_other_wrote():
    args = _xyz()
    out, _ = sim.run_kernel(_two_loads_then_add(b_buffer="a"), args)      # b is a view of a: a + a
    assert torch.equal(out["z"], args["y"] + args["y"])
