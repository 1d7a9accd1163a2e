"""Attributes and subscripts of parser values: ``x.shape``, ``tile.with_valid``, ``group.next()``, ``group[i]``."""
from __future__ import annotations

from pypto.ir.block import CoreType

from .errors import ParseError
from .parser import Intrinsic, is_runtime
from .values import TensorValue, TileGroup, TileValue


def attribute(parser, obj, attr: str, node, frame):
    if isinstance(obj, TensorValue):
        table = {"shape": lambda: tuple(obj.shape), "dtype": lambda: obj.dtype, "ndim": lambda: obj.ndim,
                 "name": lambda: obj.param}
    elif isinstance(obj, TileValue):
        table = {"shape": lambda: tuple(obj.shape), "dtype": lambda: obj.dtype, "type": lambda: obj.slot.ttype,
                 "valid_shape": lambda: tuple(parser.valid_of(obj)), "target_memory": lambda: obj.space,
                 "with_valid": lambda: Intrinsic(_with_valid, obj, "tile.with_valid")}
    elif isinstance(obj, TileGroup):
        table = {"next": lambda: Intrinsic(_next, obj, f"{obj.name}.next"),
                 "current": lambda: Intrinsic(_current, obj, f"{obj.name}.current"),
                 "previous": lambda: Intrinsic(_previous, obj, f"{obj.name}.previous"),
                 "at": lambda: Intrinsic(_at, obj, f"{obj.name}.at"),
                 "take": lambda: Intrinsic(_relative(True), obj, f"{obj.name}.take"),
                 "peek": lambda: Intrinsic(_relative(False), obj, f"{obj.name}.peek"),
                 "depth": lambda: obj.depth, "type": lambda: obj.ttype}
    else:
        try:
            return getattr(obj, attr)
        except AttributeError:
            raise ParseError(f"{type(obj).__name__} has no attribute '{attr}'", frame.span(node)) from None
    if attr not in table:
        raise ParseError(f"{type(obj).__name__.replace('Value', '').lower()} has no attribute '{attr}'",
                         frame.span(node), hint="available: " + ", ".join(sorted(table)))
    return table[attr]()


def subscript(parser, obj, idx, node, frame):
    if isinstance(obj, TileGroup):
        if is_runtime(idx) or not isinstance(idx, int):
            raise ParseError("a tile group is indexed by a compile-time int (slots are static)", frame.span(node),
                             hint="inside pl.range, use group.next(): the loop is unrolled so each slot is static")
        if not -obj.depth <= idx < obj.depth:
            raise ParseError(f"tile group {obj.name} has {obj.depth} slots; index {idx} is out of range",
                             frame.span(node))
        return slot_value(parser, obj, idx % obj.depth, acquire=True, node=node, frame=frame)
    if is_runtime(idx):
        raise ParseError("only compile-time values can be indexed by a run-time scalar", frame.span(node))
    try:
        return obj[idx]
    except Exception as e:
        raise ParseError(f"cannot index {type(obj).__name__}: {e}", frame.span(node)) from None


# --------------------------------------------------------------------------- tile groups
def _section_core(parser, call) -> CoreType:
    if parser.section is None:
        raise call.error(f"{call.name}() advances a per-section cursor and must be inside a section")
    return parser.section.core


def slot_value(parser, group: TileGroup, index: int, acquire: bool, node=None, frame=None, call=None):
    slot = group.slots[index]
    if group.workspace is None:
        return TileValue(slot)
    core = parser.section.core if parser.section is not None else None
    key = (group.uid, core, index)
    uses = parser.__dict__.setdefault("_ws_use_of", {})
    if acquire:
        parser.ws_acquired.append(key)
    elif call is not None:
        _note_reference(call, slot, key, uses.get(key))
    if acquire or key not in uses:
        parser.ws_uses += 1
        uses[key] = (parser.ws_uses, parser.section.current if parser.section is not None else None)
    ws = group.workspace
    from pypto.ir.block import BLOCK_IDX
    rows = group.ttype.shape[0]
    base = (BLOCK_IDX * ws.rows_per_block + index * rows, 0)
    return TensorValue(ws.param, ws.dtype, tuple(group.ttype.shape), base, slot, uses[key])


def _note_reference(call, slot, key, use) -> None:
    """A reference that does not acquire (current/previous/at/peek) inside a run-time loop, to a use of the
    slot acquired before the loop's body: if the loop acquires the same slot again, from the second
    iteration on the reference means another iteration's acquisition (loops.check_workspace_references)."""
    for scope in call.frame.loops:
        if scope.ws_refs is not None and (use is None or use[0] <= scope.ws_start):
            scope.ws_refs.append((key, slot, call))


def _next(parser, call, group: TileGroup):
    call.bind([], f"{group.name}.next()")
    _section_core(parser, call)
    cur = parser.cursor(group)
    cur.pos = (cur.pos + 1) % group.depth
    cur.known = True
    return slot_value(parser, group, cur.pos, acquire=True)


def _previous_slot(parser, call, group: TileGroup, back: int):
    _section_core(parser, call)
    cur = parser.cursor(group)
    if cur.pos < 0:
        raise call.error(f"{group.name} has no current slot yet: call {group.name}.next() first")
    if not cur.known:
        raise call.error(f"the current slot of {group.name} depends on a run-time trip count or branch here",
                         hint=f"call {group.name}.next() again, or index the slot explicitly: {group.name}[i]")
    return slot_value(parser, group, (cur.pos - back) % group.depth, acquire=False, call=call)


def _current(parser, call, group):
    call.bind([], f"{group.name}.current()")
    return _previous_slot(parser, call, group, 0)


def _previous(parser, call, group):
    b = call.bind([("k", 1)], f"{group.name}.previous(k=1)")
    k = b["k"]
    if not isinstance(k, int) or k < 0:
        raise call.error("previous(k) takes a compile-time int k >= 0", at=0)
    return _previous_slot(parser, call, group, k)


def _at(parser, call, group):
    """group.at(i): slot i as it is now (no acquisition, the cursor does not move)."""
    b = call.bind(["index"], f"{group.name}.at(i)")
    i = b["index"]
    if not isinstance(i, int) or isinstance(i, bool) or not -group.depth <= i < group.depth:
        raise call.error(f"{group.name}.at(i) takes a compile-time slot index in 0..{group.depth - 1}", at=0)
    _section_core(parser, call)
    return slot_value(parser, group, i % group.depth, acquire=False, call=call)


def _relative(acquire: bool):
    """group.take(k) / group.peek(k): the slot k steps after the current one (k may be negative),
    acquired (as next() would) or merely referred to (as current() does); the cursor does not move.
    Software pipelining rewrites next()/current()/previous() into these."""
    def handler(parser, call, group):
        name = "take" if acquire else "peek"
        b = call.bind(["k"], f"{group.name}.{name}(k)")
        k = b["k"]
        if not isinstance(k, int) or isinstance(k, bool):
            raise call.error(f"{group.name}.{name}(k) takes a compile-time int", at=0)
        _section_core(parser, call)
        if getattr(call.node, "_pl_stage_slot", False) and parser.stage_slots is not None:
            return parser.stage_slots.tile(parser, call, group, k, acquire)   # a stage's slot, chosen per copy
        cur = parser.cursor(group)
        return slot_value(parser, group, (cur.pos + k) % group.depth, acquire=acquire, call=call)
    return handler


def _with_valid(parser, call, tile: TileValue):
    b = call.bind(["rows", ("cols", None)], "tile.with_valid(rows, cols) or tile.with_valid([rows, cols])")
    rows, cols = b["rows"], b["cols"]
    if cols is None:
        if not isinstance(rows, (list, tuple)) or len(rows) != 2:
            raise call.error("with_valid takes (rows, cols)")
        rows, cols = rows
    for v, at in ((rows, 0), (cols, 1)):
        if isinstance(v, int) and not 0 < v:
            raise call.error(f"a valid extent must be positive, found {v}", at=at)
    for v, lim, at in ((rows, tile.shape[0], 0), (cols, tile.shape[1], 1)):
        if isinstance(v, int) and v > lim:
            raise call.error(f"valid extent {v} exceeds the tile's {lim}", at=at)
    return tile.with_valid((rows, cols))
