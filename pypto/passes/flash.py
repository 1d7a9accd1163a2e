"""Attention as one cube <-> vector cluster kernel (flash form): TensorGraph match -> TileGraph item -> Block IR.

``match_attention(g, plan)`` finds, in a fusion plan, the attention shape

    m1 = matmul(q, k, b_trans)                      (or q @ transpose(k))
    w  = [cast] [mul / div by a finite positive scalar] [where(causal-like mask, ., -inf)] of m1
    p  = exp(w - amax(w)) / sum(exp(w - amax(w)))   (the decomposed softmax over the last dim)
    o  = matmul([cast] p, v)

(``F.scaled_dot_product_attention`` and a hand-written ``softmax(q @ k.T * s) @ v`` both give it), where every
intermediate value is read only inside the pattern. The mask, when there is one, must be the single constraint
``j <= i + d`` (d >= 0, static_masks.py's analysis: causal, tril): every row then keeps key 0, so the online
softmax never sees a row without a key.

``flash_program`` turns a match into one TileGraph item (a TileProgram of kind "flash": no tile ops, its
figures in ``attrs``) and ``lower_flash`` lowers that to one Kernel with an AIC block and an AIV block (the AIV
block runs on every vector sub-block of the cluster, ``HALF`` query rows of each row group):

  cube, per (head, task of G row groups of MQ query rows: ``row_groups``; each K_j and V_j block is loaded once
  for all groups, every group has its own workspace rings), the key blocks j in a loop skewed by PRELOAD:
      S_j = Q K_j^T  -> workspace ring ws_s (slot j % SLOTS)
      PV_j = P_j V_j -> workspace ring ws_pv                   (P_j read from ring ws_p)
    the cube computes S_{j+PRELOAD} before PV_j, so neither side waits for the other's round trip;
  vector, per the same tasks: online softmax of S_j (running max m, running sum l, the rescale factor
      alpha_j = exp(m_old - m_new) kept in a ring until PV_j arrives), P_j -> ws_p, and
      acc = acc * alpha_j + PV_j; at the end O = acc / l.

Rows longer than the UB are what the key-block loop is for (only one [HALF, BK] block is on chip).
Compile-time masks: the key loop of a task stops at the last block any of its rows keeps (fully masked
blocks are never computed) and the mask is applied only to blocks some element of which is masked (under an
``if`` on the block index; the others skip it). The handoffs are GM workspace slots marked
``attrs[cross_core.HANDOFF]``; ``passes/cross_core.insert_handoff_flags`` adds the flags (pipeline.py).
Loops are unrolled by SLOTS so that every slot and every ping-pong buffer is a static tile; memory regions
keep the copies that must overlap on different bytes (first-fit inside a region).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import sympy

from .. import dtypes
from ..errors import CompileError
from ..ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, For, GMParam, GMRegion, If, Kernel,
                        TileDecl, instr)
from ..ir.isa import MemSpace
from ..ir.tile_graph import TileParam, TileProgram
from .cross_core import HANDOFF, HandoffAccess, HandoffBuffer
from . import static_masks

PRELOAD = 2          # key blocks the cube runs ahead of P V
SLOTS = 4            # slots of each workspace ring (> PRELOAD: the vector side lags); the loops unroll by it
NEG = -1.0e30        # added to masked scores (finite: no inf - inf)
MIN_QUERIES = 64     # static query lengths below this keep the separate cube and vector kernels


@dataclass
class FlashMatch:
    m1: int                 # the QK^T matmul
    m2: int                 # the P V matmul
    q: int
    k: int                  # keys as [..., S, E] (b_trans form)
    v: int
    scale: float
    diag: int | None        # keep key j for query i when j <= i + diag; None: no mask
    nodes: set = field(default_factory=set)     # every node the kernel computes (the pattern and its mask inputs)


def _single_user(g, n, user) -> bool:
    return g.users(n) == [user] and n not in g.output_nodes()


def _scalar(g, n):
    node = g.node(n)
    return node["attrs"].get("value") if node["op"] == "scalar" else None


def _last_dim_reduce(g, n, op, src) -> bool:
    node = g.node(n)
    rank = len(g.info(src).shape)
    dims = tuple(d % rank for d in node["attrs"].get("dims", ()))
    return node["op"] == op and node["inputs"] == [src] and dims == (rank - 1,) and node["attrs"].get("keepdim")


def _mask_inputs(g, cond, inside: set) -> set | None:
    """The nodes computing a mask condition when nothing outside the pattern reads them (else None)."""
    out, stack = set(), [cond]
    while stack:
        n = stack.pop()
        if n in out:
            continue
        if g.op(n) == "input":
            return None
        out.add(n)
        stack.extend(g.node(n)["inputs"])
    return out if all(all(u in out or u in inside for u in g.users(n)) for n in out) else None


def match_attention(g, m2):
    """(FlashMatch, None) when matmul ``m2`` ends the attention shape, else (None, why not); the reasons found
    after the softmax is recognised start with "attention: " (the report shows them)."""
    node2 = g.node(m2)
    if g.op(m2) != "matmul" or node2["attrs"].get("a_trans") or node2["attrs"].get("b_trans"):
        return None, "the second matmul is not P @ V"
    p, v = node2["inputs"]
    nodes = {m2}
    x = p
    if g.op(x) == "cast":
        if not _single_user(g, x, m2):
            return None, "P is read elsewhere"
        nodes.add(x)
        prev, x = x, g.node(x)["inputs"][0]
    else:
        prev = m2
    # div(e, sum(e)), e = exp(sub(w, amax(w)))
    if g.op(x) != "div" or not _single_user(g, x, prev):
        return None, "P is not a softmax"
    e, s = g.node(x)["inputs"]
    nodes.add(x)
    if not _last_dim_reduce(g, s, "sum", e) or g.op(e) != "exp" or sorted(g.users(e)) != sorted([s, x]) \
            or g.users(s) != [x] or e in g.output_nodes() or s in g.output_nodes():
        return None, "P is not a softmax over the last dim"
    nodes |= {e, s}
    sub = g.node(e)["inputs"][0]
    if g.op(sub) != "sub" or not _single_user(g, sub, e):
        return None, "P is not a softmax"
    w, mx = g.node(sub)["inputs"]
    if not _last_dim_reduce(g, mx, "amax", w) or g.users(mx) != [sub] or sorted(g.users(w)) != sorted([mx, sub]) \
            or w in g.output_nodes():
        return None, "P is not a softmax over the last dim"
    nodes |= {sub, mx}
    # w back to the QK^T matmul: casts, positive scales, one where(mask, ., -inf)
    scale, diag, masked = 1.0, None, False
    y, user = w, None
    while g.op(y) != "matmul":
        if user is not None and not _single_user(g, y, user):
            return None, "attention: the scores are read elsewhere"
        op, ins = g.op(y), g.node(y)["inputs"]
        nodes.add(y)
        if op == "cast":
            user, y = y, ins[0]
        elif op in ("mul", "div") and len(ins) == 2 and _scalar(g, ins[1]) is not None:
            c = _scalar(g, ins[1])
            if not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0:
                return None, "attention: the scores are scaled by a value that is not a finite positive constant"
            scale = scale * c if op == "mul" else scale / c
            user, y = y, ins[0]
        elif op == "where" and not masked:
            wm = static_masks._where_mask(g, y)
            if wm is None or wm[1] != float("-inf"):
                return None, "attention: the mask is not known at compile time (or does not fill with -inf)"
            mask = wm[0]
            if len(mask.constraints) != 1 or (mask.constraints[0].a, mask.constraints[0].b) != (1, -1) \
                    or mask.constraints[0].c < 0:
                return None, "attention: the mask is not causal-like (j <= i + d, d >= 0)"
            diag, masked = mask.constraints[0].c, True
            cond = ins[0]
            kept = ins[1] if _scalar(g, ins[2]) is not None else ins[2]
            more = _mask_inputs(g, cond, nodes | {y})
            if more is None:
                return None, "attention: the mask's values are read elsewhere"
            nodes |= more
            nodes |= {n for n in ins if g.op(n) == "scalar" and all(u in nodes for u in g.users(n))}
            user, y = y, kept
        else:
            return None, f"attention: '{op}' between the two matmuls"
    m1 = y
    if user is not None and not _single_user(g, m1, user):
        return None, "attention: the scores are read elsewhere"
    nodes.add(m1)
    for n in list(nodes):
        for i in g.node(n)["inputs"]:
            if g.op(i) == "scalar" and all(u in nodes for u in g.users(i)):
                nodes.add(i)
    a1 = g.node(m1)["attrs"]
    q, k = g.node(m1)["inputs"]
    if a1.get("a_trans"):
        return None, "attention: the first matmul transposes q"
    if not a1.get("b_trans"):
        if g.op(k) == "transpose" and sorted(g.node(k)["attrs"][d] % len(g.info(k).shape)
                                                for d in ("dim0", "dim1")) == [len(g.info(k).shape) - 2,
                                                                               len(g.info(k).shape) - 1]:
            k = g.node(k)["inputs"][0]
        else:
            return None, "attention: the first matmul is not q @ k^T"
    return FlashMatch(m1, m2, q, k, v, scale, diag, nodes), None


def unsupported(g, fm: FlashMatch, machine) -> str | None:
    """Why the flash kernel cannot take this match (shapes, dtypes), or None."""
    qs, ks, vs = (g.info(n).shape for n in (fm.q, fm.k, fm.v))
    if not (len(qs) == len(ks) == len(vs)) or len(qs) < 2:
        return "q, k and v differ in rank"
    e, ev = qs[-1], vs[-1]
    for d, what in ((e, "head dim"), (ks[-1], "key head dim"), (ev, "value head dim")):
        if not isinstance(d, int) or d % 16 or not 16 <= d <= 128:
            return f"the {what} ({d}) is not a static multiple of 16 up to 128"
    if ks[-1] != e:
        return "q and k head dims differ"
    for a, b in zip(qs[:-2], ks[:-2]):
        if str(a) != str(b):
            return "q and k batch dims differ (broadcast)"
    for a, b in zip(ks[:-1], vs[:-1]):
        if str(a) != str(b):
            return "k and v differ in batch or sequence dims"
    dts = {g.info(n).dtype for n in (fm.q, fm.k, fm.v)}
    if len(dts) != 1 or next(iter(dts)) not in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
        return "q, k, v are not of one float dtype"
    if g.info(fm.m2).dtype not in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
        return "the output is not a float dtype"
    p_dt = g.info(g.node(fm.m2)["inputs"][0]).dtype
    if p_dt != next(iter(dts)):
        return "P is not cast to v's dtype"
    if any(g.node(n)["attrs"].get("cube_tile") for n in (fm.m1, fm.m2)):
        return "a cube tile hint (pypto.set_cube_tile_shapes) on its matmuls asks for the separate matmul kernels"
    if isinstance(qs[-2], int) and qs[-2] < MIN_QUERIES:
        return (f"decode-shaped ({qs[-2]} query rows < {MIN_QUERIES}): the separate kernels spread the keys over "
                "more cores")
    if machine.cores.get("aiv_per_aic", 2) not in (1, 2):
        return "the machine's cluster is not one AIC with one or two AIVs"
    return None


def tiles_for(dt) -> tuple:
    """(MQ query rows per cube matmul, BK keys per vector step, CK keys per cube subtile) for an operand dtype:
    fp16 and bf16 in 128 x 128 blocks (the scores come to the vector side in fp32: a [64, 256] fp32 block and
    the row reduction's scratch tile would not fit the UB beside the accumulator), fp32 in 64 x 64 blocks (the
    L0 buffers hold half as many fp32 elements)."""
    return (128, 128, 128) if dt.itemsize == 2 else (64, 64, 64)


def row_groups(dt, machine) -> int:
    """Query row groups of MQ rows per task: the cube loads each K and V block once for all of them. Two for fp16
    operands where the handoffs go through GM and the cluster has two AIVs (each then keeps two rows' groups of
    state; a2a3 SDPA [3, 4096, 128] fp16: K and V bytes halve, 20 -> 18 bytes per query row and key); bf16's
    fp32 P V handoff, fp32's blocks and one-AIV clusters leave the UB no room for a second group, and on an
    on-chip machine (a5) the second group's state takes the UB its P V FIFO needs."""
    if dt == dtypes.float16 and machine.cores.get("aiv_per_aic", 2) == 2 and not machine.on_chip_handoff:
        return 2
    return 1


def flash_program(name, fm: FlashMatch, g, params: dict, workspaces: dict, machine, loc) -> TileProgram:
    """The TileGraph item of one match: ``params`` {q, k, v, o: (buffer, shape)} (3-D [BH, rows, cols] views),
    ``workspaces`` {ws_s, ws_p, ws_pv: (buffer, shape)}."""
    dt = g.info(fm.q).dtype
    mq, bk, ck = tiles_for(dt)
    tps = []
    for pname, mode in (("q", "in"), ("k", "in"), ("v", "in"), ("o", "out"),
                        ("ws_s", "inout"), ("ws_p", "inout"), ("ws_pv", "inout")):
        buf, shape, pdt = (params | workspaces)[pname]
        tps.append(TileParam(pname, buf, pdt, tuple(shape), mode))
    bh, L, E = params["q"][1]
    S = params["k"][1][1]
    Ev = params["v"][1][2]
    attrs = {"form": "flash", "scale": float(fm.scale), "diag": fm.diag, "mq": mq, "bk": bk, "ck": ck, "slots": SLOTS,
             "groups": row_groups(dt, machine),
             "preload": PRELOAD, "bh": bh, "L": L, "S": S, "E": E, "Ev": Ev,
             "skip_masked": True, "dtype": dt, "out_dtype": g.info(fm.m2).dtype, "s_dtype": handoff_dtypes(dt)[0], "pv_dtype": handoff_dtypes(dt)[1]}
    return TileProgram(name, "flash", [], tps, {}, [], nodes=sorted(fm.nodes), attrs=attrs, loc=loc)


def handoff_dtypes(dt) -> tuple:
    """(S, P V) dtypes in the GM workspaces. S is fp32 for every operand dtype: the unscaled QK^T of fp16
    operands can pass fp16's range (q = k = 40, E = 64: 102400) and fp16 scores of magnitude ~50 lose ~0.03 to
    rounding, 10x flash=False's error (3 * N(0, 1) inputs); the softmax is fp32 (nn.functional's promise).
    P V comes back in fp16 for fp16 operands (the vector side's GM -> UB loads bound the kernel: a2a3 SDPA
    0.275 -> 0.324 of the roofline), P being shifted by 2^-log2(BK) so a block's P V cannot pass |v|'s range;
    bf16 and fp32 keep fp32."""
    return (dtypes.float32, dtypes.float16 if dt == dtypes.float16 else dtypes.float32)


def workspace_shapes(machine, dt, E, Ev) -> dict:
    """{ws name: (rows, cols, dtype)}: one ring of SLOTS blocks of every row group per cluster."""
    mq, bk, _ = tiles_for(dt)
    rows = machine.num_aic * SLOTS * mq * row_groups(dt, machine)
    sdt, pvdt = handoff_dtypes(dt)
    return {"ws_s": (rows, bk, sdt), "ws_p": (rows, bk, dt), "ws_pv": (rows, Ev, pvdt)}


# ---------------------------------------------------------------- lowering
def _ceil(a, b):
    return sympy.ceiling(sympy.Rational(1, b) * a) if isinstance(a, sympy.Basic) else -(-a // b)


class _Emit:
    """Tile declarations and memory regions of one block."""

    def __init__(self):
        self.tiles: dict = {}
        self.regions: dict = {}

    def tile(self, name, space, dt, shape, valid, region):
        v = tuple(sympy.sympify(x) if not isinstance(x, int) else x for x in valid)
        v = None if tuple(str(x) for x in v) == tuple(str(x) for x in shape) else v
        if name not in self.tiles:
            self.tiles[name] = TileDecl(name, space, dt, tuple(shape), None, v)
            self.regions[name] = region
        return name


def lower_flash(p: TileProgram, machine):
    """-> (Kernel, block_dim, regions) of a "flash" TileProgram (see the module docstring)."""
    a = p.attrs
    mq, bk, U, P = a["mq"], a["bk"], a["slots"], a["preload"]
    ck = a.get("ck", bk)                       # keys per cube subtile (one L0B operand); bk // ck subtiles
    G = a.get("groups", 1)                     # row groups of mq rows per task (row_groups)
    mqt = G * mq                               # query rows per task
    bh, L, S, E, Ev = a["bh"], a["L"], a["S"], a["E"], a["Ev"]
    dt, odt, sdt, pvdt = a["dtype"], a["out_dtype"], a["s_dtype"], a["pv_dtype"]
    f32 = dtypes.float32
    scale, diag = a["scale"], a["diag"]
    nsub = machine.cores.get("aiv_per_aic", 2)
    half = mq // nsub
    loc = p.loc
    nq = _ceil(L, mqt)
    n_tasks = bh * nq
    block_dim = sympy.Max(1, sympy.Min(n_tasks, machine.num_aic)) if isinstance(n_tasks, sympy.Basic) \
        else max(1, min(n_tasks, machine.num_aic))
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    j0 = sympy.Symbol("j", integer=True, nonnegative=True)
    h = sympy.floor(t / nq) if not (isinstance(nq, int) and nq == 1) else t
    q0 = mqt * sympy.Mod(t, nq) if not (isinstance(nq, int) and nq == 1) else sympy.Integer(0)
    balanced = False
    if diag is not None and a.get("skip_masked", True) and isinstance(n_tasks, int) and isinstance(nq, int) \
            and nq > 1 and n_tasks % block_dim == 0 and n_tasks > block_dim:
        # causal tasks differ in length (query block i runs ~i + 1 key blocks): longest first, and every other
        # round of the clusters' round robin reversed (a snake), so each cluster gets about the same work
        odd = sympy.Mod(sympy.floor(t / BLOCK_NUM), 2)
        tau = t + odd * (BLOCK_NUM - 1 - 2 * BLOCK_IDX)
        h = sympy.Mod(tau, bh) if bh != 1 else sympy.Integer(0)
        q0 = mqt * (nq - 1 - sympy.floor(tau / bh))
        balanced = True
    n_kv = _ceil(S, bk)
    skip = a.get("skip_masked", True)          # lower(static_masks=False): every block computed and masked
    if diag is not None and skip:
        # the last key block any row of this task keeps: rows q0 .. q0 + mqt - 1 keep keys <= row + diag
        n_kv = sympy.Min(n_kv, sympy.floor((q0 + mqt - 1 + diag) / bk) + 1)
    groups = range(G)
    assert G == 1 or bk == ck, "row groups work on one cube subtile per key block"
    qg = [q0 + g * mq for g in groups]         # the first row of each group

    def needs(jj, g):
        """Group g's rows keep a key of block jj (with a causal-like mask an earlier group may keep none of the
        task's last block: its matmuls, softmax and fold are skipped, on both sides alike)."""
        if G == 1 or diag is None or not skip:
            return sympy.true
        return sympy.Le(jj * bk, qg[g] + mq - 1 + diag)
    qv = [sympy.Max(1, sympy.Min(mq, L - qg[g])) for g in groups]   # a group past the last row: one stale row
    base = BLOCK_IDX * (U * mqt)
    # one ring per workspace and row group: each group's slot of a block is a use of its own
    bufs = {(n, g): HandoffBuffer(("flash", p.name, n, g), f"flash workspace {n}" + (f" (rows {g})" if G > 1 else ""),
                                  depth=U, where=loc)
            for n in ("ws_s", "ws_p", "ws_pv") for g in groups}
    uses = {"c": 0, "v": 0}

    def mark(ins, ws, g, side, new=True):
        uses[side] += new
        ins.attrs[HANDOFF] = HandoffAccess(bufs[(ws, g)], uses[side])
        return ins

    def guarded(cond, stmts):
        return stmts if cond is sympy.true else [If(cond, stmts)]

    def row(u, g):                             # a group's first row in its workspace slot u
        return base + u * mqt + g * mq

    gm = [GMParam(q.name, q.dtype, tuple(q.shape)) for q in p.params]
    # ------------------------------------------------------------ cube
    c = _Emit()
    ql1 = [c.tile(f"c_q{g}" if g else "c_q", MemSpace.L1, dt, (mq, E), (qv[g], E), "q") for g in groups]
    count = {"a": 0, "b": 0, "c": 0}

    def l0(kind, shape, dtype, valid, space):
        k = count[kind] % 2
        name = c.tile(f"c_{kind}{k}_{count[kind]}", space, dtype, shape, valid, f"{kind}{k}")
        count[kind] += 1
        return name

    def block_kv(jj):
        """Keys of block jj the task reads: the keys' tail, and with a causal-like mask the last key any of the
        task's rows keeps (the columns past it are masked for every row: not computed, not read). Every row
        group reads as many (the mask zeroes an earlier group's P past its rows' keys)."""
        kv = sympy.Min(bk, S - jj * bk)
        if diag is not None and skip:
            kv = sympy.Min(kv, q0 + mqt + diag - jj * bk)
        return kv

    def sub_kv(jj, sc):
        return sympy.Min(ck, block_kv(jj) - sc * ck)

    def sub_cond(jj, sc):        # the subtile holds a key (a block's tail may end in its first subtile)
        return sympy.true if sc == 0 else sympy.Gt(block_kv(jj) - sc * ck, 0)

    def qk(jj, u):
        out = []
        for sc in range(bk // ck):
            kv = sub_kv(jj, sc)
            kt = c.tile(f"c_kt{u}_{sc}", MemSpace.L1, dt, (E, ck), (E, kv), f"kt{(u * (bk // ck) + sc) % 2}")
            b0 = l0("b", (E, ck), dt, (E, kv), MemSpace.L0B)
            t_ = c.tiles
            ops = [instr("TLOAD", [kt, GMRegion("k", (h, jj * bk + sc * ck, 0), True)], t_, {"trans": True}, loc),
                   instr("TMOV", [b0, kt], t_, None, loc)]
            for g in groups:                   # one K^T subtile for every group
                a0 = l0("a", (mq, E), dt, (qv[g], E), MemSpace.L0A)
                c0 = l0("c", (mq, ck), f32, (qv[g], kv), MemSpace.L0C)
                ops += guarded(needs(jj, g), [
                    instr("TMOV", [a0, ql1[g]], t_, None, loc), instr("TMATMUL", [c0, a0, b0], t_, None, loc),
                    mark(instr("TSTORE", [GMRegion("ws_s", (row(u, g), sc * ck), True), c0], t_, None, loc),
                         "ws_s", g, "c", sc == 0)])
            out += guarded(sub_cond(jj, sc), ops)
        return out

    def pv(jj, u):
        out = []
        acc0 = [l0("c", (mq, Ev), f32, (qv[g], Ev), MemSpace.L0C) for g in groups]
        for sc in range(bk // ck):
            kv = sub_kv(jj, sc)
            vt = c.tile(f"c_v{u}_{sc}", MemSpace.L1, dt, (ck, Ev), (kv, Ev), f"v{(u * (bk // ck) + sc) % 2}")
            b0 = l0("b", (ck, Ev), dt, (kv, Ev), MemSpace.L0B)
            t_ = c.tiles
            ops = [instr("TLOAD", [vt, GMRegion("v", (h, jj * bk + sc * ck, 0), True)], t_, None, loc),
                   instr("TMOV", [b0, vt], t_, None, loc)]
            for g in groups:                   # one V subtile for every group
                k = (u * (bk // ck) + sc) * G + g
                pt = c.tile(f"c_p{u}_{sc}" + (f"_{g}" if G > 1 else ""), MemSpace.L1, dt, (mq, ck), (qv[g], kv),
                            f"p{k % 2}")
                a0 = l0("a", (mq, ck), dt, (qv[g], kv), MemSpace.L0A)
                ops += guarded(needs(jj, g), [
                    mark(instr("TLOAD", [pt, GMRegion("ws_p", (row(u, g), sc * ck), True)], t_, None, loc),
                         "ws_p", g, "c", sc == 0),
                    instr("TMOV", [a0, pt], t_, None, loc),
                    instr("TMATMUL" if sc == 0 else "TMATMUL_ACC", [acc0[g], a0, b0], t_, None, loc)])
            out += guarded(sub_cond(jj, sc), ops)
        for g in groups:
            out += guarded(needs(jj, g), [
                mark(instr("TSTORE", [GMRegion("ws_pv", (row(u, g), 0), True), acc0[g]], c.tiles, None, loc),
                     "ws_pv", g, "c")])
        return out

    def skewed(steps):
        """The key loop skewed by PRELOAD: ``steps`` [(first or second, fn(jj, u))] in the order they run in an
        iteration; a first step works on block j, a second on block j - PRELOAD (its slot PRELOAD back)."""
        body = []
        for u in range(U):
            jj = j0 + u
            for which, fn in steps:
                if which == "first":
                    body.append(If(sympy.Lt(jj, n_kv), fn(jj, u)))
                else:
                    body.append(If(sympy.And(sympy.Ge(jj, P), sympy.Lt(jj - P, n_kv)), fn(jj - P, (u - P) % U)))
        return [For(j0, 0, n_kv + P, U, body, {"pipeline": U})]

    q_loads = []
    for g in groups:                           # a group past the last row keeps the tile's stale rows
        ld = instr("TLOAD", [ql1[g], GMRegion("q", (h, qg[g], 0), True)], c.tiles, None, loc)
        q_loads += [ld] if g == 0 else guarded(sympy.Gt(L - qg[g], 0), [ld])
    cube_task = q_loads + skewed([("first", qk), ("second", pv)])
    cube = Block(f"{p.name}_aic", CoreType.AIC, gm, [], [], [For(t, BLOCK_IDX, n_tasks, BLOCK_NUM, cube_task)], loc)
    cube.tiles = list(c.tiles.values())
    # ------------------------------------------------------------ vector
    vx = _Emit()
    row0 = SUBBLOCK_IDX * half if nsub > 1 else sympy.Integer(0)
    left = [L - qg[g] - row0 for g in groups]
    rv = [sympy.Max(1, sympy.Min(half, left[g])) for g in groups]   # a sub-block past the last row works on one stale row
    # the [rows, 1] statistics (m, l, their block values, alpha) live in column 0 of [HALF, 8] fp32 tiles (one
    # 32-byte row each); their elementwise ops span all 8 columns (columns 1..7 carry values nobody reads, the
    # row reductions write and the row-expands read column 0 only), so each is one contiguous span of HALF * 32
    # bytes: 8 vector repeats instead of HALF one-column rows (64), alpha's exp 32 instead of 256 (a2a3 SDPA
    # [3, 4096, 128] fp16: AIV V 73% -> 56% busy, 0.324 -> 0.327 of the roofline; the kernel is then bound by
    # the L2 bandwidth: report.gm_bytes 1013 MB in 216.5 us = 4.68 TB/s of a2a3's 4.9; per [128, 128] block and
    # cluster S 2 x 64 KB fp32, P 2 x 32 KB, P V 2 x 32 KB, K and V 64 KB: only fewer bytes make it faster)
    stat = (half, 8)
    sv = [(rv[g], 8) for g in groups]
    sfx = [f"_{g}" if g else "" for g in groups]
    m = [vx.tile(f"v_m{sfx[g]}", MemSpace.UB, f32, stat, sv[g], "stat") for g in groups]
    l_ = [vx.tile(f"v_l{sfx[g]}", MemSpace.UB, f32, stat, sv[g], "stat") for g in groups]
    acc = [vx.tile(f"v_acc{sfx[g]}", MemSpace.UB, f32, (half, Ev), (rv[g], Ev), "acc") for g in groups]
    out = [vx.tile(f"v_out{sfx[g]}", MemSpace.UB, odt, (half, Ev), (rv[g], Ev), "pvin" if pvdt != f32 else "pv")
           for g in groups]
    T = vx.tiles
    # A narrow P V handoff: P_j is computed as exp(s - m_new - shift) = P_j * 2^-log2(bk), so that a block's
    # P_j V_j (at most bk keys of P <= 1) stays within |v| <= the dtype's largest value; l_j sums the same
    # shifted P, so O = acc / l is unchanged up to rounding: the fp32 exponent s - (m_new + ln bk) rounds as
    # s - m_new does, and the fp16 P is subnormal (absolute steps of 2^-24 * bk) below 2^-14 * bk of the row max
    shift = math.log(bk) if pvdt != f32 else 0.0
    # UB regions. One group: S double buffered (s0 / s1), the mask on P's bytes. Two groups (each AIV keeps
    # two groups' accumulators and statistics): one S buffer (a group's S loads while the other group's
    # softmax and fold run), the mask on P V's bytes (only the vector pipe touches either; the row reductions'
    # scratch finds room there too), one P and one P V staging buffer.
    s_region = (lambda u: f"s{u % 2}") if G == 1 else (lambda u: "s")
    mask_region = ("p" if pvdt != f32 else "mask") if G == 1 else "pv"

    def softmax(jj, u, g):
        kv = block_kv(jj)
        s = vx.tile(f"v_s{u}{sfx[g]}", MemSpace.UB, f32, (half, bk), (rv[g], kv), s_region(u))
        lj = vx.tile(f"v_lj{u}", MemSpace.UB, f32, stat, sv[g], "stat")
        mn = vx.tile(f"v_mn{u}", MemSpace.UB, f32, stat, sv[g], "stat")
        al = f"v_alpha{u}{sfx[g]}"
        ops = [mark(instr("TLOAD", [s, GMRegion("ws_s", (row(u, g) + row0, 0), True)], T, None, loc),
                    "ws_s", g, "v"),
               instr("TMULS", [s, s, float(scale)], T, None, loc)]
        if diag is not None:
            mk = vx.tile(f"v_mask{u}{sfx[g]}", MemSpace.UB, f32, (half, bk), (rv[g], kv), mask_region)
            d = qg[g] + row0 + diag - jj * bk          # key c of the block is kept by row r when c <= r + d
            partial = sympy.Gt(jj * bk + bk - 1, qg[g] + row0 + diag) if skip else sympy.true
            ops.append(If(partial, [instr("TTRIL", [mk, d], T, None, loc),
                                    instr("TADDS", [mk, mk, -1.0], T, None, loc),
                                    instr("TMULS", [mk, mk, -NEG], T, None, loc),
                                    instr("TADD", [s, s, mk], T, None, loc)]))
        ops += [instr("TROWMAX", [lj, s], T, None, loc), instr("TMAX", [mn, m[g], lj], T, None, loc),
                instr("TSUB", [al, m[g], mn], T, None, loc), instr("TEXP", [al, al], T, None, loc),
                instr("TMOV_V", [m[g], mn], T, None, loc)]
        if shift:
            ops.append(instr("TADDS", [mn, mn, shift], T, None, loc))
        ops += [instr("TROWEXPANDSUB", [s, s, mn], T, None, loc),
                instr("TEXP", [s, s], T, None, loc), instr("TROWSUM", [lj, s], T, None, loc),
                instr("TMUL", [l_[g], l_[g], al], T, None, loc), instr("TADD", [l_[g], l_[g], lj], T, None, loc)]
        p16 = vx.tile(f"v_p{u}{sfx[g]}", MemSpace.UB, dt, (half, bk), (rv[g], kv), "p")
        ops += [instr("TCVT", [p16, s], T, None, loc),
                mark(instr("TSTORE", [GMRegion("ws_p", (row(u, g) + row0, 0), True), p16], T, None, loc),
                     "ws_p", g, "v")]
        return ops

    def fold(jj, u, g):
        pvt = vx.tile(f"v_pv{u}{sfx[g]}", MemSpace.UB, f32, (half, Ev), (rv[g], Ev), "pv")
        pin = pvt if pvdt == f32 else vx.tile(f"v_pvin{u}{sfx[g]}", MemSpace.UB, pvdt, (half, Ev), (rv[g], Ev),
                                              "pvin")
        al = f"v_alpha{u}{sfx[g]}"
        ops = [mark(instr("TLOAD", [pin, GMRegion("ws_pv", (row(u, g) + row0, 0), True)], T, None, loc),
                    "ws_pv", g, "v")]
        if pin != pvt:
            ops.append(instr("TCVT", [pvt, pin], T, None, loc))
        return ops + [instr("TROWEXPANDMUL", [acc[g], acc[g], al], T, None, loc),
                      instr("TADD", [acc[g], acc[g], pvt], T, None, loc)]

    # alpha_j lives from softmax(j) to fold(j), PRELOAD copies later (across the loop's back edge): a region each
    for u in range(U):
        for g in groups:
            vx.tile(f"v_alpha{u}{sfx[g]}", MemSpace.UB, f32, stat, sv[g], f"alpha{u}")
    vec_task = []
    for g in groups:
        vec_task += [instr("TEXPANDS", [m[g], float("-inf")], T, None, loc),
                     instr("TEXPANDS", [l_[g], 0.0], T, None, loc), instr("TEXPANDS", [acc[g], 0.0], T, None, loc)]
    # a group's softmax, then its fold: the other group's steps cover the loads into the shared buffers
    steps = []
    for g in groups:
        steps += [("first", lambda jj, u, g=g: guarded(needs(jj, g), softmax(jj, u, g))),
                  ("second", lambda jj, u, g=g: guarded(needs(jj, g), fold(jj, u, g)))]
    vec_task += skewed(steps)
    for g in groups:
        vec_task += [instr("TROWEXPANDDIV", [acc[g], acc[g], l_[g]], T, None, loc),
                     instr("TCVT", [out[g], acc[g]], T, None, loc),
                     If(sympy.Gt(left[g], 0), [instr("TSTORE", [GMRegion("o", (h, qg[g] + row0, 0), True), out[g]],
                                                     T, None, loc)])]
    vec = Block(f"{p.name}_aiv", CoreType.AIV, gm, [], [], [For(t, BLOCK_IDX, n_tasks, BLOCK_NUM, vec_task)], loc)
    vec.tiles = list(vx.tiles.values())
    kernel = Kernel(p.name, [cube, vec], loc)
    kernel.attrs["decisions"] = {
        "kind": "flash", "form": "flash", "tile_source": "flash form",
        "tile": {"query rows": mqt, "keys": bk}, "sizes": {"query rows": L, "keys": S, "heads": bh},
        "cube subtile keys": ck, "head dim": E,
        "buffers": {"workspace slots": U, "vector rows per sub-block": half * G, "row groups": G,
                    "handoff dtypes": f"S {sdt.name}, P {dt.name}, PV {pvdt.name}",
                    "softmax dtype": f32.name},
        "pipelining": P + 1, "preload": P, "block_dim": block_dim,
        "task order": "longest first, snake over the clusters" if balanced else "head-major",
        "mask": "none" if diag is None else f"j <= i + {diag}: masked key blocks skipped, mask on partial blocks only"}
    regions = {**c.regions, **vx.regions}
    return kernel, block_dim, regions


# ---------------------------------------------------------------- the tiling pass's hooks
def plan_body(body) -> None:
    """Find the attention shapes of a tiling ``_Body`` (tiling.py) and decide, per match, flash or not:
    sets ``body.flash_at`` {P @ V group id: FlashMatch}, ``body.flash_skip`` (group ids and node ids the
    kernels compute) and ``body.flash_why`` {P @ V node: why it is not one flash kernel}."""
    g, plan = body.g, body.plan
    body.flash_at, body.flash_skip, body.flash_why = {}, set(), {}
    for gid, grp in plan.groups.items():
        if grp.kind != "matmul":
            continue
        m2 = grp.nodes[0]
        fm, why = match_attention(g, m2)
        if fm is None:
            if why.startswith("attention: "):         # a softmax @ V whose scores the kernel cannot take
                body.flash_why[m2] = why[len("attention: "):]
            continue
        if not body.scope.flash:
            body.flash_why[m2] = "off (lower(flash=False))"
            continue
        why = unsupported(g, fm, body.scope.machine)
        groups = {plan.group_of[n] for n in fm.nodes if n in plan.group_of} - {gid}
        if why is None and any(not set(plan.groups[x].nodes) <= fm.nodes for x in groups):
            why = "the softmax's fused group computes other values too"
        if why is None and any(n in body.wants or n in body.homes for n in fm.nodes - {fm.m2}):
            why = "an intermediate value is wanted elsewhere"
        if why is not None:
            body.flash_why[m2] = why
            continue
        body.flash_at[gid] = fm
        body.flash_skip |= groups | (fm.nodes - {fm.m2})


def _view3(body, n):
    """A 3-D [batch, rows, cols] buffer over value ``n``'s contiguous GM home (copied contiguous first)."""
    if not body.storage[n].is_full:
        body._copy_contiguous(n)
    shape = body.g.info(n).shape
    bh = 1
    for d in shape[:-2]:
        bh = bh * d
    shape3 = (sympy.sympify(bh) if not isinstance(bh, int) else bh, shape[-2], shape[-1])
    shape3 = tuple(int(x) if isinstance(x, sympy.Integer) else x for x in shape3)
    return body.scope.view(body.storage[n].buffer, shape3), shape3


def emit(body, fm: FlashMatch):
    """The flash kernel of a match, appended to the body's items; the result stored where it is wanted."""
    g = body.g
    target = body._store_target(fm.m2)
    params = {}
    for key, n in (("q", fm.q), ("k", fm.k), ("v", fm.v)):
        buf, shape3 = _view3(body, n)
        params[key] = (buf, shape3, g.info(n).dtype)
    if target.is_full:
        out = target
    else:
        info = g.info(fm.m2)
        out = body.scope.workspace(f"ws{fm.m2}", info.shape, info.dtype)
    body.storage[fm.m2] = out
    buf, shape3 = _view3(body, fm.m2)
    params["o"] = (buf, shape3, g.info(fm.m2).dtype)
    ws = {}
    for name, (rows, cols, dt) in workspace_shapes(body.scope.machine, g.info(fm.q).dtype, params["q"][1][2],
                                                   params["v"][1][2]).items():
        b = body.scope.add_buffer(f"flash_{name}", (rows, cols), dt, "workspace")
        ws[name] = (b.name, (rows, cols), dt)
    body.scope.count += 1
    name = body.scope.unique(f"flash_attention_{body.scope.count}")
    prog = flash_program(name, fm, g, params, ws, body.scope.machine, g.node(fm.m2)["loc"])
    prog.attrs["skip_masked"] = body.scope.static_masks
    body.items.append(prog)
    if out is not target:
        body._copy(fm.m2, target)
    body._extra_copies(fm.m2, target)
