"""The GM bounds rule (pypto.ir.gm_bounds) on the sim and on the cpu backend's checked build: every
box below runs on both, and either both copy exactly what torch slices, or both refuse it with the
same message at the load's source line. The unchecked cpu build keeps the guard against touching
memory outside a tensor."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

from pypto import dtypes
from pypto.errors import SimError, SourceLoc
from pypto.ir.block import Block, CoreType, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.isa import MemSpace, Pipe
from pypto.runtime import cpu, sim
from pypto.symbolic import smin, symbol

F32 = dtypes.float32
M, N, B = symbol("M"), symbol("N"), symbol("B")
R0, C0 = symbol("r0"), symbol("c0")
ROWS, COLS = 8, 64
LOAD_LINE = 40

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the cpu backend needs g++")


def _copy_kernel(name, x_shape, offsets, valid, clipped, tile=(ROWS, COLS), trans=False):
    """y[0:vr, 0:vc] = the box of x at ``offsets`` (valid (vr, vc) of the tile; a transposed load for trans)."""
    t = TileDecl("t", MemSpace.UB, F32, tile, 0, valid)
    tiles = {"t": t}
    attrs = {"trans": True} if trans else None
    body = [instr("TLOAD", ["t", GMRegion("x", offsets, clipped=clipped)], tiles, attrs,
                  SourceLoc("model.py", LOAD_LINE)),
            SetFlag(Pipe.MTE2, Pipe.MTE3, 0), WaitFlag(Pipe.MTE2, Pipe.MTE3, 0),
            instr("TSTORE", [GMRegion("y", (0, 0)), "t"], tiles, loc=SourceLoc("model.py", LOAD_LINE + 1))]
    gm = [GMParam("x", F32, x_shape), GMParam("y", F32, tile)]
    blk = Block("copy", CoreType.AIV, gm, [s for s in (R0, C0) if s in _symbols(offsets, valid)], [t], body)
    return Kernel(name, [blk], loc=SourceLoc("model.py", LOAD_LINE - 1))


def _symbols(*exprs):
    out = set()
    for group in exprs:
        for e in group or ():
            out |= getattr(e, "free_symbols", set())
    return out


# kernels: the clipped tail of Professional mode, the same region unclipped (Tile mode's empty boxes),
# a full tile, a 1-D tensor, a 3-D tensor, a transposed load
CLIPPED = _copy_kernel("clipped", (M, N), (R0, C0), (smin(ROWS, M - R0), smin(COLS, N - C0)), True)
UNCLIPPED = _copy_kernel("unclipped", (M, N), (R0, C0), (smin(ROWS, M - R0), smin(COLS, N - C0)), False)
FULL = _copy_kernel("full", (M, N), (R0, C0), None, False)
ONE_D = _copy_kernel("one_d", (N,), (C0,), (2, COLS), False, tile=(2, COLS))
THREE_D = _copy_kernel("three_d", (B, M, N), (R0, 0, C0), None, False)
TRANS = _copy_kernel("trans", (M, N), (R0, C0), None, False, tile=(COLS, ROWS), trans=True)
KERNELS = [CLIPPED, UNCLIPPED, FULL, ONE_D, THREE_D, TRANS]


def _expected(kernel, x, r0, c0):
    """What y holds after the copy (torch slicing of the box), for the boxes that lie inside."""
    if kernel is TRANS:
        return x[r0:r0 + ROWS, c0:c0 + COLS].t()
    if kernel is THREE_D:
        return x[r0, 0:ROWS, c0:c0 + COLS]
    rows, cols = x.shape
    return x[r0:min(r0 + ROWS, rows), c0:min(c0 + COLS, cols)]


# (kernel, x shape, r0, c0, None when the box is inside, else a regex of the one message both give)
CASES = [
    (CLIPPED, (16, 128), 8, 64, None),                             # a full box
    (CLIPPED, (12, 100), 8, 64, None),                             # a tail in both dims: 4 x 36
    (CLIPPED, (16, 64), 16, 0, r"reads x\[16:16, 0:64\] .*shape \[16, 64\]: dim 0: the box starts at 16, at or "
                                r"past the end of the dim \(size 16\), so the tile's valid extent clipped to the "
                                r"tensor is 0"),
    (CLIPPED, (16, 64), 24, 0, r"dim 0: the box starts at 24, .* clipped to the tensor is -8"),
    (CLIPPED, (16, 64), 0, 64, r"reads x\[0:8, 64:64\] .*dim 1: the box starts at 64"),
    (CLIPPED, (16, 64), -4, 0, r"reads x\[-4:4, 0:64\] .*dim 0: the offset -4 is negative"),
    (UNCLIPPED, (16, 64), 16, 0, None),                            # an empty box at the end, on purpose
    (UNCLIPPED, (16, 64), 24, 0, r"dim 0: the extent -8 is negative"),
    (FULL, (16, 64), 8, 0, None),
    (FULL, (16, 64), 12, 0, r"`TLOAD t, x\[r0, c0\]` \(block copy\) reads x\[12:20, 0:64\] \(offsets \[12, 0\], "
                            r"extent \[8, 64\]\), but x has shape \[16, 64\]: dim 0: the box ends at 20, past the "
                            r"end of the dim \(size 16\)"),
    (FULL, (16, 60), 0, 0, r"dim 1: the box ends at 64, past the end of the dim \(size 60\)"),
    (ONE_D, (256,), 0, 0, r"reads x\[0:64\] .*a 1-D tensor takes a tile with one valid row, the tile has 2"),
    (THREE_D, (2, 8, 64), 1, 0, None),
    (THREE_D, (2, 8, 64), 2, 0, r"reads x\[2:3, 0:8, 0:64\] .*dim 0: the box ends at 3"),
    (TRANS, (16, 64), 8, 0, None),
    (TRANS, (16, 64), 12, 0, r"reads x\[12:20, 0:64\] .*\(offsets \[12, 0\], extent \[8, 64\]\)"),
]


def _args(kernel, shape, seed):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    tile = (COLS, ROWS) if kernel is TRANS else (2, COLS) if kernel is ONE_D else (ROWS, COLS)
    return {"x": x, "y": torch.full(tile, -1.0)}


def _scalars(kernel, r0, c0):
    names = {s.name for s in kernel.blocks[0].scalar_params}
    return {k: v for k, v in (("r0", r0), ("c0", c0)) if k in names}


def _run(backend, kernel, shape, r0, c0, **options):
    """(x, y, None) or (x, None, the error); y starts at -1 so that what the copy wrote shows."""
    args = _args(kernel, shape, seed=len(CASES))
    runner = sim.run_kernel if backend == "sim" else cpu.run_kernel
    try:
        out, _ = runner(kernel, args, _scalars(kernel, r0, c0), **options)
    except SimError as e:
        return args["x"], None, e
    return args["x"], out["y"], None


@pytest.fixture(scope="module")
def checked_build():
    if shutil.which("g++") is None:
        pytest.skip("the cpu backend needs g++")
    cpu.build(KERNELS, checked=True)       # one g++ run for every kernel of the module


def _first_line(e: SimError) -> str:
    return str(e).splitlines()[0]


@pytest.mark.parametrize("kernel,shape,r0,c0,refused", CASES,
                         ids=[f"{k.name}-{'x'.join(map(str, s))}-at-{r},{c}" for k, s, r, c, _ in CASES])
def test_sim_and_checked_cpu_agree(checked_build, kernel, shape, r0, c0, refused):
    x, y_sim, e_sim = _run("sim", kernel, shape, r0, c0)
    _, y_cpu, e_cpu = _run("cpu", kernel, shape, r0, c0, checked=True)
    if refused is None:
        assert e_sim is None and e_cpu is None, (e_sim, e_cpu)
        want = _expected(kernel, x, r0, c0)
        for y in (y_sim, y_cpu):
            got = y[:want.shape[0], :want.shape[1]] if want.dim() == 2 else y
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            assert (y == -1.0).sum() == y.numel() - want.numel()       # nothing outside the box was written
        return
    assert e_sim is not None and e_cpu is not None, "a box outside the tensor ran"
    assert _first_line(e_sim) == _first_line(e_cpu)
    shapes = {name: tuple(t.shape) for name, t in _args(kernel, shape, seed=0).items()}
    with pytest.raises(SimError) as timing_only:            # the sim's fast test, without the arithmetic
        sim.run_kernel(kernel, shapes, _scalars(kernel, r0, c0), timing_only=True)
    assert _first_line(timing_only.value) == _first_line(e_sim)
    assert e_sim.loc.line == e_cpu.loc.line == LOAD_LINE and e_cpu.loc.file == "model.py"
    assert re.search(refused, e_sim.message), e_sim.message
    assert "GM access outside its tensor" in e_cpu.message and e_cpu.hint == e_sim.hint


@needs_gxx
def test_unchecked_cpu_build_keeps_the_memory_guard():
    """Without -DPYPTO_CHECK_GM a box that would touch memory outside the tensor is still refused,
    in the same words (only the clipped-to-empty tail of a too-small tensor is left to the checked build)."""
    args = _args(FULL, (16, 64), seed=0)
    with pytest.raises(SimError, match=r"GM access outside its tensor: `TLOAD t, x\[r0, c0\]` .*ends at 20"):
        cpu.run_kernel(FULL, args, _scalars(FULL, 12, 0), checked=False)
    out, _ = cpu.run_kernel(UNCLIPPED, args, _scalars(UNCLIPPED, 8, 0), checked=False)
    torch.testing.assert_close(out["y"], args["x"][8:16], rtol=0, atol=0)
    # the unchecked build is the one that ran (the two builds are cached apart): a clipped box starting
    # at the end moves nothing there, where the checked build refuses it
    y = torch.full((ROWS, COLS), -1.0)
    cpu.run_kernel(CLIPPED, {"x": args["x"], "y": y}, _scalars(CLIPPED, 16, 0), checked=False)
    assert (y == -1.0).all()
    with pytest.raises(SimError, match="the box starts at 16"):
        cpu.run_kernel(CLIPPED, {"x": args["x"], "y": y}, _scalars(CLIPPED, 16, 0), checked=True)


def test_checked_mode_follows_the_environment(monkeypatch):
    from pypto.runtime.cpu.gm_check import CHECK_FLAGS, build_flags, checked_mode
    monkeypatch.setenv("PYPTO_CPU_CHECK", "0")
    assert not checked_mode(None) and checked_mode(True) and build_flags() is None
    monkeypatch.setenv("PYPTO_CPU_CHECK", "1")
    assert checked_mode(None) and not checked_mode(False)
    assert build_flags()[-len(CHECK_FLAGS):] == CHECK_FLAGS
