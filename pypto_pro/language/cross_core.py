"""Cube <-> vector handoff through GM workspace slots: cross-core flags, inserted automatically.

A workspace slot is written in one section and read in the other. Each *use* of a slot (everything
done with it between two acquisitions by ``group.next()`` / ``group[i]``, inside the statement list
where it was acquired) is bracketed: the writer waits ``empty`` before its first write and sets
``full`` after its last; the reader waits ``full`` before its first read and sets ``empty`` after its
last. The reader starts with one ``empty`` token per slot (set at its start) and the writer consumes
the final one at its end, so every flag is balanced. Flags are per slot (two each) when the machine's
flags suffice, so a mismatch in the two sections' slot order shows as a deadlock in the simulator
rather than as silent corruption. Deeper FIFOs (more slots than flag pairs) share one pair per tile
group: a cross-core flag is a counter (up to 15 sets in flight), and both sections take a group's
slots round-robin in the same order, so the k-th ``full`` is the k-th slot's (a mismatch then shows
as a GM race in the simulator's checks).
On a2a3 a cube set reaches every vector sub-block of the cluster and the cube's wait needs the set of
every sub-block (Ascend "mode 2"), which is exactly what two vector sub-blocks sharing a slot need.
"""
from __future__ import annotations

from pypto.ir.block import CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, If, Instr

from .errors import SyncError

CROSS_CORE_FLAGS = 16
MAX_FLAG_COUNT = 16      # a flag's counter holds up to 15 sets not yet waited


def _uses(stmts, out: dict) -> None:
    for s in stmts:
        if isinstance(s, Instr):
            ws = s.attrs.get("_ws")
            if ws is not None:
                slot, (use_id, home) = ws
                out.setdefault(use_id, (slot, home, []))[2].append(s)
        elif isinstance(s, For):
            _uses(s.body, out)
        elif isinstance(s, If):
            _uses(s.then_body, out)
            _uses(s.else_body, out)


def _contains(stmt, targets: set) -> list:
    """The accesses among ``targets`` inside ``stmt``, in program order."""
    if isinstance(stmt, Instr):
        return [stmt] if id(stmt) in targets else []
    if isinstance(stmt, For):
        return [i for s in stmt.body for i in _contains(s, targets)]
    if isinstance(stmt, If):
        return [i for s in stmt.then_body + stmt.else_body for i in _contains(s, targets)]
    return []


def _flag_pairs(shared: list, slots: dict) -> dict:
    """slot uid -> (full, empty) flag ids: a pair per slot when they fit, else a pair per tile group."""
    if 2 * len(shared) <= CROSS_CORE_FLAGS:
        return {uid: (2 * i, 2 * i + 1) for i, uid in enumerate(shared)}
    channel_of = {uid: ("g", slots[uid].group.uid) if slots[uid].group is not None else ("s", uid) for uid in shared}
    channels = list(dict.fromkeys(channel_of[uid] for uid in shared))
    if 2 * len(channels) > CROSS_CORE_FLAGS:
        raise SyncError(f"{len(channels)} cube<->vector handoff buffers need {2 * len(channels)} cross-core flags; "
                        f"the machine has {CROSS_CORE_FLAGS}", slots[shared[0]].span,
                        hint="use fewer workspace groups")
    for uid in shared:
        g = slots[uid].group
        if g is not None and g.depth >= MAX_FLAG_COUNT:
            raise SyncError(f"workspace group {g.name} has {g.depth} slots; a cross-core flag counts at most "
                            f"{MAX_FLAG_COUNT - 1} sets in flight", g.span, hint="use a shallower workspace group")
    index = {c: i for i, c in enumerate(channels)}
    return {uid: (2 * index[channel_of[uid]], 2 * index[channel_of[uid]] + 1) for uid in shared}


def cross_core_sync(blocks, parser) -> None:
    by_core = {b.core: b for b in blocks}
    if CoreType.AIC not in by_core or CoreType.AIV not in by_core:
        return
    uses = {core: {} for core in by_core}
    for core, b in by_core.items():
        _uses(b.body, uses[core])
    roles: dict = {}                              # slot uid -> {core: "w" | "r"}
    slots = {}
    for core, us in uses.items():
        for slot, _, accesses in us.values():
            slots[slot.uid] = slot
            for ins in accesses:
                role = "w" if ins.op == "TSTORE" else "r"
                prev = roles.setdefault(slot.uid, {}).setdefault(core, role)
                if prev != role:
                    raise SyncError(f"workspace slot {slot.name} is both written and read in the "
                                    f"{'cube' if core == CoreType.AIC else 'vector'} section; a handoff slot is "
                                    "written by one section and read by the other", slot.span)
    shared = [uid for uid, r in roles.items() if len(r) == 2]
    for uid in shared:
        if sorted(roles[uid].values()) != ["r", "w"]:
            raise SyncError(f"workspace slot {slots[uid].name} is "
                            f"{'written' if 'w' in roles[uid].values() else 'read'} by both sections",
                            slots[uid].span)
    flags = _flag_pairs(shared, slots)

    for core, b in by_core.items():
        prologue, epilogue = [], []
        for use_id, (slot, home, accesses) in sorted(uses[core].items()):
            if slot.uid not in flags:
                continue
            full, empty = flags[slot.uid]
            writer = roles[slot.uid][core] == "w"
            ids = {id(a) for a in accesses}
            positions = [i for i, s in enumerate(home) if _contains(s, ids)]
            inside = sum(len(_contains(home[i], ids)) for i in positions)
            if inside != len(accesses):
                raise SyncError(f"workspace slot {slot.name} is used outside the statement list where it was "
                                "acquired (e.g. acquired in one loop iteration and used in another)",
                                slot.span, hint="acquire the slot with next() where it is used")
            first = _contains(home[positions[0]], ids)[0]
            last = _contains(home[positions[-1]], ids)[-1]
            wait_flag, set_flag = (empty, full) if writer else (full, empty)
            home.insert(positions[-1] + 1, CrossCoreSetFlag(last.pipe, set_flag, loc=last.loc))
            home.insert(positions[0], CrossCoreWaitFlag(first.pipe, wait_flag, loc=first.loc))
        for uid in shared:
            full, empty = flags[uid]
            pipe = next(a.pipe for _, (slot, _, accs) in uses[core].items() if slot.uid == uid for a in accs)
            if roles[uid][core] == "r":
                prologue.append(CrossCoreSetFlag(pipe, empty))
            else:
                epilogue.append(CrossCoreWaitFlag(pipe, empty))
        b.body[:0] = prologue
        b.body.extend(epilogue)
