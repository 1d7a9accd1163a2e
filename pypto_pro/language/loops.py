"""``for i in pl.range(...)``: a Block IR ``For`` with run-time bounds.

Tile groups advanced inside the body make the slot of an iteration depend on the iteration count.
The loop is unrolled by the groups' period P (the smallest P after which every cursor is back where
it started), so each body copy uses static slots — what hand-written double-buffered code does.
Copies after the first are guarded by ``if i + u*step < stop`` unless the trip count is a known
multiple of P. After a loop with a run-time trip count the cursor position is data-dependent:
``current()`` / ``previous()`` need a fresh ``next()`` first.
"""
from __future__ import annotations

import ast
import math

import sympy

from pypto import symbolic
from pypto.ir.block import For, If

from .control import range_bounds
from .errors import ParseError
from .parser import MAX_UNROLL, Call, LoopScope, carried_names, norm, poison_loop_locals


def runtime_loop(parser, node, frame) -> None:
    sec = parser.require_section(frame, node, "a pl.range loop")
    it = node.iter
    args = [parser.ev(a, frame) for a in it.args]
    kwargs = {k.arg: parser.ev(k.value, frame) for k in it.keywords}
    call = Call(parser, frame, it, args, kwargs, list(it.args), {k.arg: k.value for k in it.keywords}, "pl.range")
    start, stop, step = range_bounds(call)
    if not isinstance(node.target, ast.Name):
        raise ParseError("a pl.range loop variable is one plain name", frame.span(node.target))
    name = node.target.id
    var = parser.new_loop_var(name)
    span = frame.span(node)

    if parser.pipeline is not None:
        from .pipeline import pipelined_loop
        if pipelined_loop(parser, node, frame, (start, stop, step), var):
            return

    period, deltas, written = _period(parser, node, frame, name, var, step)
    trip = _static_trip(start, stop, step)
    guarded = period > 1 and not (trip is not None and trip % period == 0)

    # a slot the body writes holds, at the top of the body, what the previous iteration left there
    for uid in written:
        parser.valid_facts.pop(uid, None)
    entry = parser.state()
    hi = norm(stop - 1) if isinstance(step, int) else stop - 1
    parser.loop_ranges[var] = (start, hi)
    scope = LoopScope(set(frame.env), var, span, carried=carried_names(node.body),
                      ws_refs=[], ws_start=parser.ws_uses)
    acquired_before = len(parser.ws_acquired)
    scope.bound_inside.add(name)
    frame.loops.append(scope)
    frame.rt_depth += 1
    body = sec.push()
    try:
        for u in range(period):
            value = norm(var + u * step) if u else var
            frame.env[name] = value
            # copy u runs only while var + u*step < stop: what lets tails be proven full
            parser.loop_ranges[var] = (start, norm(hi - u * step))
            first = len(body)
            if u and guarded:
                sec.push()
                parser.exec_body(node.body, frame)
                sec.emit(If(sympy.Lt(value, stop), sec.pop(), loc=span.loc))
            else:
                parser.exec_body(node.body, frame)
            for stmt in body[first:]:
                parser.remember(stmt)
                parser.copy_of[id(stmt)] = ("copy", u)
    finally:
        sec.pop()
        frame.rt_depth -= 1
        frame.loops.pop()
        parser.loop_ranges.pop(var, None)
    check_workspace_references(scope, parser.ws_acquired[acquired_before:])
    attrs = {"pipeline": period} if period > 1 else {}      # the body holds the copies (no pass mark)
    loop = For(var, start, stop, norm(step * period), body, attrs, loc=span.loc)
    parser.remember(loop)
    parser.loop_src[id(loop)] = id(node)
    sec.emit(loop)
    _cursors_after(parser, entry, deltas, trip)
    frame.env[name] = var
    poison_loop_locals(frame, scope, var, span)
    for uid, valid in list(parser.valid_facts.items()):
        if var in symbolic.free_symbols(*valid):
            del parser.valid_facts[uid]


def check_workspace_references(scope: LoopScope, acquired: list) -> None:
    """A workspace slot the body refers to (current/previous/at/peek) through a use acquired before the
    body, while some copy of the body acquires that slot again: from the second iteration on, the
    reference would mean the slot as an earlier iteration acquired it, and the cross-core flags bracket a
    use only inside the statement list where it was acquired (cross_core). Refused."""
    acquired = set(acquired)
    for key, slot, call in scope.ws_refs:
        if key in acquired:
            raise call.error(f"workspace slot {slot.name} is used outside the statement list where it was "
                             "acquired: this loop acquires the slot again, so here it would be the one an "
                             "earlier iteration (or the code before the loop) acquired",
                             hint="acquire the slot with next() in the iteration that uses it; to keep data "
                                  "for a later iteration, copy it into an on-chip tile")


def _static_trip(start, stop, step):
    if all(isinstance(v, int) for v in (start, stop, step)):
        return max(0, -(-(stop - start) // step))
    return None


def _period(parser, node, frame, name, var, step) -> tuple:
    """Parse the body once into a scratch list to see how far each tile-group cursor moves per iteration."""
    sec = parser.section
    snap = (parser.state(), sec.snapshot(), dict(frame.env), len(parser.slots), len(parser.groups),
            len(parser.workspaces), parser.ws_uses, set(parser.var_names), dict(getattr(parser, "_ws_use_of", {})),
            len(parser.marked_loops))
    before = {k: c.pos for k, c in parser.cursors.items()}
    acquired_before = len(parser.ws_acquired)
    written_before = set(parser.written_slots)
    parser.written_slots = set()
    scope = LoopScope(set(frame.env), var, frame.span(node), carried=carried_names(node.body))
    scope.bound_inside.add(name)
    frame.loops.append(scope)
    frame.rt_depth += 1
    frame.env[name] = var
    sec.push()
    try:
        parser.exec_body(node.body, frame)
    finally:
        sec.pop()
        frame.rt_depth -= 1
        frame.loops.pop()
    after = {k: c.pos for k, c in parser.cursors.items()}
    del parser.ws_acquired[acquired_before:]          # the real parse acquires again
    written = parser.written_slots
    parser.written_slots = written_before | written
    period, deltas = 1, {}
    groups = {g.uid: g for g in parser.groups}
    for key, pos in after.items():
        g = groups.get(key[0])
        if g is None:
            continue
        delta = deltas[key] = (pos - before.get(key, -1)) % g.depth
        period = math.lcm(period, g.depth // math.gcd(delta, g.depth))
    parser.restore(snap[0])
    sec.restore(snap[1])
    frame.env = snap[2]
    del parser.slots[snap[3]:]
    del parser.groups[snap[4]:]
    del parser.workspaces[snap[5]:]
    parser.ws_uses = snap[6]
    parser.var_names = snap[7]
    parser._ws_use_of = snap[8]
    del parser.marked_loops[snap[9]:]
    if period > MAX_UNROLL:
        raise ParseError(f"the tile groups advanced in this loop repeat only every {period} iterations; unrolling "
                         f"by more than {MAX_UNROLL} is refused", frame.span(node),
                         hint="give the groups depths that divide each other (e.g. all 2 or 4)")
    return period, deltas, written


def _cursors_after(parser, entry, deltas: dict, trip) -> None:
    """Cursor positions after the loop: exact when the trip count is static, else back to the entry
    position and marked unknown wherever the body moved the cursor."""
    before = entry[0]
    depth_of = {g.uid: g.depth for g in parser.groups}
    for key, cur in parser.cursors.items():
        b = before.get(key)
        if b is not None and cur.pos == b.pos and cur.known == b.known:
            continue
        if trip is not None and b is not None and key in deltas:
            if trip:
                cur.pos, cur.known = (b.pos + trip * deltas[key]) % depth_of[key[0]], True
            else:
                cur.pos, cur.known = b.pos, b.known
        elif b is not None:
            cur.pos, cur.known = b.pos, False
        else:
            cur.pos, cur.known = -1, False

