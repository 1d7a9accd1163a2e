"""Block IR as text: the printer's text parses back to the same kernel (pypto.ir.block_parser), for the
kernels of the examples, the hand-built kernels and Tensor-level programs; hand-written text (pipes
left to the ISA, comments); bad text raises BlockTextError at its line and column."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import runpy
import sys
from pathlib import Path

import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import SourceLoc
from pypto.ir.block import (BLOCK_IDX, BLOCK_NUM, Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMParam,
                            GMRegion, If, Instr, Kernel, PipeBarrier, SetFlag, TileDecl, WaitFlag, instr)
from pypto.ir.block_parser import BlockTextError, parse_block, parse_kernel
from pypto.ir.block_printer import print_block, print_kernel
from pypto.ir.isa import MemSpace, Pipe
from pypto.testing import instructions
from pypto.testing import kernels as hand_built

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.passes.passes_helpers import lowered  # noqa: E402
from tests.passes.test_lower_ops import CASES as TENSOR_PROGRAMS  # noqa: E402


def as_printed(x):
    """``x`` with every source location cut to what the text keeps (file base name, line, column)."""
    if isinstance(x, SourceLoc):
        return SourceLoc(os.path.basename(x.file), x.line, "", x.col)
    if isinstance(x, list):
        return [as_printed(y) for y in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: as_printed(getattr(x, f.name)) for f in dataclasses.fields(x)})
    return x


def assert_round_trip(kernel: Kernel):
    text = print_kernel(kernel)
    again = parse_kernel(text, file=f"{kernel.name}.pto")
    assert print_kernel(again) == text
    for mine, theirs in zip(again.blocks, as_printed(kernel).blocks):   # field by field: a readable failure
        for f in dataclasses.fields(Block):
            assert getattr(mine, f.name) == getattr(theirs, f.name), (kernel.name, mine.name, f.name)
    assert again == as_printed(kernel)


# ------------------------------------------------------------------------------------------ round trips
def _hand_built_kernels():
    n = sympy.Symbol("n", integer=True, positive=True)
    yield hand_built.single_op_kernel("TADDS", [dtypes.float32], dtypes.float32, (16, 64), scalar=0.5)
    yield hand_built.single_op_kernel("TCMPS", [dtypes.float32], dtypes.bool_, (16, 64), scalar=-1.25,
                                      attrs={"cmp": "ge"}, valid=(n, 64))
    yield hand_built.vector_add_kernel(n, 256, 16)
    yield hand_built.softmax_kernel(100, 128, 16)
    yield hand_built.rms_norm_kernel(n, 128, 16)
    yield hand_built.swiglu_kernel(64, 128, 16)
    yield hand_built.matmul_kernel(256, 256, 128)
    yield hand_built.matmul_relu_kernel(128, 128, 64)
    for dt in (dtypes.float16, dtypes.float32):
        yield hand_built.vector_add(dt)
        yield hand_built.softmax_rows(dt)
        yield hand_built.rms_norm(dt)
        yield hand_built.matmul(dt)
        yield hand_built.matmul_relu(dt)
        yield instructions.vector_kernel(dt)[0]
    yield hand_built.scale_rows()


@pytest.mark.parametrize("kernel", list(_hand_built_kernels()), ids=lambda k: k.name)
def test_hand_built_kernels_round_trip(kernel):
    assert_round_trip(kernel)


def test_tensor_level_programs_round_trip():
    count = 0
    for name, (fn, args) in TENSOR_PROGRAMS.items():
        for kernel in lowered(fn, *args).kernels.values():
            assert_round_trip(kernel)
            count += 1
    assert count >= len(TENSOR_PROGRAMS)


@contextlib.contextmanager
def kernels_built(monkeypatch):
    """Every Kernel constructed inside the block (every stage of every compilation)."""
    built = []
    init = Kernel.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)
    monkeypatch.setattr(Kernel, "__init__", recording_init)
    try:
        yield built
    finally:
        monkeypatch.setattr(Kernel, "__init__", init)


def _run_capturing_kernels(scripts, monkeypatch) -> list[Kernel]:
    """Run example scripts as ``python script``; the Kernels built while they run."""
    with kernels_built(monkeypatch) as built:
        for script in scripts:
            monkeypatch.setattr(sys, "argv", [script])
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                runpy.run_path(str(ROOT / script), run_name="__main__")
    return built


QUICK_EXAMPLES = ["examples/pro/softmax.py", "examples/pro/matmul.py", "examples/pro/flash_attention.py",
                  "examples/tile/layer_norm.py", "examples/tile/matmul_gelu.py"]
ALL_EXAMPLES = ["examples/demo.py"] + sorted(str(p.relative_to(ROOT)) for d in ("examples/pro", "examples/tile")
                                             for p in (ROOT / d).glob("*.py"))


def test_example_kernels_round_trip(monkeypatch):
    kernels = _run_capturing_kernels(QUICK_EXAMPLES, monkeypatch)
    assert {k.name for k in kernels} >= {"softmax_kernel", "matmul_kernel", "layer_norm", "matmul_bias_gelu"}
    assert any(k.block(CoreType.AIC) and k.block(CoreType.AIV) for k in kernels)     # cross-core kernels too
    for k in kernels:
        assert_round_trip(k)


@pytest.mark.slow
def test_every_example_kernel_round_trips(monkeypatch):
    kernels = _run_capturing_kernels(ALL_EXAMPLES, monkeypatch)
    assert len({k.name for k in kernels}) >= len(ALL_EXAMPLES)
    for k in kernels:
        assert_round_trip(k)


@pytest.mark.slow
def test_gdn_kernels_round_trip(monkeypatch):
    """The Gated DeltaNet kernels (models/qwen3_next), Professional mode and Tensor level, at a small size."""
    from models.qwen3_next.functional import chunk_gated_delta_rule
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 64, 1, 128, generator=g) for _ in range(2))
    v = torch.randn(1, 64, 2, 128, generator=g)
    decay, beta = -torch.rand(1, 64, 2, generator=g), torch.rand(1, 64, 2, generator=g)
    with kernels_built(monkeypatch) as built:
        for impl in ("pro", "tensor"):
            chunk_gated_delta_rule(q, k, v, decay, beta, use_qk_l2norm_in_kernel=True, backend="sim", impl=impl)
    assert any(k.name.startswith("gdn_chunk_pro") for k in built) and len(built) > 10
    for kernel in built:
        assert_round_trip(kernel)


def test_every_construct_round_trips():
    """Each field the printer writes and the parser reads, in one kernel: layouts, addresses, valid shapes,
    buffers, clipped regions, attrs (internal '_' ones included), loop attrs, symbol kinds, locations."""
    n = sympy.Symbol("n")
    rows = sympy.Symbol("rows", integer=True, positive=True)
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    j = sympy.Symbol("j", integer=True)                 # a loop variable of a non-default kind
    odd = sympy.Symbol("odd", integer=True, odd=True)   # a kind outside the table
    here = SourceLoc("/somewhere/model.py", 7, "f", 3)
    # kept unevaluated by the compiler: a Min of a Min, a comparison that evaluating would rewrite
    nested_min = sympy.Min(16, sympy.Min(32, rows - 16 * i), evaluate=False)
    some_left = sympy.Gt(sympy.ceiling(rows / 16), 0, evaluate=False)     # evaluated: True
    tiles = [TileDecl("a", MemSpace.UB, dtypes.float16, (16, 64), 0x100, (nested_min, 64)),
             TileDecl("a2", MemSpace.UB, dtypes.float16, (8, 64), 0x100, None, "ND", "a"),
             TileDecl("l", MemSpace.L1, dtypes.float16, (64, 64), None, None, "NZ"),
             TileDecl("acc", MemSpace.L0C, dtypes.float32, (64, 64), 0, None, "DN")]
    T = {t.name: t for t in tiles}
    body = [SetFlag(Pipe.V, Pipe.MTE2, 0, here),
            For(i, 0, sympy.ceiling(rows / 16), 1, [
                WaitFlag(Pipe.V, Pipe.MTE2, 0),
                instr("TLOAD", ["a", GMRegion("x", (16 * i, 0), clipped=True)], T, {"_xc": (0, 1, "w", "all")}, here),
                If(some_left, [PipeBarrier(Pipe.V, here)],
                   [instr("TMULS", ["a", "a", n * odd + sympy.sqrt(n) / 2], T,
                          {"note": "two words", "k": [1, 2.5, None]}),
                    If(sympy.And(i < 2, n > 1),
                       [instr("TADDS", ["a", "a", sympy.Piecewise((i, i < 3), (rows, True))], T)])],
                   here),
                For(j, i, i + 2, 1, [instr("TADDS", ["a2", "a2", -1e-06], T, {"tmp": "a"})], {"unroll": 2}),
                SetFlag(Pipe.V, Pipe.MTE2, 0)], {"pipeline": 2}, here),
            WaitFlag(Pipe.V, Pipe.MTE2, 0),
            instr("TSTORE", [GMRegion("y", (0, n)), "a"], T),
            CrossCoreSetFlag(Pipe.MTE3, 3, here), CrossCoreWaitFlag(Pipe.V, 4)]
    gm = [GMParam("x", dtypes.float16, (rows, 64)), GMParam("y", dtypes.float16, (rows * 2, n))]
    blk = Block("every", CoreType.AIV, gm, [n], tiles, body, here)
    kernel = Kernel("every", [blk], here)
    assert_round_trip(kernel)
    text = print_kernel(kernel)
    assert "symbols  j: int, odd: {integer=True, odd=True}, rows: int>0" in text
    assert "_xc=(0, 1, w, all)" in text and "note='two words'" in text and "x[16*i, 0] clipped" in text
    assert "tile a2    : ub f16[8, 64] @0x00100  buffer a" in text and "l1 f16[64, 64] NZ" in text
    assert "valid [Min(16, Min(32, -16*i + rows)), 64]" in text and "if ceiling(rows/16) > 0:" in text


# ------------------------------------------------------------------------------------------ hand-written text
HAND_WRITTEN = """
# a kernel written by hand: pipes left to the ISA, comments anywhere
kernel scale                                    # scale.py:1

block scale_aiv  core=AIV  args(x: gm f32[n, 128], y: gm f32[n, 128])  params(s)
  tile t : ub f32[16, 128] @0x0  valid [Min(16, n - 16*i), 128]
  for i in range(block_idx, ceiling(n/16), block_num):   # scale.py:4
    TLOAD  t, x[16*i, 0]                                  # scale.py:5:9
    set_flag MTE2 -> V  ev0
    wait_flag MTE2 -> V  ev0
    TMULS  t, t, 2*s
    set_flag V -> MTE3  ev1
    wait_flag V -> MTE3  ev1
    TSTORE y[16*i, 0], t
"""


def test_hand_written_text():
    k = parse_kernel(HAND_WRITTEN)
    assert (k.name, k.loc) == ("scale", SourceLoc("scale.py", 1, "", None))
    (blk,) = k.blocks
    n, s = sympy.Symbol("n"), sympy.Symbol("s")
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    assert blk.gm_params == [GMParam("x", dtypes.float32, (n, 128)), GMParam("y", dtypes.float32, (n, 128))]
    assert blk.scalar_params == [s]
    assert blk.tiles == [TileDecl("t", MemSpace.UB, dtypes.float32, (16, 128), 0, (sympy.Min(16, n - 16 * i), 128))]
    (loop,) = blk.body
    assert (loop.var, loop.start, loop.stop, loop.step) == (i, BLOCK_IDX, sympy.ceiling(n / 16), BLOCK_NUM)
    assert loop.loc == SourceLoc("scale.py", 4, "", None)
    load, set_, wait, mul = loop.body[:4]
    assert load == Instr("TLOAD", ["t", GMRegion("x", (16 * i, 0))], Pipe.MTE2, {}, SourceLoc("scale.py", 5, "", 9))
    assert (set_, wait) == (SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0))
    assert mul == Instr("TMULS", ["t", "t", 2 * s], Pipe.V)
    assert [x.pipe for x in loop.body if isinstance(x, Instr)] == [Pipe.MTE2, Pipe.V, Pipe.MTE3]
    assert parse_kernel(print_kernel(k)) == k


def test_parse_block_and_literals():
    blk = parse_block("block b  core=AIV  args()\n"
                      "  tile t : ub f32[8, 8]\n"
                      "  TADDS t, t, 3 {flag=True, mode=rint, n=-2, f=0.25, s='a b', tup=(1,), lst=[]}\n"
                      "  TADDS t, t, 1e-06\n")
    add, add2 = blk.body
    assert add.operands[2] == 3 and isinstance(add.operands[2], int)
    assert add.attrs == {"flag": True, "mode": "rint", "n": -2, "f": 0.25, "s": "a b", "tup": (1,), "lst": []}
    assert add2.operands[2] == 1e-06 and isinstance(add2.operands[2], float)
    assert parse_block(print_block(blk)) == blk


# ------------------------------------------------------------------------------------------ bad text
HEAD = "block b  core=AIV  args(x: gm f32[n, 64])\n  tile t : ub f32[8, 64]\n"
BAD = [
    ("", "expected 'block NAME", 1, 1),
    ("block b  core=XYZ  args()\n", "unknown core 'XYZ'", 1, 15),
    ("block b  core=AIV  args(x: gm f99[4])\n", "unknown dtype 'f99'", 1, 31),
    ("block b  core=AIV  args(x f32)\n", "expected 'NAME: gm DTYPE[SHAPE]'", 1, 25),
    ("block b  core=AIV  args(x: gm f32[4]\n", "'args(' is not closed", 1, 24),
    (HEAD + "  TFOO t, t\n", "unknown instruction 'TFOO'", 3, 3),
    (HEAD + "  TADD t, t\n", "TADD takes 3 operands", 3, 8),
    (HEAD + "  TADD t, t, u\n", "unknown tile 'u'", 3, 14),
    (HEAD + "  TLOAD t, z[0, 0]\n", "unknown GM param 'z'", 3, 12),
    (HEAD + "  TLOAD t, x[0]\n", "has 2 dims, the region gives 1 offsets", 3, 12),
    (HEAD + "  TADDS t, t, 2*k\n", "unknown name 'k'", 3, 17),
    (HEAD + "  TADDS t, t, 2*\n", "bad expression '2*'", 3, 15),
    (HEAD + "  TADDS t, t, foo(n)\n", "unknown function 'foo'", 3, 15),
    (HEAD + "  TADDS t, t, (n, 1)\n", "expected a scalar, got the tuple", 3, 15),
    (HEAD + "  TADDS t, t, 1 {mode=}\n", "expected a value", 3, 23),
    (HEAD + "  TADDS t, t, 1 {mode=1} Q\n", "unknown pipe 'Q'", 3, 26),
    (HEAD + "  set_flag MTE2 -> Q  ev0\n", "unknown pipe 'Q'", 3, 20),
    (HEAD + "  set_flag MTE2 -> V  e0\n", "expected evN, got 'e0'", 3, 23),
    (HEAD + "  ffts_set V flag\n", "expected flagN", 3, 14),
    (HEAD + "  TADDS t, t, 1\n    TADDS t, t, 1\n", "unexpected indentation", 4, 5),
    (HEAD + "  for i in range(0, 4, 1):\n  TADDS t, t, 1\n", "expected an indented body", 3, 27),
    (HEAD + "  for i in range(0, 4):\n    TADDS t, t, 1\n", "expected range(START, STOP, STEP)", 3, 18),
    (HEAD + "  else:\n", "'else' without 'if'", 3, 3),
    (HEAD + "  if n > 0\n    TADDS t, t, 1\n", "expected ':' at the end of 'if'", 3, 11),
    (HEAD + "  TLOAD t, t\n", "expected a GM region", 3, 12),
    (HEAD + "  TMOV t, t\n\tTMOV t, t\n", "tabs are not allowed", 4, 1),
    ("block b  core=AIV  args()\n  symbols  k: float\n", "unknown symbol kind 'float'", 2, 15),
    ("block b  core=AIV  args()\n  tile t : gm f32[8, 8]\n", "unknown on-chip memory space 'gm'", 2, 12),
    ("block b  core=AIV  args()\n  tile t : ub f32[8]\n", "a tile's shape is [ROWS, COLS]", 2, 19),
    ("block b  core=AIV  args()\n  tile t : ub f32[8, 8]\n  tile t : ub f32[8, 8]\n", "declared twice", 3, 8),
    ("kernel k\n", "a kernel needs at least one block", 1, 9),
    ("block b  core=AIV  args()\nblock c  core=AIV  args()\n", "text after the block", 2, 1),
]


@pytest.mark.parametrize("text, message, line, col", BAD, ids=[m for _, m, _, _ in BAD])
def test_bad_text_names_line_and_column(text, message, line, col):
    parse = parse_kernel if text.startswith("kernel") else parse_block
    with pytest.raises(BlockTextError) as e:
        parse(text, file="bad.pto")
    assert message in e.value.message
    assert (e.value.loc.file, e.value.loc.line, e.value.loc.col) == ("bad.pto", line, col), e.value.message
    assert str(e.value).startswith(f"bad.pto:{line}:{col}: ")
