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
A GM workspace group's placeholder (a cube <-> vector handoff slot) is a box whose row offset holds a
slot-index symbol (marked ``slots={symbol: (slot index of iteration 0, ...)}``) and whose handoff
buffer the pass swaps per copy (``handoffs={placeholder buffer: (slot buffers)}``); the pass homes each
copy's use where the copy lands and numbers the uses in program order, after the section's earlier ones.
"""
from __future__ import annotations

from dataclasses import replace

from pypto import symbolic
from pypto.ir.block import BLOCK_IDX, Block, For, Instr, walk, walk_instrs
from pypto.ir.block_printer import print_block
from pypto.passes.cross_core import HANDOFF, HandoffAccess
from pypto.passes.software_pipeline import ALL, software_pipeline

from .parser import LoopScope, carried_names, norm, poison_loop_locals
from .cross_core import handoff_attrs
from .values import Slot, TensorValue, TileValue


class StageSlots:
    """The slot placeholders of one pipelined loop: (group uid, offset mod depth) -> placeholder Slot.
    A GM workspace group's placeholder is a box at row ``BLOCK_IDX * rows_per_block + _ws_<g>_at<r> *
    rows`` whose symbol the pass replaces by the copy's slot index, its handoff buffer by the slot's."""

    def __init__(self, groups: dict):
        self.groups = groups
        self.slots: dict = {}
        self.symbols: dict = {}       # key -> the slot-index symbol of a workspace placeholder
        self.uses: dict = {}          # key -> (use id, home) of its acquisition in this body

    def tile(self, parser, call, group, offset: int, acquire: bool):
        key = (group.uid, offset % group.depth)
        slot = self.slots.get(key)
        if slot is None:
            ws = group.workspace is not None
            slot = self.slots[key] = Slot(f"{group.name}_at{key[1]}", group.ttype, None, None, group.span,
                                          group if ws else None)
            if ws:
                self.symbols[key] = symbolic.index_symbol(f"_ws_{group.name}_at{key[1]}")
        if group.workspace is None:
            return TileValue(slot)
        if acquire:
            parser.ws_uses += 1
            self.uses[key] = (parser.ws_uses, parser.section.current)
        elif key not in self.uses:
            raise call.error(f"{group.name}: a pipelined stage refers to a workspace slot acquired in another "
                             "iteration", hint=f"acquire the slot with {group.name}.next() in the stage that uses it")
        ws = group.workspace
        rows = group.ttype.shape[0]
        base = (BLOCK_IDX * ws.rows_per_block + self.symbols[key] * rows, 0)
        return TensorValue(ws.param, ws.dtype, tuple(group.ttype.shape), base, slot, self.uses[key])


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

    slot_names, indices, handoffs = {}, {}, {}
    for (uid, r), ph in placeholders.slots.items():
        g = groups[uid]
        chosen = [(entry[uid] + k * total[uid] + r) % g.depth for k in range(period)]
        if g.workspace is None:
            slot_names[ph.uid] = tuple(sec.decl(TileValue(g.slots[i])) for i in chosen)
            continue
        indices[placeholders.symbols[(uid, r)]] = tuple(chosen)
        handoffs[_buffer(ph)] = tuple(_buffer(g.slots[i]) for i in chosen)
    slots = {d: slot_names[sec.slot_of[d].uid] for d in sec.tiles
             if sec.slot_of.get(d) is not None and sec.slot_of[d].uid in slot_names}
    marks = {"unroll": period, "skew": tuple(s * n_pre for s in range(len(stages))),
             "tail": "peel" if _static_trip(bounds) else "guard", "rename": False, "slots": {**slots, **indices}}
    if handoffs:
        marks["handoffs"] = handoffs
    loop = For(var, start, stop, step, body, marks, loc=span.loc)
    pipelined = _pipeline(parser, sec, loop, placeholders)
    _number_uses(parser, pipelined, sec.current)
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
    shown = {k: ({b.name: tuple(x.name for x in v) for b, v in a.items()} if k == "handoffs" else a)
             for k, a in loop.attrs.items()}              # handoff buffers by name
    parser.marked_loops.append(print_block(replace(block, body=[replace(loop, attrs=shown)])))
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


def _buffer(slot):
    """The handoff buffer of a workspace slot, as handoff_attrs marks its accesses."""
    return handoff_attrs(TensorValue("", None, (), None, slot, (0, None)))[HANDOFF].buffer


def _number_uses(parser, stmts: list, home: list) -> None:
    """The pass numbered the loop's handoff uses from 0 in program order: they follow the section's
    uses so far; a use homed in the pass's top-level list is homed where the statements are emitted."""
    new: dict = {}
    top = {id(s) for s in stmts}
    for s in stmts:
        for ins in walk_instrs([s]):
            m = ins.attrs.get(HANDOFF)
            if m is None:
                continue
            if id(m) not in new:
                rehome = m.home is not None and any(id(x) in top for x in m.home) and m.home is not home
                new[id(m)] = HandoffAccess(m.buffer, parser.ws_uses + 1 + m.use, home if rehome else m.home)
            ins.attrs[HANDOFF] = new[id(m)]
    if new:
        parser.ws_uses = max(m.use for m in new.values())


def _mark_stage(stmt, mark) -> None:
    for s in walk([stmt]):
        if isinstance(s, (Instr, For)):
            s.attrs["stage"] = mark


def _static_trip(bounds) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)


__all__ = ["lower_marked", "StageSlots"]
