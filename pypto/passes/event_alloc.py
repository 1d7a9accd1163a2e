"""Event-id allocation for the channels automatic synchronisation created.

Two channels of one pipe pair (q -> p) may share an event id only if their lives never overlap: the
second's set must fire after the first's wait consumed its set, in every execution. Pipes run
ahead of each other, so program order alone does not give that; a happens-before chain does:
``wait_A`` (on p) ... p-order ... ``set_C`` --C--> ``wait_C`` (on q) ... q-order ... ``set_B``.

Two proofs are used. (1) Channels that hand over a common buffer are always ordered: before the
buffer is handed q -> p again it must have gone back from p to q, through transfers that start
after the first hand-over's wait. (2) Otherwise, a happens-before search:

Candidates for sharing are *forward* channels: one set and one wait in the same statement list
(the program root or a loop body), set first. Happens-before is computed on that list — twice
over for a loop body, so a chain may run through the back edge — with one node per (statement,
pipe): a pipe's statements are ordered, a set reaches the wait that consumes it, and a nested
loop or branch contributes one node per pipe it uses and no cross-pipe edges (fewer edges, never a
false one). Channels A before B share when wait_A precedes set_B and, in a loop body, wait_B
precedes the next iteration's set_A. Everything else gets an id of its own; more ids than the
machine has (MachineSpec.memory.event_ids per pipe pair) is a SyncError, unless the caller asks to
serialise (``allocate_events``) and the channels over the limit are in the program root.
"""
from __future__ import annotations

from collections import defaultdict

from ..ir.block import For, If, Instr, PipeBarrier, SetFlag, WaitFlag, walk
from ..ir.isa import Pipe

from ..errors import SyncError


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


class _Region:
    """Happens-before over a loop body (doubled, so chains may cross the back edge) or the program
    root, with if/else branches expanded in place. Each item carries its condition path (which copy
    of the body, then which branches); a chain between two flags may only pass through items that
    run whenever both flags do: those whose condition path is a prefix of either end's.

    Nodes are (item position, pipe); every edge goes to a later position (a pipe's later items, the
    wait that consumes a set), so position order is a topological order. For one set of allowed
    condition paths, one backward sweep gives every wait node the bitset of the nodes it reaches
    through allowed nodes; a query is then a bit test (the sweep is memoised per allowed set)."""

    def __init__(self, stmts, chan_of, loop: bool):
        self.items = []                     # (stmt, cond) in program order
        for copy_index in range(2 if loop else 1):
            self._flatten(stmts, (copy_index,))
        self.index = {}
        self.bit = {}                       # (pos, pipe) -> bit index
        self.node_list = []                 # (pos, pipe, cond) in position order
        for pos, (stmt, cond) in enumerate(self.items):
            self.index.setdefault((id(stmt), cond[0]), pos)
            for pipe in _pipes(stmt):
                self.bit[(pos, pipe)] = len(self.node_list)
                self.node_list.append((pos, pipe, cond))
        self.wait_of = {}                   # set node -> the wait node consuming it
        pending = {}
        for pos, (stmt, cond) in enumerate(self.items):
            if isinstance(stmt, SetFlag):
                pending[(chan_of[id(stmt)], cond)] = (pos, stmt.src)
            elif isinstance(stmt, WaitFlag):
                src = pending.pop((chan_of[id(stmt)], cond), None)
                if src is not None:
                    self.wait_of[src] = (pos, stmt.dst)
        self.sources = {w for w in self.wait_of.values()}
        self.sources |= {(pos, s.dst) for pos, (s, _) in enumerate(self.items) if isinstance(s, WaitFlag)}
        self._reach: dict = {}              # frozenset(allowed conds) -> {wait node: reach bitset}
        self.per_copy = len(self.items) // (2 if loop else 1)

    def _flatten(self, stmts, cond):
        for s in stmts:
            if isinstance(s, If):
                self._flatten(s.then_body, cond + ((id(s), 0),))
                self._flatten(s.else_body, cond + ((id(s), 1),))
            else:
                self.items.append((s, cond))

    def node(self, stmt, copy_index: int):
        pos = self.index[(id(stmt), copy_index)]
        s = self.items[pos][0]
        return (pos, s.src if isinstance(s, SetFlag) else s.dst)

    def _sweep(self, allowed: frozenset) -> dict:
        """node -> bitset of the nodes it reaches, intermediate nodes restricted to ``allowed`` conds;
        kept for wait nodes only (query sources and set -> wait edge targets)."""
        keep = {}
        tail = defaultdict(int)             # pipe -> reach of any later node of that pipe
        for i in range(len(self.node_list) - 1, -1, -1):
            pos, pipe, cond = self.node_list[i]
            out = tail[pipe]
            w = self.wait_of.get((pos, pipe))
            if w is not None:
                out |= (1 << self.bit[w]) | (keep[w] if self.node_list[self.bit[w]][2] in allowed else 0)
            if (pos, pipe) in self.sources:
                keep[(pos, pipe)] = out
            tail[pipe] |= (1 << i) | (out if cond in allowed else 0)
        return keep

    def before(self, a, b) -> bool:
        ca, cb = self.items[a[0]][1], self.items[b[0]][1]
        allowed = frozenset(ca[:k] for k in range(len(ca) + 1)) | frozenset(cb[:k] for k in range(len(cb) + 1))
        reach = self._reach.get(allowed)
        if reach is None:
            reach = self._reach[allowed] = self._sweep(allowed)
        return bool((reach[a] >> self.bit[b]) & 1)


def _occurrences(stmts, chan_of, out, region):
    """Per channel, its set/wait statements with the list holding them and the enclosing region
    (innermost loop body, or the root)."""
    for i, s in enumerate(stmts):
        if isinstance(s, (SetFlag, WaitFlag)):
            out[chan_of[id(s)]].append((id(stmts), s, region))
        elif isinstance(s, For):
            _occurrences(s.body, chan_of, out, (s.body, True))
        elif isinstance(s, If):
            _occurrences(s.then_body, chan_of, out, region)
            _occurrences(s.else_body, chan_of, out, region)


def _first_loc(occ, colors):
    """The source line of the first flag of a channel over the limit (the hand-over that needs one event
    too many), or None (then the error names the caller's line)."""
    for members in colors:
        for ch in members:
            for _, stmt, _ in occ[ch]:
                if stmt.loc is not None:
                    return stmt.loc
    return None


def allocate_events(block, chan_of: dict, machine, serialise: bool = False) -> dict:
    """Give every channel of ``chan_of`` (id(SetFlag/WaitFlag) -> Channel) an event id, write it into the
    block's flags and return the number of ids used per pipe pair ("src->dst").

    ``serialise`` (the last resort, when ids ran out otherwise): a forward channel of the program root that
    finds no free id reuses one whose channels were all waited earlier in the root list, behind a
    ``pipe_barrier(S)`` (PIPE_ALL: every pipe drains, those waits included) right before its set."""
    occ = defaultdict(list)
    _occurrences(block.body, chan_of, occ, (block.body, False))
    channels = list(occ)                               # first appearance order
    forward = {}
    for ch in channels:
        o = occ[ch]
        sets = [x for x in o if isinstance(x[1], SetFlag)]
        waits = [x for x in o if isinstance(x[1], WaitFlag)]
        if len(sets) == 1 and len(waits) == 1 and sets[0][0] == waits[0][0]:
            lst_id, set_stmt, region = sets[0]
            forward[ch] = (id(region[0]), region, set_stmt, waits[0][1])
    regions: dict = {}

    def compatible(a, b) -> bool:
        # handing over a common buffer orders them: between two handovers q -> p of a buffer it went
        # back from p to q through a set/wait chain that starts after the first handover's wait
        if a.resources & b.resources:
            return True
        fa, fb = forward.get(a), forward.get(b)
        if fa is None or fb is None or fa[0] != fb[0]:
            return False
        region = regions.get(fa[0])
        if region is None:
            region = regions[fa[0]] = _Region(fa[1][0], chan_of, fa[1][1])
        sa, wa, sb, wb = (region.node(fa[2], 0), region.node(fa[3], 0), region.node(fb[2], 0),
                          region.node(fb[3], 0))
        if sa[0] > wa[0] or sb[0] > wb[0]:
            return False
        if sa[0] > sb[0]:
            sa, wa, sb, wb = sb, wb, sa, wa
            a, b = b, a
        if not region.before(wa, sb):
            return False
        if not fa[1][1]:
            return True
        return region.before(wb, region.node(forward[a][2], 1))

    limit = machine.memory["event_ids"]
    root_pos = {id(x): i for i, x in enumerate(block.body)}
    barriers = []                                      # sets that get a PIPE_ALL barrier before them

    def waited_before(ch, members) -> bool:
        f = forward.get(ch)
        if f is None or f[1][1] or f[1][0] is not block.body:
            return False
        for other in members:
            fo = forward.get(other)
            # an access outside the root list (root_pos has no entry) is not proven waited: no reuse
            if fo is None or fo[1][1] or fo[1][0] is not block.body or id(fo[3]) not in root_pos \
                    or id(f[2]) not in root_pos or root_pos[id(fo[3])] > root_pos[id(f[2])]:
                return False
        return True

    per_pair = defaultdict(list)                       # (src, dst) -> [[channels of event 0], ...]
    for ch in channels:
        colors = per_pair[(ch.src, ch.dst)]
        for i, members in enumerate(colors):
            if all(compatible(ch, other) for other in members):
                members.append(ch)
                ch.event = i
                break
        else:
            reuse = [i for i, members in enumerate(colors) if waited_before(ch, members)] \
                if serialise and len(colors) >= limit else []
            if reuse:
                ch.event = reuse[0]
                colors[reuse[0]].append(ch)
                barriers.append(forward[ch][2])
            else:
                ch.event = len(colors)
                colors.append([ch])
    for (src, dst), colors in per_pair.items():
        if len(colors) > limit:
            raise SyncError(f"{block.name}: automatic synchronisation needs {len(colors)} event ids for "
                            f"{src} -> {dst}, the machine has {limit}", _first_loc(occ, colors[limit:]),
                            hint="use fewer buffer slots handed between these pipes, or synchronise by hand "
                                 "(pl.system.sync_src / sync_dst)")
    for set_stmt in barriers:
        i = next(i for i, x in enumerate(block.body) if x is set_stmt)
        if not (i > 0 and isinstance(block.body[i - 1], PipeBarrier) and block.body[i - 1].pipe == Pipe.S):
            block.body.insert(i, PipeBarrier(Pipe.S, loc=set_stmt.loc))
    for s in walk(block.body):
        if isinstance(s, (SetFlag, WaitFlag)):
            s.event = chan_of[id(s)].event
    return {f"{a}->{b}": len(c) for (a, b), c in per_pair.items()}
