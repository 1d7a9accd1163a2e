"""The a5 on-chip cube <-> vector exchange (passes/on_chip_handoff.py via cross_core.insert_handoff_flags).

IR text in and out: on a5 a handoff whose writer pushes L0C -> UB (or UB -> L1) becomes TPUSH / TPOP with the
same flags as the GM handoff; a2a3 keeps TSTORE / TLOAD; a FIFO that does not fit the reader's buffer above
its memory plan keeps the GM path; a transposing load keeps it too. Then the instructions run: the simulator
against torch (functional) with the on-chip path charged (no GM bytes for the handoff, fewer cycles than the
GM path), the cpu backend running TPUSH / TPOP, and Tensor-level flash attention on a5 against torch's SDPA
(fp16 / bf16 / fp32, query tails; sim, and cpu behind slow)."""
import dataclasses

import pytest
import torch

import pypto
from pypto.ir.block import Instr, walk
from pypto.passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer, insert_handoff_flags

from .ir_text import assert_text, kernel

A5 = pypto.load_machine("a5")
A5_GM = dataclasses.replace(A5, cross_core={**A5.cross_core, "on_chip": False})


def _marked(text):
    k = kernel(text)
    buffers = {}
    for blk in k.blocks:
        for s in walk(blk.body):
            if isinstance(s, Instr) and HANDOFF in s.attrs:
                name, depth, use = s.attrs[HANDOFF]
                buf = buffers.setdefault(name, HandoffBuffer(name, f"workspace {name}", depth))
                s.attrs[HANDOFF] = HandoffAccess(buf, use)
    return k


C2V = """
kernel k

block k_aic  core=AIC  args(ws: gm f32[32, 16])
  tile c : l0c f32[16, 16] @0x0
  for i in range(0, 2, 1):
    TSTORE ws[16*i, 0], c {_handoff=(ws, 2, 0)}

block k_aiv  core=AIV  args(ws: gm f32[32, 16], y: gm f32[32, 16])
  tile x : ub f32[%d, 16] @0x0
  for i in range(0, 2, 1):
    TLOAD  x, ws[16*i, 0] {_handoff=(ws, 2, 0)}
    TSTORE y[16*i, 0], x
"""


def test_a5_pushes_l0c_into_the_vector_ub_with_the_same_flags():
    k = _marked(C2V % 16)
    fifo = insert_handoff_flags(k.blocks, A5)
    assert_text(k, """
    kernel k
    block k_aic  core=AIC  args(ws: gm f32[32, 16])
      tile c : l0c f32[16, 16] @0x00000
      for i in range(0, 2, 1):
        ffts_wait  FIX flag1
        TPUSH      ws[16*i, 0], c   FIX
        ffts_set   FIX flag0
      ffts_wait    FIX flag1
      ffts_wait    FIX flag1
    block k_aiv  core=AIV  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x00000
      ffts_set     MTE2 flag1
      ffts_set     MTE2 flag1
      for i in range(0, 2, 1):
        ffts_wait  MTE2 flag0
        TPOP       x, ws[16*i, 0]   MTE2
        ffts_set   MTE2 flag1
        TSTORE     y[16*i, 0], x    MTE3
    """)
    # two 1 KiB slots above the reader's tile x (UB bytes 0 .. 1023)
    assert fifo == {"workspace ws": {"path": "c2v", "space": "ub", "addr": 1024, "bytes": 2048, "depth": 2}}


def test_a2a3_and_a5_without_the_path_keep_the_gm_handoff():
    for machine in (pypto.load_machine("a2a3"), A5_GM):
        k = _marked(C2V % 16)
        assert insert_handoff_flags(k.blocks, machine) == {}
        ops = [s.op for b in k.blocks for s in walk(b.body) if isinstance(s, Instr)]
        assert ops == ["TSTORE", "TLOAD", "TSTORE"]


def test_a_fifo_past_the_readers_buffer_keeps_the_gm_handoff():
    # beside x (1 KiB at 0) the reader holds a tile of ROWS x 16 f32 at 0x400; the FIFO (two 1 KiB slots)
    # goes above it when the 256 KiB UB has room
    text = (C2V % 16).replace("tile x : ub f32[16, 16] @0x0", "tile x : ub f32[16, 16] @0x0\n  tile big : ub f32[ROWS, 16] @0x400")
    fits = _marked(text.replace("ROWS", "3840"))            # 1024 + 240 KiB: 2 KiB still fit
    assert insert_handoff_flags(fits.blocks, A5)["workspace ws"]["addr"] == 1024 + 3840 * 64
    full = _marked(text.replace("ROWS", "4064"))            # 1024 + 254 KiB: they do not
    assert insert_handoff_flags(full.blocks, A5) == {}
    assert [s.op for s in walk(full.blocks[1].body) if isinstance(s, Instr)][0] == "TLOAD"


V2C = """
kernel k

block k_aic  core=AIC  args(ws: gm f16[16, 16], y: gm f16[16, 16])
  tile b : l1 f16[16, 16] @0x0
  TLOAD b, ws[0, 0] {_handoff=(ws, 1, 0)%s}

block k_aiv  core=AIV  args(x: gm f16[16, 16], ws: gm f16[16, 16])
  tile p : ub f16[16, 16] @0x0
  TLOAD  p, x[0, 0]
  TSTORE ws[0, 0], p {_handoff=(ws, 1, 0)}
"""


def test_a5_pushes_a_vector_tile_into_the_cube_l1():
    k = _marked(V2C % "")
    fifo = insert_handoff_flags(k.blocks, A5)
    assert fifo["workspace ws"] == {"path": "v2c", "space": "l1", "addr": 512, "bytes": 512, "depth": 1}
    ops = {b.core.value: [(s.op, str(s.pipe)) for s in walk(b.body) if isinstance(s, Instr)] for b in k.blocks}
    assert ops == {"AIC": [("TPOP", "MTE2")], "AIV": [("TLOAD", "MTE2"), ("TPUSH", "MTE3")]}


def test_a_transposing_load_keeps_the_gm_handoff():
    k = _marked(V2C % ", trans=True")
    assert insert_handoff_flags(k.blocks, A5) == {}


# ---------------------------------------------------------------- running it

def _handoff_kernel(k_text, machine):
    from pypto.passes.pipe_sync import synchronize
    k = _marked(k_text)
    for b in k.blocks:
        synchronize(b, machine)
    insert_handoff_flags(k.blocks, machine)
    return k


PUSH_MATMUL = """
kernel k

block k_aic  core=AIC  args(a: gm f16[16, 16], b: gm f16[16, 16], ws: gm f32[16, 16])
  tile al1 : l1 f16[16, 16] @0x0
  tile bl1 : l1 f16[16, 16] @0x200
  tile a0 : l0a f16[16, 16] @0x0
  tile b0 : l0b f16[16, 16] @0x0
  tile c : l0c f32[16, 16] @0x0
  TLOAD al1, a[0, 0]
  TLOAD bl1, b[0, 0]
  TMOV a0, al1
  TMOV b0, bl1
  TMATMUL c, a0, b0
  TSTORE ws[0, 0], c {_handoff=(ws, 1, 0)}

block k_aiv  core=AIV  args(ws: gm f32[16, 16], y: gm f32[16, 16])
  tile x : ub f32[16, 16] @0x0
  if Eq(subblock_idx, 0):
    TLOAD x, ws[0, 0] {_handoff=(ws, 1, 0)}
    TSTORE y[0, 0], x
"""


def test_sim_moves_the_pushed_tile_on_chip():
    """cube: c = a @ b (L0C) pushed to the vector core, which stores it: the result is torch's; on a5 the
    handoff costs no GM bytes and fewer cycles than through GM."""
    from pypto.runtime import sim
    text = PUSH_MATMUL
    a, b = torch.randn(16, 16).half(), torch.randn(16, 16).half()
    want = a.float() @ b.float()
    got = {}
    for machine in (A5, A5_GM):
        k = _handoff_kernel(text, machine)
        args = {"a": a, "b": b, "ws": torch.zeros(16, 16), "y": torch.zeros(16, 16)}
        out, report = sim.run_kernel(k, args, machine=machine)
        torch.testing.assert_close(out["y"], want, rtol=1e-3, atol=1e-3)
        got[machine.on_chip_handoff] = report
    assert got[True].cycles < got[False].cycles
    handoff = 2 * 16 * 16 * 4                        # the workspace written by the cube, read by the vector core
    assert got[False].gm_bytes - got[True].gm_bytes == handoff


@pytest.mark.parametrize("dtype,L,causal", [(torch.float16, 200, False), (torch.bfloat16, 136, True),
                                            (torch.float32, 72, False)])
def test_flash_attention_on_a5_goes_on_chip_and_matches_torch(dtype, L, causal):
    from pypto.passes.pipeline import lower
    from pypto.runtime import sim

    import pypto.nn.functional as F

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, L, 64, dtype=dtype) for _ in range(3))
    graph = lower(pypto.jit(attn, backend="reference").trace(q, k, v), machine=A5)
    flash = [kk for kk in graph.kernels.values() if len(kk.blocks) == 2]
    assert flash, "the attention is one cube <-> vector kernel"
    fifos = flash[0].attrs["decisions"]["handoff"]
    assert fifos and all(f["depth"] >= 1 for f in fifos.values())
    ops = {s.op for b in flash[0].blocks for s in walk(b.body) if isinstance(s, Instr)}
    assert {"TPUSH", "TPOP"} <= ops
    outs, _ = sim.run(graph, dict(zip(graph.inputs, (q, k, v))), {}, machine=A5)
    got = outs[0] if isinstance(outs, (list, tuple)) else next(iter(outs.values()))
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 2e-3}[dtype]
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


def test_cpu_runs_tpush_and_tpop():
    from pypto.runtime import cpu
    k = _handoff_kernel(PUSH_MATMUL, A5)
    assert {s.op for b in k.blocks for s in walk(b.body) if isinstance(s, Instr)} >= {"TPUSH", "TPOP"}
    a, b = torch.randn(16, 16).half(), torch.randn(16, 16).half()
    args = {"a": a, "b": b, "ws": torch.zeros(16, 16), "y": torch.zeros(16, 16)}
    out, _ = cpu.run_kernel(k, args, machine=A5)
    torch.testing.assert_close(out["y"], a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_flash_attention_on_a5_runs_on_cpu():
    import pypto.nn.functional as F

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 200, 64, dtype=torch.float16) for _ in range(3))
    got = pypto.jit(attn, backend="cpu", machine="a5")(q, k, v)
    assert any(d.get("handoff") for d in pypto.last_report().decisions.values())     # TPUSH / TPOP ran
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
