"""On-chip cube <-> vector handoffs (a5): which handoff buffers become TPUSH / TPOP, and where their FIFOs go.

On a machine whose cube and vector cores exchange tiles on chip (``MachineSpec.on_chip_handoff``), a handoff
buffer (passes/cross_core.py) whose writer pushes straight into the reader's buffer — cube L0C -> vector UB
(C2V, the fixpipe) or vector UB -> cube L1 (V2C) — is a FIFO of ``depth`` slots in the reader's buffer: its
TSTOREs become TPUSH and its TLOADs TPOP (same operands: the GM region still names the slot, the backing store
the simulator and the cpu backend move the bytes through; the simulator charges the on-chip path, not GM).

Capacity: a FIFO takes ``depth x slot`` bytes (a slot: the tiles one use of the reader loads) above the
highest byte the reader's memory plan uses in that buffer, rounded to the machine's alignment. pto-isa's
consumer tile *is* a slot (TASSIGN); pypto's reader keeps its own tile, so the count is conservative by one
slot. Buffers are placed in the order they come; one that does not fit, or any access the on-chip path does
not serve (a transposing load, a converting vector store, other memory spaces), keeps its GM handoff. The
choice is returned for the kernel's decisions (the report).
"""
from __future__ import annotations

from ..ir.block import CoreType
from ..ir.isa import MemSpace

PATHS = {("w", CoreType.AIC, MemSpace.L0C): "c2v", ("r", CoreType.AIV, MemSpace.UB): "c2v",
         ("w", CoreType.AIV, MemSpace.UB): "v2c", ("r", CoreType.AIC, MemSpace.L1): "v2c"}
PUSH_POP = {"TSTORE": "TPUSH", "TLOAD": "TPOP"}


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _path(buf, accs_by_core: dict, blocks_by_core: dict, roles: dict) -> str | None:
    """"c2v" / "v2c" when every access of ``buf`` fits the on-chip path, else None."""
    paths = set()
    for core, accs in accs_by_core.items():
        block = blocks_by_core[core]
        for a in accs:
            ins = a.instr
            tile = block.tile(ins.operands[1] if ins.op == "TSTORE" else ins.operands[0])
            gm = block.gm(next(o for o in ins.operands if hasattr(o, "param")).param)
            if ins.attrs.get("trans") or (core == CoreType.AIV and ins.op == "TSTORE" and tile.dtype != gm.dtype):
                return None
            paths.add(PATHS.get((roles[buf][core], core, tile.space)))
    return paths.pop() if len(paths) == 1 and None not in paths else None


def _slot_bytes(reader_block, reader_accs: list) -> int:
    per_use: dict = {}
    for a in reader_accs:
        t = reader_block.tile(a.instr.operands[0])
        per_use[a.mark.use] = per_use.get(a.mark.use, 0) + t.nbytes
    return max(per_use.values())


def _top(block, space) -> int | None:
    """The first byte above every tile of ``block`` in ``space`` (None when a tile has no address yet)."""
    top = 0
    for t in block.tiles:
        if t.space == space:
            if t.addr is None:
                return None
            top = max(top, t.addr + t.nbytes)
    return top


def plan_on_chip(blocks: list, accesses: dict, roles: dict, shared: list, machine) -> dict:
    """buffer -> {"path", "space", "addr", "bytes", "depth"} for the buffers that go on chip (empty when the
    machine has no on-chip path); their accesses are rewritten to TPUSH / TPOP."""
    if not machine.on_chip_handoff:
        return {}
    by_core = {b.core: b for b in blocks}
    tops: dict = {}
    out: dict = {}
    for buf in shared:
        accs = {b.core: [a for a in accesses[b.name] if a.mark.buffer == buf] for b in blocks}
        path = _path(buf, accs, by_core, roles)
        if path is None:
            continue
        reader = next(c for c, r in roles[buf].items() if r == "r")
        block = by_core[reader]
        space = MemSpace.UB if path == "c2v" else MemSpace.L1
        key = (reader, space)
        if key not in tops:
            tops[key] = _top(block, space)
        if tops[key] is None:
            continue
        base = _align(tops[key], machine.alignment)
        nbytes = buf.depth * _align(_slot_bytes(block, accs[reader]), machine.alignment)
        if base + nbytes > machine.capacity[space.capacity_key]:
            continue
        tops[key] = base + nbytes
        out[buf] = {"path": path, "space": str(space), "addr": base, "bytes": nbytes, "depth": buf.depth}
        for core_accs in accs.values():
            for a in core_accs:
                a.instr.op = PUSH_POP[a.instr.op]
    return out
