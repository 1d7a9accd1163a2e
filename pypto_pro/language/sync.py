"""Professional mode's automatic synchronisation: the resources of a parsed section (tile slots;
slots whose bytes overlap or that share a mutex id are one resource; each GM tensor is one) fed to
the ownership-based pass ``pypto.passes.pipe_sync``, then cross-core flags and event ids."""
from __future__ import annotations

from pypto.errors import SyncError as _PassSyncError
from pypto.ir.block import Instr
from pypto.passes.event_alloc import allocate_events
from pypto.passes.pipe_sync import PipeSync, Seq, UnionFind

from .errors import SyncError


def resource_map(section):
    """decl name -> resource key: overlapping slots, and slots sharing a mutex id, are one resource."""
    slots = {s.uid: s for s in section.slot_of.values()}
    uf = UnionFind()
    items = sorted(slots.values(), key=lambda s: (str(s.space), s.addr if s.addr is not None else -1))
    for i, a in enumerate(items):
        uf.find(a.uid)
        for b in items[i + 1:]:
            if a.space != b.space or a.addr is None or b.addr is None or b.addr >= a.addr + a.nbytes:
                break
            uf.union(a.uid, b.uid)
    by_mutex = {}
    for s in items:
        if s.mutex_id is not None:
            key = (str(s.space), s.mutex_id)
            if key in by_mutex:
                uf.union(s.uid, by_mutex[key])
            by_mutex[key] = s.uid
    return {name: ("tile", uf.find(slot.uid)) for name, slot in section.slot_of.items()}


def make_resources_of(section):
    tile_res = resource_map(section)

    def resources_of(ins: Instr) -> list:
        out = []
        for o in ins.operands:
            r = tile_res[o] if isinstance(o, str) else (("gm", o.param) if hasattr(o, "param") else None)
            if r is not None and r not in out:
                out.append(r)
        return out
    return resources_of


# --------------------------------------------------------------------------- driver
def synchronize_block(block, section, machine, copy_of=None, loop_src=None) -> dict:
    ps = PipeSync(make_resources_of(section), block.name, copy_of, loop_src)
    root = Seq(None)
    ps.run(block.body, root)
    ps.finish(root)
    block.body = root.materialize()
    try:
        return allocate_events(block, ps.chan_of, machine)
    except _PassSyncError as e:
        raise SyncError(e.message, None, hint=e.hint) from None


def synchronize(blocks, parser, machine) -> dict:
    from .cross_core import cross_core_sync
    cross_core_sync(blocks, parser)
    events = {}
    for b in blocks:
        events[b.name] = synchronize_block(b, parser.sections[b.core], machine, parser.copy_of, parser.loop_src)
    return events
