"""Software pipelining of a loop whose body waits for the other core type (the cube waits for P in
attention, the vector cores wait for P @ V): the body is cut in two stages at its last receive,

    s0 = what does not depend on that receive  (e.g. cube: load K_j, S_j = Q K_j^T, send S_j)
    s1 = the receive and what depends on it    (e.g. cube: receive P_j, P_j V_j, send O_j)

and iteration j+D's s0 runs before iteration j's s1 (D = SKEW, 2), so the two cores work on neighbouring iterations at
the same time instead of waiting for each other.

Legality (checked, else no skew): a tile carried by the loop is read only in the stage that updates it;
a tile that s0 passes to s1 keeps one valid shape in every iteration (the unrolled copy that holds it is
reused two iterations later); s0 sends something; nested loops hold no handoffs. Both cores' schedules
are then run on an abstract model of the double-buffered handoff slots to rule out a deadlock.
"""
from __future__ import annotations

import sympy

from .items import Item, carry_side, has_handoff

SKEW = 2            # iterations stage 0 runs ahead of stage 1 (the loop is unrolled SKEW + 1 times)


def _depends_on_var(v, var) -> bool:
    return any(var in sympy.sympify(x).free_symbols for x in v.valid)


def plan(items: list, loop, side: str, pl, values: dict):
    """-> list of stage numbers (0/1) per item, or None when the loop is not skewed."""
    recvs = [k for k, it in enumerate(items) if it.kind == "recv"]
    if not recvs or any(it.kind == "loop" and has_handoff(it.body) for it in items):
        return None
    def_at = {}
    for k, it in enumerate(items):
        for d in it.defs:
            def_at[d] = k
    users = {k: [m for m, it in enumerate(items) if any(def_at.get(u) == k for u in it.uses)]
             for k in range(len(items))}
    carries = [c for c in loop.carried if carry_side(pl, c) == side]
    phi_readers = {id(c): [k for k, it in enumerate(items) if id(c.phi) in it.uses] for c in carries}
    stage = [0] * len(items)

    def lift(k):
        todo = [k]
        while todo:
            m = todo.pop()
            if stage[m]:
                continue
            stage[m] = 1
            todo.extend(users[m])

    lift(recvs[-1])
    changed = True
    while changed:
        changed = False
        for c in carries:
            nk = def_at.get(id(c.next))
            if nk is not None and stage[nk] == 1:
                for r in phi_readers[id(c)]:
                    if not stage[r]:
                        lift(r)
                        changed = True
        # a tile s0 hands to s1 must keep its valid shape from iteration to iteration
        for k, it in enumerate(items):
            if stage[k]:
                continue
            for d in it.defs:
                v = values.get(d)
                if v is None or not _depends_on_var(v, loop.var):
                    continue
                if any(stage[m] for m in users[k]):
                    if any(not stage[m] for m in users[k]):
                        return None
                    lift(k)
                    changed = True
                    break
    for c in carries:
        nk = def_at.get(id(c.next))
        if nk is not None and stage[nk] == 0 and any(stage[r] for r in phi_readers[id(c)]):
            return None
    if not any(it.kind == "send" and not stage[k] for k, it in enumerate(items)):
        return None
    if all(stage):
        return None
    return stage


def handoff_events(items: list, stage, n: int, distance: int = 1) -> list:
    """The sequence of (kind, channel id) a side performs over n iterations under its schedule (stage 0
    of iteration j + distance runs before stage 1 of iteration j)."""
    def ev(k_set):
        return [(it.kind, it.channel.id) for k, it in enumerate(items) if k in k_set and it.kind in ("send", "recv")]
    if stage is None:
        return [e for _ in range(n) for e in ev(set(range(len(items))))]
    s0 = {k for k, s in enumerate(stage) if s == 0}
    s1 = {k for k, s in enumerate(stage) if s == 1}
    out = []
    for j in range(min(distance, n)):
        out += ev(s0)
    for j in range(n):
        if j + distance < n:
            out += ev(s0)
        out += ev(s1)
    return out


def deadlock_free(seqs: list, slots: int = 2) -> bool:
    """Run the sides' handoff sequences against slot counters (a send needs a free slot, a receive a
    filled one); True when every side finishes."""
    full: dict = {}
    pos = [0] * len(seqs)
    progress = True
    while progress:
        progress = False
        for s, seq in enumerate(seqs):
            while pos[s] < len(seq):
                kind, ch = seq[pos[s]]
                if kind == "send" and full.get(ch, 0) < slots:
                    full[ch] = full.get(ch, 0) + 1
                elif kind == "recv" and full.get(ch, 0) > 0:
                    full[ch] -= 1
                else:
                    break
                pos[s] += 1
                progress = True
    return all(p == len(seq) for p, seq in zip(pos, seqs))


__all__ = ["plan", "handoff_events", "deadlock_free", "Item"]
