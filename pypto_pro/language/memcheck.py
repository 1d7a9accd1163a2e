"""Overlapping addresses of live tiles: two distinct buffers whose bytes overlap may share memory only
if one is dead whenever the other is written. Liveness is computed on the structured program
(backward dataflow; loop bodies iterated to a fixed point)."""
from __future__ import annotations

from pypto.ir.block import For, If, Instr

from .errors import MemoryPlanError

_READS_DST = {"TMATMUL_ACC"}


def _accesses(ins: Instr, slot_of: dict):
    reads, writes = set(), set()
    tiles = [o for o in ins.operands if isinstance(o, str)]
    if ins.spec.kind == "store":
        reads |= {slot_of[t] for t in tiles}
    else:
        if tiles and isinstance(ins.operands[0], str):
            writes.add(slot_of[ins.operands[0]])
            if ins.op in _READS_DST:
                reads.add(slot_of[ins.operands[0]])
            tiles = tiles[1:]
        reads |= {slot_of[t] for t in tiles}
    return reads, writes


def check_live_overlaps(block, section) -> None:
    slot_of = {name: section.slot_of[name].uid for name in section.slot_of}
    slots = {s.uid: s for s in section.slot_of.values()}
    overlap = {}
    items = sorted(slots.values(), key=lambda s: (str(s.space), s.addr))
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if a.space != b.space or b.addr >= a.addr + a.nbytes:
                continue
            if a.group is not None and a.group is b.group:
                continue
            overlap.setdefault(a.uid, set()).add(b.uid)
            overlap.setdefault(b.uid, set()).add(a.uid)
    if not overlap:
        return

    def visit(stmts, live_out: set) -> set:
        live = set(live_out)
        for s in reversed(stmts):
            if isinstance(s, Instr):
                reads, writes = _accesses(s, slot_of)
                for w in writes:
                    for o in overlap.get(w, ()):
                        if o in live and o != w:
                            _raise(slots[w], slots[o], s)
                live = (live - writes) | reads
            elif isinstance(s, For):
                entry = set(live)
                for _ in range(3):
                    new = visit(s.body, entry | live)
                    if new <= entry:
                        break
                    entry |= new
                live = live | entry
            elif isinstance(s, If):
                live = visit(s.then_body, live) | visit(s.else_body, live)
        return live

    visit(block.body, set())


def _raise(written, other, ins):
    first, second = sorted((written, other), key=lambda s: (s.span.line, s.span.col) if s.span else (0, 0))
    span = second.span
    raise MemoryPlanError(
        f"tile '{second.name}' ({second.space} {second.addr:#x}..{second.addr + second.nbytes:#x}) overlaps "
        f"tile '{first.name}' ({first.space} {first.addr:#x}..{first.addr + first.nbytes:#x}, line "
        f"{first.span.line if first.span else '?'}) while both are live: {ins.op} at line "
        f"{ins.loc.line if ins.loc else '?'} writes '{written.name}' before '{other.name}' is read again",
        span, hint="give the tiles disjoint addresses, or reuse the memory only after the other tile's last read")
