"""Tile placement: ``pl.make_tile`` and ``pl.make_tile_group`` (user addresses, checked against the machine
where they are written), GM workspace groups (cube <-> vector handoff buffers the launcher allocates per
cluster), and the check of a whole section's addresses by the shared memory pass (pypto.passes.memory:
no two live tiles sharing bytes, the scratch tiles of reductions / select / transpose placed)."""
from __future__ import annotations

from pypto import errors
from pypto.passes.memory import check_addresses, placement_problem

from .dsl import dsl
from .errors import MemoryPlanError, Span
from .types import MemorySpace, TileType
from .values import Slot, TileGroup, TileValue, Workspace


def _align_up(n: int, a: int) -> int:
    return -(-n // a) * a


def check_placement(parser, call, name: str, ttype: TileType, addr, at) -> None:
    space = ttype.target_memory.ir_space
    problem = placement_problem(space, addr, ttype.nbytes, parser.machine)
    if problem is None:
        return
    kind, why = problem
    if kind == "capacity":
        raise call.error(f"tile '{name}' ({ttype.shape[0]}x{ttype.shape[1]} {ttype.dtype.name}, {ttype.nbytes} bytes) "
                         f"{why}", cls=MemoryPlanError, hint="use a smaller tile or a lower address")
    raise call.error(f"tile '{name}' {why}", cls=MemoryPlanError, at=at)


def check_user_addresses(block, section, machine) -> None:
    """The shared memory pass's check of one section's Block (user addresses), errors at the user's lines."""
    slots = {}
    for decl, slot in section.slot_of.items():
        slots.setdefault(block.tile(decl).buffer_name, slot)
    tile_loc = {b: s.span.loc for b, s in slots.items() if s.span is not None}
    groups = {b: id(s.group) for b, s in slots.items() if s.group is not None}
    try:
        check_addresses(block, machine, tile_loc=tile_loc, groups=groups, names={b: s.name for b, s in slots.items()})
    except errors.MemoryPlanError as e:
        pair = getattr(e, "tiles", None)            # (earlier, later) declaration of two overlapping tiles
        if pair:
            span = slots[pair[1]].span
        else:
            span = Span(e.loc.file, e.loc.line, (e.loc.col or 1) - 1, None, e.loc.func) if e.loc else None
        raise MemoryPlanError(e.message, span, e.hint) from None


def _tile_type(call, v):
    if not isinstance(v, TileType):
        raise call.error(f"expected a pl.TileType, found {type(v).__name__}", at=0 if call.args else "type")
    return v


@dsl("make_tile", "make_tile(type, addr, valid_shape=None, mutex_id=None): one buffer at a fixed address.")
def make_tile(parser, call):
    b = call.bind(["type", "addr", ("valid_shape", None), ("mutex_id", None), ("name", None)],
                  "pl.make_tile(type, addr, valid_shape=None, mutex_id=None)")
    ttype = _tile_type(call, b["type"])
    if ttype.target_memory == MemorySpace.GM:
        raise call.error("a GM tile is a workspace slot: use pl.make_tile_group(type, depth=N) with a GM tile type")
    name = b["name"] or parser.name_hint or f"tile{len(parser.slots)}"
    at = 1 if len(call.args) > 1 else "addr"
    check_placement(parser, call, name, ttype, b["addr"], at)
    slot = Slot(name, ttype, b["addr"], b["mutex_id"], call.span)
    parser.slots.append(slot)
    valid = b["valid_shape"]
    return TileValue(slot, tuple(valid) if valid is not None else None)


@dsl("make_tile_group", "make_tile_group(type, addrs, mutex_ids=None, depth=None): N buffers used round-robin.")
def make_tile_group(parser, call):
    b = call.bind(["type", ("addrs", None), ("mutex_ids", None), ("depth", None), ("name", None)],
                  "pl.make_tile_group(type, addrs, mutex_ids=[...]) or (type, addrs=[a0, a1, ...])")
    ttype = _tile_type(call, b["type"])
    name = b["name"] or parser.name_hint or f"group{len(parser.groups)}"
    addrs, mutex_ids, depth = b["addrs"], b["mutex_ids"], b["depth"]
    if mutex_ids is not None and not isinstance(mutex_ids, (list, tuple)):
        raise call.error("mutex_ids is a list with one id per slot", at=call.where("mutex_ids") or 2)
    n = depth or (len(mutex_ids) if mutex_ids is not None else (len(addrs) if isinstance(addrs, (list, tuple))
                                                                 else 2))
    if mutex_ids is not None and len(mutex_ids) != n:
        raise call.error(f"{len(mutex_ids)} mutex ids for {n} slots", at=call.where("mutex_ids") or 2)
    if ttype.target_memory == MemorySpace.GM:
        return _workspace_group(parser, call, name, ttype, n, mutex_ids)
    if addrs is None:
        raise call.error("make_tile_group needs addrs: one base address (slots follow at the tile size) or a list")
    if isinstance(addrs, (list, tuple)):
        if len(addrs) != n:
            raise call.error(f"{len(addrs)} addresses for {n} slots", at=1)
        slot_addrs = list(addrs)
    else:
        stride = _align_up(ttype.nbytes, parser.machine.alignment)
        slot_addrs = [addrs + i * stride if isinstance(addrs, int) else addrs for i in range(n)]
    group = TileGroup(name, ttype, [], call.span)
    at = 1 if len(call.args) > 1 else "addrs"
    for i, a in enumerate(slot_addrs):
        sname = f"{name}{i}"
        check_placement(parser, call, sname, ttype, a, at)
        slot = Slot(sname, ttype, a, mutex_ids[i] if mutex_ids else None, call.span, group, i)
        group.slots.append(slot)
        parser.slots.append(slot)
    parser.groups.append(group)
    return group


def _workspace_group(parser, call, name, ttype, depth, mutex_ids):
    rows, cols = ttype.shape
    ws = Workspace(f"ws_{name}", ttype.dtype, rows * depth, cols)
    group = TileGroup(name, ttype, [], call.span, ws)
    for i in range(depth):
        group.slots.append(Slot(f"{name}{i}", ttype, None, mutex_ids[i] if mutex_ids else None, call.span, group, i))
    parser.groups.append(group)
    parser.workspaces.append(ws)
    return group
