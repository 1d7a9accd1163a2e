"""A ``pl.stage`` loop lowered once to a marked Block IR loop, pipelined by the shared pass
``pypto.passes.software_pipeline``.

The body is parsed once, with the loop variable j: the statements before the first stage carry the
mark ``stage=all`` (every stage instance runs them), stage s's instructions ``stage=s``. A tile-group
cursor call of a stage (``next()`` / ``current()`` / ``previous(k)``) becomes a *slot placeholder*: a
tile standing for the group's slot at offset r from the iteration's first slot (``pipeline._Rewrite``
counts the offsets, one placeholder per (group, r mod depth)). The loop is marked

    unroll = P (the groups' period), skew = (0, N, 2N, ...), tail = guard (peel for a compile-time
    trip count), rename = False (the user's tiles), slots = {placeholder: (slot of iteration 0, ...)}

where iteration k uses the group's slot ``(c0 + k*A + r) mod depth`` (c0: the cursor before the loop,
A: the slots an iteration advances). The pass builds the prologue, the steady state and drain (guarded
copies) and the epilogue, choosing each copy's slots; the marked loop is what ``NN_pipeline/`` shows.

Not yet lowered here (``pipeline.py``'s source rewrite still does these): loops whose stages advance a
GM workspace group (a cube <-> vector handoff slot per copy, e.g. examples/pro/flash_attention.py).
"""
from __future__ import annotations

import ast

import sympy

from pypto import symbolic
from pypto.ir.block import Block, For, If, Instr, walk
from pypto.ir.block_printer import print_block
from pypto.passes.software_pipeline import ALL, software_pipeline

from .parser import LoopScope, carried_names, norm, poison_loop_locals
from .values import Slot, TileValue


def lowers_by_marks(groups: dict, step) -> bool:
    """Whether the shared pass can pipeline a loop whose stages advance ``groups`` (uid -> TileGroup)."""
    return isinstance(step, int) and all(g.workspace is None for g in groups.values())


class StageSlots:
    """The slot placeholders of one pipelined loop: (group uid, offset mod depth) -> placeholder Slot."""

    def __init__(self, groups: dict):
        self.groups = groups
        self.slots: dict = {}

    def tile(self, group, offset: int) -> TileValue:
        key = (group.uid, offset % group.depth)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = Slot(f"{group.name}_at{key[1]}", group.ttype, None, None, group.span)
        return TileValue(slot)


def lower_marked(parser, node, frame, bounds, var, preamble, stages, rewrite, groups, total, period, n_pre):
    """Parse the loop's body once into a marked For and pipeline it with the shared pass.
    ``rewrite(s)``: stage s's statements with their cursor calls as offsets (pipeline._Rewrite)."""
    from .loops import check_workspace_references
    sec = parser.require_section(frame, node, "a pl.range loop")
    start, stop, step = bounds
    name = node.target.id
    span = frame.span(node)
    entry = {u: parser.cursor(g).pos for u, g in groups.items()}
    placeholders = StageSlots(groups)

    hi = norm(stop - 1) if isinstance(step, int) else stop - 1
    parser.loop_ranges[var] = (start, hi)
    scope = LoopScope(set(frame.env), var, span, carried=carried_names(node.body), ws_refs=[],
                      ws_start=parser.ws_uses)
    acquired_before = len(parser.ws_acquired)
    scope.bound_inside.add(name)
    frame.loops.append(scope)
    frame.rt_depth += 1
    frame.env[name] = var
    outer_slots, parser.stage_slots = parser.stage_slots, placeholders
    body = sec.push()
    try:
        for mark, stmts in [(ALL, preamble)] + [(s, rewrite(s)) for s in range(len(stages))]:
            first = len(body)
            parser.exec_body(stmts, frame)
            for stmt in body[first:]:
                _mark_stage(stmt, mark)
    finally:
        parser.stage_slots = outer_slots
        sec.pop()
        frame.rt_depth -= 1
        frame.loops.pop()
        parser.loop_ranges.pop(var, None)
    check_workspace_references(scope, parser.ws_acquired[acquired_before:])

    slot_names = {}
    for (uid, r), ph in placeholders.slots.items():
        g = groups[uid]
        slot_names[ph.uid] = tuple(sec.decl(TileValue(g.slots[(entry[uid] + k * total[uid] + r) % g.depth]))
                                   for k in range(period))
    marks = {"unroll": period, "skew": tuple(s * n_pre for s in range(len(stages))),
             "tail": "peel" if _static_trip(bounds) else "guard", "rename": False,
             "slots": {d: slot_names[sec.slot_of[d].uid] for d in sec.tiles
                       if sec.slot_of.get(d) is not None and sec.slot_of[d].uid in slot_names}}
    loop = For(var, start, stop, step, body, marks, loc=span.loc)
    pipelined = _pipeline(parser, sec, loop, placeholders)
    for stmt in pipelined:
        parser.remember(stmt)
        if isinstance(stmt, For):
            for s in stmt.body:                  # one copy group, as the rewrite's loop had (pipe sync)
                parser.remember(s)
                parser.copy_of[id(s)] = ("copy", 0)
        sec.emit(stmt)

    for u in groups:                  # the iteration count decides where the cursors would be
        for key, cur in parser.cursors.items():
            if key[0] == u:
                cur.known = False
    frame.env[name] = var
    poison_loop_locals(frame, scope, var, span)
    ph_uids = {ph.uid for ph in placeholders.slots.values()}
    for uid, valid in list(parser.valid_facts.items()):
        if uid in ph_uids or var in symbolic.free_symbols(*valid):
            del parser.valid_facts[uid]


def _pipeline(parser, sec, loop: For, placeholders: StageSlots) -> list:
    """The shared pass on the marked loop; the section's declarations follow (the slots' versions added,
    the placeholders gone)."""
    block = Block(sec.name, sec.core, [], [], list(sec.tiles.values()), [loop], loc=loop.loc)
    parser.marked_loops.append(print_block(block))
    software_pipeline(block)
    ph_uids = {ph.uid for ph in placeholders.slots.values()}
    slot_of = dict(sec.slot_of)
    by_buffer = {sec.tiles[d].buffer_name: s for d, s in slot_of.items() if d in sec.tiles}
    sec.tiles = {t.name: t for t in block.tiles}
    for d in [d for d, s in slot_of.items() if s.uid in ph_uids or d not in sec.tiles]:
        sec.forget(d)
    for t in block.tiles:                  # a slot's versions (tails) are that slot's declarations
        if t.name not in sec.slot_of and t.buffer_name in by_buffer:
            sec.slot_of[t.name] = by_buffer[t.buffer_name]
    return block.body


def _mark_stage(stmt, mark) -> None:
    for s in walk([stmt]):
        if isinstance(s, (Instr, For)):
            s.attrs["stage"] = mark


def _static_trip(bounds) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)


__all__ = ["lowers_by_marks", "lower_marked", "StageSlots"]
