"""Placement: which core type runs each op, where each tile lives, and which tiles cross between the
cube and the vector cores.

* ``matmul`` runs on the cube: its operands live in L1 (loaded from GM, or handed over by the vector
  cores) and are copied to L0A / L0B; its result lives in L0C. An accumulator carried across a
  ``pt.range`` loop (``acc += pt.matmul(a, b)``) stays in L0C (TMATMUL on the first iteration, then
  TMATMUL_ACC).
* every other op runs on the vector cores, on UB tiles. A load is issued on each side that reads it.
* a tile produced on one side and read on the other is *handed over* through a GM workspace (a2a3 has no
  direct L0C -> UB or UB -> L1 path): the producer stores it into a slot, the consumer loads it; the
  slots are double buffered and guarded by cross-core flags (passes/cross_core.py).

A kernel whose ops all run on one side is a vector (AIV) or cube (AIC) kernel; a mixed one is a cluster
kernel (1 AIC + 2 AIV). In a cluster the vector work is split by rows between the two vector cores when
every vector op is row-local and every vector tile has the same even number of rows R (or one row:
row vectors are replicated); otherwise the second vector core only takes part in the flags.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CompileError
from .ir import KernelProgram, Loop, Value, walk_ops
from .optable import is_row_local

CUBE, VECTOR = "cube", "vector"


@dataclass
class Channel:
    """A tile handed from one side to the other through a GM workspace."""
    id: int
    value: Value
    src: str                    # producing side
    dst: str

    @property
    def param(self) -> str:
        return f"ws{self.id}"


@dataclass
class Placement:
    side: dict = field(default_factory=dict)        # id(op) -> CUBE | VECTOR (loads: the set of sides)
    cube_roles: dict = field(default_factory=dict)  # id(value) -> {"l1", "l0a", "l0b", "l0c"}
    vector: set = field(default_factory=set)        # id(value) of the tiles needed in UB
    channels: dict = field(default_factory=dict)    # id(value) -> Channel
    cube_carries: set = field(default_factory=set)  # id(Carry) kept in L0C
    acc_kind: dict = field(default_factory=dict)    # id(matmul op) -> "none" | "zero" | "l0c" | "phi"
    kind: str = VECTOR                              # vector | cube | cluster
    split_rows: int | None = None                   # R when the vector work is split between 2 AIV
    producer: dict = field(default_factory=dict)    # id(value) -> side that computes it

    def channel_list(self) -> list:
        return sorted(self.channels.values(), key=lambda c: c.id)


def _is_zero_fill(v: Value) -> bool:
    return v.op is not None and v.op.op == "full" and v.op.args[0] == 0


def _carries(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield from ((s, c) for c in s.carried)
            yield from _carries(s.body)


def place(program: KernelProgram) -> Placement:
    pl = Placement()
    ops = list(walk_ops(program.body))
    uses: dict = {}
    for op in ops:
        for a in op.values():
            uses.setdefault(id(a), []).append(op)
    carry_of_phi = {}
    for loop, c in _carries(program.body):
        carry_of_phi[id(c.phi)] = (loop, c)
        for v in (c.init, c.next):
            uses.setdefault(id(v), []).append(c)

    # cube accumulators carried across loops
    for loop, c in _carries(program.body):
        nxt = c.next.op
        if nxt is not None and nxt.op == "matmul" and len(nxt.args) == 3 and nxt.args[2] is c.phi \
                and len(uses.get(id(c.phi), [])) == 1:
            if _is_zero_fill(c.init) or (c.init.op is not None and c.init.op.op == "matmul"
                                         and len(uses.get(id(c.init), [])) == 1):
                pl.cube_carries.add(id(c))

    # producers
    def produced_on(v: Value) -> str | None:
        if id(v) in pl.producer:
            return pl.producer[id(v)]
        if v.op is None:                           # a loop phi or result
            for loop, c in _carries(program.body):
                if v is c.phi or v is c.result:
                    return CUBE if id(c) in pl.cube_carries else VECTOR
            raise CompileError(f"tile %{v.name} has no producer")
        if v.op.op == "matmul":
            return CUBE
        if v.op.op == "load":
            return None                            # loaded where needed
        return VECTOR

    for op in ops:
        if op.out is not None:
            pl.producer[id(op.out)] = produced_on(op.out)
    for loop, c in _carries(program.body):
        side = CUBE if id(c) in pl.cube_carries else VECTOR
        pl.producer[id(c.phi)] = pl.producer[id(c.result)] = side

    # matmul accumulator operands
    for op in ops:
        if op.op != "matmul":
            continue
        if len(op.args) == 2:
            pl.acc_kind[id(op)] = "none"
            continue
        acc = op.args[2]
        if id(acc) in carry_of_phi and id(carry_of_phi[id(acc)][1]) in pl.cube_carries:
            pl.acc_kind[id(op)] = "phi"
        elif _is_zero_fill(acc):
            pl.acc_kind[id(op)] = "zero"
        elif acc.op is not None and acc.op.op == "matmul" and len(uses.get(id(acc), [])) == 1:
            pl.acc_kind[id(op)] = "l0c"
        else:
            raise CompileError("pt.matmul: the accumulator must be zeros, a matmul result read only here, or a "
                               "tile carried in a loop and only accumulated into", loc=op.loc)

    # what each side needs (to a fixed point: a vector op is live when its result is needed somewhere)
    def need(v: Value, side: str, role: str | None = None) -> bool:
        if side == CUBE:
            roles = pl.cube_roles.setdefault(id(v), set())
            if (role or "l1") in roles:
                return False
            roles.add(role or "l1")
            return True
        if id(v) in pl.vector:
            return False
        pl.vector.add(id(v))
        return True

    def wanted(v: Value) -> bool:
        return id(v) in pl.vector or id(v) in pl.cube_roles

    changed = True
    while changed:
        changed = False
        for op in ops:
            if op.op == "matmul":
                pl.side[id(op)] = CUBE
                a, b = op.args[:2]
                changed |= need(a, CUBE, "l0a") | need(b, CUBE, "l0b") | need(op.out, CUBE, "l0c")
                if pl.acc_kind[id(op)] in ("l0c", "phi"):
                    changed |= need(op.args[2], CUBE, "l0c")
            elif op.op == "store":
                v = op.args[1]
                side = CUBE if pl.producer[id(v)] == CUBE else VECTOR
                pl.side[id(op)] = side
                changed |= need(v, side, "l0c" if side == CUBE else None)
            elif op.op != "load" and wanted(op.out):
                pl.side[id(op)] = VECTOR
                for a in op.values():
                    changed |= need(a, VECTOR)
        for loop, c in _carries(program.body):
            if id(c) in pl.cube_carries:
                if not _is_zero_fill(c.init):
                    changed |= need(c.init, CUBE, "l0c")
            elif wanted(c.phi) or wanted(c.result):
                changed |= need(c.init, VECTOR) | need(c.next, VECTOR) | need(c.phi, VECTOR)
    # L0A/L0B operands come from L1
    for vid, roles in pl.cube_roles.items():
        if roles & {"l0a", "l0b"}:
            roles.add("l1")

    # loads: issued on every side that needs them
    for op in ops:
        if op.op == "load":
            sides = set()
            if id(op.out) in pl.cube_roles:
                sides.add(CUBE)
            if id(op.out) in pl.vector:
                sides.add(VECTOR)
            pl.side[id(op)] = sides
            pl.producer[id(op.out)] = sides

    # handoffs
    values = {id(op.out): op.out for op in ops if op.out is not None}
    for loop, c in _carries(program.body):
        values[id(c.phi)], values[id(c.result)] = c.phi, c.result
    for vid, v in values.items():
        prod = pl.producer.get(vid)
        if isinstance(prod, set) or prod is None:
            continue
        if prod == VECTOR and vid in pl.cube_roles:
            pl.channels[vid] = Channel(len(pl.channels), v, VECTOR, CUBE)
        if prod == CUBE and vid in pl.vector:
            pl.channels[vid] = Channel(len(pl.channels), v, CUBE, VECTOR)

    on_cube = any(s == CUBE or (isinstance(s, set) and CUBE in s) for s in pl.side.values())
    on_vec = any(s == VECTOR or (isinstance(s, set) and VECTOR in s) for s in pl.side.values())
    pl.kind = "cluster" if on_cube and on_vec else (CUBE if on_cube else VECTOR)
    if pl.kind == "cluster":
        pl.split_rows = _split_rows(pl, ops, values)
    return pl


def _split_rows(pl: Placement, ops, values) -> int | None:
    vec_values = [values[v] for v in pl.vector if v in values]
    if not vec_values:
        return None
    rows = max(v.shape[0] for v in vec_values)
    if rows < 2 or rows % 2:
        return None
    if any(v.shape[0] not in (rows, 1) for v in vec_values):
        return None
    for op in ops:
        side = pl.side.get(id(op))
        if side == VECTOR or (isinstance(side, set) and VECTOR in side):
            if not is_row_local(op.op):
                return None
            if op.op == "load" and op.args[0].trans and op.out.shape[0] == rows:
                return None
    return rows
