"""Event-id allocation for the channels automatic synchronisation created.

Two channels of one pipe pair (q -> p) may share an event id only if their lives never overlap: the
second's set must fire after the first's wait consumed its set, in every execution. Pipes run
ahead of each other, so program order alone does not give that; a happens-before chain does:
``wait_A`` (on p) ... p-order ... ``set_C`` --C--> ``wait_C`` (on q) ... q-order ... ``set_B``.

Candidates for sharing are *forward* channels: one set and one wait in the same statement list
(the program root or a loop body), set first. Happens-before is computed on that list — twice
over for a loop body, so a chain may run through the back edge — with one node per (statement,
pipe): a pipe's statements are ordered, a set reaches the wait that consumes it, and a nested
loop or branch contributes one node per pipe it uses and no cross-pipe edges (fewer edges, never a
false one). Channels A before B share when wait_A precedes set_B and, in a loop body, wait_B
precedes the next iteration's set_A. Everything else gets an id of its own; more ids than the
machine has (MachineSpec.memory.event_ids per pipe pair) is a SyncError.
"""
from __future__ import annotations

from collections import defaultdict

from pypto.ir.block import For, If, Instr, SetFlag, WaitFlag, walk

from .errors import SyncError


def _pipes(stmt) -> set:
    if isinstance(stmt, Instr):
        return {stmt.pipe}
    if isinstance(stmt, SetFlag):
        return {stmt.src}
    if isinstance(stmt, WaitFlag):
        return {stmt.dst}
    if isinstance(stmt, (For, If)):
        out = set()
        for s in walk([stmt]):
            if s is not stmt:
                out |= _pipes(s)
        return out
    return {getattr(stmt, "pipe")} if hasattr(stmt, "pipe") else set()


def _occurrences(stmts, chan_of, out, lists, loop_body: bool):
    lists.append((stmts, loop_body))
    for i, s in enumerate(stmts):
        if isinstance(s, (SetFlag, WaitFlag)):
            out[chan_of[id(s)]].append((id(stmts), i, isinstance(s, SetFlag)))
        elif isinstance(s, For):
            _occurrences(s.body, chan_of, out, lists, True)
        elif isinstance(s, If):
            _occurrences(s.then_body, chan_of, out, lists, False)
            _occurrences(s.else_body, chan_of, out, lists, False)


class _Order:
    """Happens-before over one statement list (doubled for a loop body)."""

    def __init__(self, stmts, chan_of, loop_body: bool):
        self.n = len(stmts)
        seq = list(stmts) * (2 if loop_body else 1)
        self.succ = defaultdict(list)
        last_on = {}
        last_set = {}
        for pos, s in enumerate(seq):
            for pipe in _pipes(s):
                node = (pos, pipe)
                if pipe in last_on:
                    self.succ[last_on[pipe]].append(node)
                last_on[pipe] = node
            if isinstance(s, SetFlag):
                last_set[chan_of[id(s)]] = (pos, s.src)
            elif isinstance(s, WaitFlag):
                src = last_set.get(chan_of[id(s)])
                if src is not None:
                    self.succ[src].append((pos, s.dst))
        self._reach: dict = {}

    def before(self, a, b) -> bool:
        """Does node a happen before node b?"""
        seen = self._reach.get(a)
        if seen is None:
            seen, stack = set(), [a]
            while stack:
                for nxt in self.succ.get(stack.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            self._reach[a] = seen
        return b in seen


def allocate_events(block, chan_of: dict, machine) -> dict:
    occ = defaultdict(list)
    lists: list = []
    _occurrences(block.body, chan_of, occ, lists, False)
    by_list = {id(lst): (lst, loop) for lst, loop in lists}
    channels = list(occ)                               # first appearance order
    forward = {}
    for ch in channels:
        o = occ[ch]
        sets = [x for x in o if x[2]]
        waits = [x for x in o if not x[2]]
        if len(sets) == 1 and len(waits) == 1 and sets[0][0] == waits[0][0] and sets[0][1] < waits[0][1]:
            lst, loop = by_list[sets[0][0]]
            if loop or lst is block.body:
                forward[ch] = (sets[0][0], sets[0][1], waits[0][1])
    orders: dict = {}

    def compatible(a, b) -> bool:
        fa, fb = forward.get(a), forward.get(b)
        if fa is None or fb is None or fa[0] != fb[0]:
            return False
        if fa[1] > fb[1]:
            a, b, fa, fb = b, a, fb, fa
        lst, loop = by_list[fa[0]]
        order = orders.get(fa[0])
        if order is None:
            order = orders[fa[0]] = _Order(lst, chan_of, loop)
        n = order.n
        if not order.before((fa[2], a.dst), (fb[1], b.src)):
            return False
        return not loop or order.before((fb[2], b.dst), (fa[1] + n, a.src))

    limit = machine.memory["event_ids"]
    per_pair = defaultdict(list)                       # (src, dst) -> [[channels of event 0], ...]
    for ch in channels:
        colors = per_pair[(ch.src, ch.dst)]
        for i, members in enumerate(colors):
            if all(compatible(ch, other) for other in members):
                members.append(ch)
                ch.event = i
                break
        else:
            ch.event = len(colors)
            colors.append([ch])
    for (src, dst), colors in per_pair.items():
        if len(colors) > limit:
            raise SyncError(f"{block.name}: automatic synchronisation needs {len(colors)} event ids for "
                            f"{src} -> {dst}, the machine has {limit}", None,
                            hint="use fewer buffer slots handed between these pipes, or synchronise by hand "
                                 "(pl.system.sync_src / sync_dst)")
    for s in walk(block.body):
        if isinstance(s, (SetFlag, WaitFlag)):
            s.event = chan_of[id(s)].event
    return {f"{a}->{b}": len(c) for (a, b), c in per_pair.items()}
