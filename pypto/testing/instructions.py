"""Kernels that run every instruction of the table (pypto/ir/isa.py), generated from its entries.

``vector_kernel(dtype)`` is one AIV kernel: for each vector instruction whose ``dtypes`` admit
``dtype`` and for each choice of its attributes (``attrs``), the operands its form and region call
for (tiles of OP_TILE x OP_TILE with the tail valid shape OP_VALID, cut per the region kind), source
values from the operand's ``domain``, and a store of the destination into its own slot of an output
tensor (one output per destination dtype). ``cube_kernel(dtype)`` does the same for the cube
instructions (TMOV L1 -> L0A/L0B, TMATMUL, TMATMUL_ACC). A new entry in the table is covered here
without touching this file.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pypto import dtypes
from pypto.errors import SourceLoc
from pypto.ir.block import Block, CoreType, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.isa import ISA, MemSpace, Pipe
from pypto.ir.isa_semantics import REGIONS

OP_TILE = 32
OP_VALID = (13, 29)
FLOATS = (dtypes.float32, dtypes.float16, dtypes.bfloat16)
INTS = (dtypes.int32,)
DTYPES = {"all": FLOATS + INTS, "float": FLOATS, "int": INTS}
# source values per domain: the first and second "any" operands differ (a, b)
INPUTS = ("a", "b", "p", "nz", "m")
CUBE = ("TMOV", "TMATMUL", "TMATMUL_ACC")


@dataclass(frozen=True)
class Case:
    op: str
    attrs: dict
    out: str                 # the output tensor holding its result
    slot: int                # its index in that output
    dtype: object            # the destination's element type

    @property
    def name(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}[{extra}]" if extra else self.op


def vector_ops(dtype, skip=()) -> list[str]:
    """The vector instructions of the table that take ``dtype`` (GM moves and cube ones apart)."""
    return [n for n, s in ISA.items() if s.region not in ("load", "store", "gather", "scatter") and n not in CUBE
            and dtype in DTYPES[s.dtypes] and n not in skip]


def _attr_choices(spec) -> list[dict]:
    """One attrs dict per value of each attribute (the others at their default)."""
    if not spec.attrs:
        return [{}]
    return [{name: v} for name, values in spec.attrs.items() for v in values]


def _result_dtypes(spec, dtype, mask_dtype) -> tuple:
    """The destination dtypes a case is generated for (a conversion: to another float and to int32)."""
    if spec.result == "mask":
        return (mask_dtype,)
    if spec.result == "index":
        return (dtypes.int32,)
    if spec.result == "convert":
        if dtype in INTS:
            return (dtypes.float32,)
        return (dtypes.float16 if dtype == dtypes.float32 else dtypes.float32, dtypes.int32)
    return (dtype,)


def _scalar(domain, dtype):
    if domain == "int":
        return 1
    return 3 if dtype in INTS else 0.75


def _loc(line):
    return SourceLoc("every_instruction.py", line, "every_instruction")


class _Tiles:
    """Tiles placed one after another per memory space, one per (name, dtype, valid shape)."""

    def __init__(self):
        self.decls: dict[str, TileDecl] = {}
        self.top: dict = {}

    def get(self, base, space, dtype, valid):
        name = f"{base}_{space}_{dtype.name}_{valid[0]}x{valid[1]}"
        if name not in self.decls:
            addr = self.top.get(space, 0)
            nbytes = OP_TILE * OP_TILE * dtype.itemsize
            self.top[space] = addr + -(-nbytes // 32) * 32
            self.decls[name] = TileDecl(name, space, dtype, (OP_TILE, OP_TILE), addr, tuple(valid))
        return name


def vector_kernel(dtype, mask_dtype=dtypes.bool_, skip=()) -> tuple[Kernel, list[Case]]:
    """The AIV kernel of every vector instruction taking ``dtype`` (but ``skip``); masks are ``mask_dtype``."""
    tiles = _Tiles()
    loads, body, cases = [], [], []
    loaded = set()
    slots: dict[str, int] = {}
    out_dtype: dict[str, object] = {}
    for op in vector_ops(dtype, skip):
        spec = ISA[op]
        n = spec.n_tiles
        shapes = REGIONS[spec.region]([x for _ in range(n) for x in OP_VALID], n)
        for attrs in _attr_choices(spec):
            operands = []
            anys = 0
            for k, shape in enumerate(shapes[1:]):
                domain = spec.domain[k] if k < len(spec.domain) else "any"
                if domain == "any":
                    source, anys = ("a", "b")[anys % 2], anys + 1
                else:
                    source = {"positive": "p", "nonzero": "nz", "mask": "m"}[domain]
                dt = mask_dtype if source == "m" else dtype
                name = tiles.get(f"in_{source}", MemSpace.UB, dt, shape)
                if name not in loaded:
                    loaded.add(name)
                    loads.append(instr("TLOAD", [name, GMRegion(source, (0, 0))], tiles.decls, {}, _loc(1)))
                operands.append(name)
            if spec.has_scalar:
                domain = spec.domain[n - 1] if n - 1 < len(spec.domain) else "any"
                operands.append(_scalar(domain, dtype))
            for rdt in _result_dtypes(spec, dtype, mask_dtype):
                dst = tiles.get("dst", MemSpace.UB, rdt, shapes[0])
                out = f"out_{rdt.name}"
                slot = slots.get(out, 0)
                slots[out], out_dtype[out] = slot + 1, rdt
                cases.append(Case(op, attrs, out, slot, rdt))
                line = len(cases) + 1
                body += [instr(op, [dst] + operands, tiles.decls, attrs, _loc(line)),
                         SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
                         instr("TSTORE", [GMRegion(out, (slot, 0, 0)), dst], tiles.decls, {}, _loc(line)),
                         SetFlag(Pipe.MTE3, Pipe.V, 0), WaitFlag(Pipe.MTE3, Pipe.V, 0)]
    body = loads + [SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0)] + body
    gm = [GMParam(s, mask_dtype if s == "m" else dtype, (OP_TILE, OP_TILE)) for s in INPUTS]
    gm += [GMParam(o, out_dtype[o], (slots[o], OP_TILE, OP_TILE)) for o in slots]
    name = f"every_instruction_{dtype.name}" + ("" if mask_dtype == dtypes.bool_ else f"_{mask_dtype.name}_masks")
    blk = Block("every_instruction", CoreType.AIV, gm, [], list(tiles.decls.values()), body)
    return Kernel(name, [blk], loc=_loc(1)), cases


def cube_kernel(dtype) -> tuple[Kernel, list[Case]]:
    """a [M, K] and b [K, N] (tail valid shapes) through L1 -> TMOV -> L0A / L0B, then TMATMUL into c and
    TMATMUL + TMATMUL_ACC into c2 (c2 = 2 a @ b), both stored from L0C."""
    tiles = _Tiles()
    m, k = OP_VALID
    n = 24
    a1 = tiles.get("a", MemSpace.L1, dtype, (m, k))
    b1 = tiles.get("b", MemSpace.L1, dtype, (k, n))
    a0 = tiles.get("a", MemSpace.L0A, dtype, (m, k))
    b0 = tiles.get("b", MemSpace.L0B, dtype, (k, n))
    c = tiles.get("c", MemSpace.L0C, dtypes.float32, (m, n))
    c2 = tiles.get("c2", MemSpace.L0C, dtypes.float32, (m, n))
    d = tiles.decls

    def ins(op, *operands):
        return instr(op, list(operands), d, {}, _loc(1))
    body = [ins("TLOAD", a1, GMRegion("a", (0, 0))), ins("TLOAD", b1, GMRegion("b", (0, 0))),
            SetFlag(Pipe.MTE2, Pipe.MTE1, 0), WaitFlag(Pipe.MTE2, Pipe.MTE1, 0),
            ins("TMOV", a0, a1), ins("TMOV", b0, b1),
            SetFlag(Pipe.MTE1, Pipe.M, 0), WaitFlag(Pipe.MTE1, Pipe.M, 0),
            ins("TMATMUL", c, a0, b0), ins("TMATMUL", c2, a0, b0), ins("TMATMUL_ACC", c2, a0, b0),
            SetFlag(Pipe.M, Pipe.FIX, 0), WaitFlag(Pipe.M, Pipe.FIX, 0),
            ins("TSTORE", GMRegion("out", (0, 0, 0)), c), ins("TSTORE", GMRegion("out", (1, 0, 0)), c2)]
    gm = [GMParam("a", dtype, (OP_TILE, OP_TILE)), GMParam("b", dtype, (OP_TILE, OP_TILE)),
          GMParam("out", dtypes.float32, (2, OP_TILE, OP_TILE))]
    blk = Block("every_cube_instruction", CoreType.AIC, gm, [], list(d.values()), body)
    cases = [Case("TMATMUL", {}, "out", 0, dtypes.float32), Case("TMATMUL_ACC", {}, "out", 1, dtypes.float32)]
    return Kernel(f"every_cube_instruction_{dtype.name}", [blk], loc=_loc(1)), cases


def inputs(kernel, dtype, cases, seed=0, mask_dtype=dtypes.bool_) -> dict:
    """GM tensors of a kernel of this module: the sources per domain and a zeroed output per result dtype."""
    g = torch.Generator().manual_seed(seed)
    S = OP_TILE
    if dtype in INTS:
        a = torch.randint(-50, 50, (S, S), generator=g, dtype=torch.int32)
        b = torch.randint(-50, 50, (S, S), generator=g, dtype=torch.int32)
        p = torch.randint(1, 50, (S, S), generator=g, dtype=torch.int32)
        nz = p * torch.where(torch.rand(S, S, generator=g) < 0.5, -1, 1).to(torch.int32)
    else:
        t = dtype.torch_dtype
        a = (torch.randn(S, S, generator=g) * 2).to(t)
        b = (torch.randn(S, S, generator=g) * 2).to(t)
        p = (torch.rand(S, S, generator=g) * 3 + 0.1).to(t)
        nz = (p * torch.where(torch.rand(S, S, generator=g) < 0.5, -1.0, 1.0)).to(t)
        a[0, :4] = torch.tensor([0.5, 1.5, -2.5, 0.0]).to(t)     # rounding ties and a zero
    b[1, :8] = a[1, :8]                                             # equal elements (compare modes)
    m = (torch.rand(S, S, generator=g) < 0.5).to(mask_dtype.torch_dtype)
    params = {g.name for blk in kernel.blocks for g in blk.gm_params}
    args = {k: v for k, v in {"a": a, "b": b, "p": p, "nz": nz, "m": m}.items() if k in params}
    counts: dict = {}
    for c in cases:
        counts[c.out] = (max(counts.get(c.out, (0,))[0], c.slot + 1), c.dtype)
    for out, (n, dt) in counts.items():
        args[out] = torch.zeros(n, S, S, dtype=dt.torch_dtype)
    return args


def tolerance(case) -> tuple[float, float]:
    """(rtol, atol) between two backends' results of one case: exact for integers and conversions."""
    if case.op == "TCVT":
        return (0, 0)
    dtype = case.dtype
    return {dtypes.float32: (2e-6, 2e-6), dtypes.float16: (1e-3, 1e-3), dtypes.bfloat16: (8e-3, 8e-3)}.get(dtype,
                                                                                                         (0, 0))
