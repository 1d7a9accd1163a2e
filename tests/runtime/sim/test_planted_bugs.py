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


# ---------------------------------------------------------------------------------------- cross-core reports
def _matmul_relu_args():
    return {"a": torch.randn(64, 64).half(), "b": torch.randn(64, 64).half(), "ws": torch.empty(64, 64),
            "out": torch.empty(64, 64, dtype=torch.float16)}


def _without(kernel, pred):
    return P.edit(kernel, {(n, i): None for n, i, s in P.sync_statements(kernel) if pred(kernel.blocks[n], s)})


def test_a_cross_core_flag_nobody_waits_for_names_the_set():
    from pypto.ir.block import CrossCoreWaitFlag
    from pypto.testing import kernels as S
    k = S.matmul_relu_kernel(64, 64, 64, 64, 64, 32)     # the cube's last wait for "ws is free" dropped
    bad = P.edit(k, {(0, max(i for n, i, s in P.sync_statements(k) if n == 0 and isinstance(s, CrossCoreWaitFlag))):
                     None})
    with pytest.raises(SimError, match=r"cross-core flag 1 of AIC0 was set and never waited: no cross_core_wait_flag "
                                       r"flag1 of block mm_part consumes the set by\n  `cross_core_set_flag MTE3 "
                                       r"flag1` \(MTE3 pipe, block relu_part at model.py:3\)"):
        sim.run_kernel(bad, _matmul_relu_args())


def test_a_cross_core_flag_one_vector_sub_block_never_sets_names_the_other_set():
    import dataclasses

    import sympy

    from pypto.ir.block import SUBBLOCK_IDX, CrossCoreSetFlag, CrossCoreWaitFlag, If
    from pypto.testing import kernels as S
    k = S.matmul_relu_kernel(64, 64, 64, 64, 64, 32)
    k = _without(k, lambda b, s: isinstance(s, CrossCoreWaitFlag) and b.core == CoreType.AIC)
    (n, i, xset), = [(n, i, s) for n, i, s in P.sync_statements(k) if n == 1 and isinstance(s, CrossCoreSetFlag)]
    bad = P.edit(k, {(1, i): If(sympy.Eq(SUBBLOCK_IDX, 0), [dataclasses.replace(xset)])})
    with pytest.raises(SimError, match=r"cross-core flag 1 towards AIC0: vector sub-block 0 set it at "
                                       r"`cross_core_set_flag MTE3 flag1` \(MTE3 pipe, block relu_part.*"
                                       r"sub-block\(s\) 1 never did"):
        sim.run_kernel(bad, _matmul_relu_args())



def test_the_cross_core_flag_budget_is_the_machines():
    """Flag ids and a flag counter's capacity come from the MachineSpec the simulator runs."""
    import dataclasses

    from pypto.ir.block import CrossCoreWaitFlag
    from pypto.machine import load_machine
    from pypto.testing import kernels as S
    a2a3 = load_machine("a2a3")
    k = S.matmul_relu_kernel(64, 256, 64, 64, 64, 32)     # flags 0 and 1, four tiles handed over
    args = {"a": torch.randn(64, 64).half(), "b": torch.randn(64, 256).half(), "ws": torch.empty(64, 256),
            "out": torch.empty(64, 256, dtype=torch.float16)}
    one_flag = dataclasses.replace(a2a3, cross_core={"flags": 1, "max_pending_sets": 16})
    with pytest.raises(SimError, match=r"cross-core flag 1 is outside 0\.\.0"):
        sim.run_kernel(k, args, machine=one_flag)
    greedy = _without(k, lambda b, s: isinstance(s, CrossCoreWaitFlag) and b.core == CoreType.AIC)
    shallow = dataclasses.replace(a2a3, cross_core={"flags": 16, "max_pending_sets": 2})
    with pytest.raises(SimError, match=r"cross-core flag 1 of AIC0 set more than 2 times without a wait"):
        sim.run_kernel(greedy, args, machine=shallow)
    with pytest.raises(SimError, match=r"cross-core flag 1 of AIC0 was set and never waited"):
        sim.run_kernel(greedy, args, machine=a2a3)      # a2a3's counter holds all four; the end check finds them


# ---------------------------------------------------------------------------------------- the examples
CASES = list(P.CASES)
NEVER_RUN = {"tile/flash_attention": 10}       # was 247: the skewed key loop's dead epilogue iteration (software_pipeline, 88ab654)


def _check(name, result):
    missed = "\n  ".join(f"{label}: {detail}" for label, detail in result["missed"])
    assert not result["missed"], f"{name}: {len(result['missed'])} planted bugs neither reported nor harmless:\n  {missed}"


@pytest.mark.parametrize("name", CASES)
def test_the_launches_run_every_sync_statement(name):
    """Small shapes on few cores, yet every loop body, prologue and epilogue runs: a planted sync bug in a
    statement that never runs would prove nothing."""
    case = P.case(name)
    total = sum(1 for _ in P.sync_statements(case.kernel))
    assert total - len(P.executed_sync(case)) == NEVER_RUN.get(name, 0)


def _subset(case, per_case=2):
    """Fixed representatives: every mutation of the executed sync statements at 1/3 and 2/3 of the program,
    and the first planted overlaps."""
    run = sorted(P.executed_sync(case))
    picked = {run[len(run) * k // (per_case + 1)] for k in range(1, per_case + 1)}
    return list(P.sync_mutants(case, only=picked)) + list(P.overlap_mutants(case, limit=2))


@pytest.mark.parametrize("name", CASES)
def test_planted_bugs_subset(name):
    case = P.case(name)
    result = P.sweep(case, _subset(case))
    _check(name, result)
    assert result["reported"], f"{name}: the subset plants nothing the simulator reports"


# the largest program runs ~1400 sync statements and has ~1100 live-buffer pairs: a fixed sample of both
# keeps its sweep to a few minutes
SLOW_STRIDE = {"tile/flash_attention": 12}
SLOW_OVERLAPS = {"tile/flash_attention": 150}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_planted_bugs_full_sweep(name):
    """Every mutation of every executed sync statement and every planted overlap of two live buffers (a
    sample for the largest program); prints the case's row of the tried / reported / redundant
    / missed table (pytest -s)."""
    case = P.case(name)
    picked = sorted(P.executed_sync(case))[::SLOW_STRIDE.get(name, 1)]
    syncs = P.sweep(case, P.sync_mutants(case, only=set(picked)))
    overlaps = P.sweep(case, P.overlap_mutants(case, limit=SLOW_OVERLAPS.get(name)))
    for kind, result in (("sync", syncs), ("overlap", overlaps)):
        counts = {k: len(v) for k, v in result.items()}
        print(f"\n{name:22s} {kind:8s} tried {sum(counts.values()):5d}  reported {counts['reported']:5d}  "
              f"redundant {counts['redundant']:4d}  missed {counts['missed']:3d}")
        for label, _ in result["redundant"]:
            print(f"    redundant: {label}")
    _check(name, syncs)
    _check(name, overlaps)
    assert not overlaps["redundant"], f"{name}: planted overlaps of live buffers left the answer right and unreported"
