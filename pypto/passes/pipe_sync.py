"""Pipe synchronisation of one core's Block IR (the one pass Tensor mode, the Tile level and Professional mode call).

Contract (``synchronize(block, machine, resources=...)``):
  in:  a Block whose on-chip tiles have their addresses (planned, or the user's in Professional mode) and
       whose body has no set_flag/wait_flag between pipes of its own core;
  out: the same Block, with ``set_flag``/``wait_flag`` pairs inserted so that every hand-over of a buffer
       between two pipes is ordered (RAW, WAR, WAW; accesses of one pipe are in order already), every set is
       consumed by exactly one wait on every path whatever the trip counts, event ids are within the
       machine's ``memory.event_ids`` per pipe pair and no event is set again while an earlier set of it is
       live. The vector pipe's hazards on its own bytes are ``vector_barriers.insert_barriers``'s job, which
       every level runs right after this pass.
  errors: more event ids than the machine has, after a retry with coalesced sets and one with one carried
       event per loop and pipe pair, is a ``pypto.errors.SyncError`` naming the user's line of an
       instruction whose hand-over needs the extra event.

Resources (``block_resources``, the rule every level uses): the bytes of on-chip tiles, split at every tile
boundary into *atoms* (an instruction touches the atoms its tiles cover, its scratch tile ``attrs["tmp"]``
included, so two instructions share a resource exactly when their tiles share bytes; the declarations of
one buffer, or tiles that reuse dead
bytes, meet there), tiles a front end ties together (Professional mode's mutex ids) and each GM tensor,
a view of another GM tensor (``gm_alias``) being that tensor.

The algorithm: buffers are mutexes passed between pipes.
Every resource is owned by at most one pipe at a time. When an instruction
on pipe p touches a resource owned by pipe q, ownership moves q -> p: a ``set_flag(q, p, ev)`` right
after q's last access of it and a ``wait_flag(q, p, ev)`` right before the instruction. All the
transfers an instruction needs from one pipe share one event. This orders every RAW, WAR and WAW
between pipes, and nothing else — so a load into one slot of a double buffer never waits for the
compute on the other slot.

A resource can also be *pending*: released by q towards p (the set issued) but not yet waited by p.
Loops use that state to carry ownership around the back edge. The body is analysed once to find,
per resource, the first pipe that touches it (f) and the state it ends in (X); the loop is entered in
a state S0 the body can restart from: ``owned by f`` when X is f, else ``pending q -> f`` on a carried
event (set after q's last access at the end of the body, waited before f's first access; a loop entered
with exactly those resources already pending q -> f on one event, an outer loop's carried token, carries
them on that event instead of re-issuing the token on one of its own). The state before the loop is
converted to S0 (a pre-loop set: the initial "free" token of double buffering);
the end of the body is converted back to S0; the loop exits in S0, and whatever is pending at the end
of the program is waited there (the drain). An inner loop's pending state passes through an outer
loop unchanged, so double-buffer tokens are not drained at every outer iteration. If/else branches
are analysed from the same state and the branch that touched a resource decides the state after the
``if``; the other branch is converted at its end. Sets are never placed outside the branch or loop
body that waits for them, so every set is consumed exactly once on every path (the simulator checks
it). Event ids are then allocated per pipe pair (``event_alloc``: ids shared only when a happens-before
chain proves two channels' lives never overlap).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.block import Block, For, GMRegion, If, Instr, SetFlag, WaitFlag
from ..errors import SyncError
from .event_alloc import allocate_events


def block_resources(block: Block, gm_alias: dict | None = None, tied: dict | None = None):
    """The resource rule: ``instr -> [resource key, ...]`` for ``block``'s instructions.

    On-chip tiles are split into byte atoms at every tile boundary of their memory space (a tile without an
    address is a resource of its own); ``tied``: tile name -> a key shared by tiles that are one resource
    whatever their bytes; ``gm_alias``: GM param -> the param it is a view of."""
    by_space: dict = {}
    for t in block.tiles:
        if t.addr is not None:
            by_space.setdefault(t.space, set()).update((t.addr, t.addr + t.nbytes))
    cuts = {space: sorted(points) for space, points in by_space.items()}
    tile_keys = {}
    for t in block.tiles:
        if t.addr is None:
            keys = [("tile", t.name)]
        else:
            points = cuts[t.space]
            lo = points.index(t.addr)
            keys = [("tile", f"{t.space}@{a:#07x}") for a in points[lo:lo + 1]]
            for a in points[lo + 1:]:
                if a >= t.addr + t.nbytes:
                    break
                keys.append(("tile", f"{t.space}@{a:#07x}"))
        if tied and t.name in tied:
            keys.append(("tied", str(tied[t.name])))
        tile_keys[t.name] = keys
    alias = gm_alias or {}

    def resources_of(ins: Instr) -> list:
        out = []
        scratch = ins.attrs.get("tmp")          # the instruction's planned scratch tile (passes/memory.py)
        for o in ins.operands + ([scratch] if isinstance(scratch, str) else []):
            keys = tile_keys[o] if isinstance(o, str) else \
                [("gm", alias.get(o.param, o.param))] if isinstance(o, GMRegion) else ()
            for r in keys:
                if r not in out:
                    out.append(r)
        return out
    return resources_of


def synchronize(block: Block, machine, resources=None, *, copy_of: dict | None = None,
                loop_src: dict | None = None, defer_sets: bool | None = None) -> dict:
    """Insert the pipe synchronisation of ``block`` in place (the contract is the module docstring).

    ``resources``: ``instr -> resource keys`` (default ``block_resources(block)``); ``copy_of`` / ``loop_src``:
    a front end's unrolled loop-body copies (see ``PipeSync``). ``defer_sets``: None tries transfers set right
    after their own source first and coalesces by moving sets later only when event ids run out (Tensor mode
    and the Tile level: faster on every program measured but bench_tile's 2048^3 Tile matmul+gelu, +0.23%);
    True always coalesces (Professional mode: measured faster so on bench_pro's fp16-softmax flash attention,
    where the extra flags cost more than the earlier start gains). Returns the event ids used per pipe pair."""
    resources = resources or block_resources(block)
    body = block.body
    # out of event ids: once more with fewer channels, waits later; then once more with one carried event
    # per loop and pipe pair (a loop's releases at its end's one set: the next iteration's first access of
    # any of them waits for all, where a slot's own event would let it start early). The flags of a failed
    # try are gone with its statement lists: the pass builds new lists and keeps the instructions.
    tries = ((True, False), (True, True)) if defer_sets else ((False, False), (True, False), (True, True))
    for n, (defer, one_carry) in enumerate(tries):
        ps = PipeSync(resources, block.name, copy_of, loop_src, defer, one_carry)
        root = Seq(None)
        ps.run(body, root)
        ps.finish(root)
        block.body = root.materialize()
        try:
            events = allocate_events(block, ps.chan_of, machine, serialise=n == len(tries) - 1)
            break
        except SyncError:
            block.body = body
            if n == len(tries) - 1:
                raise
    return events


ENTRY = ("entry",)          # dry run of a loop body: the state the loop will be entered in (unknown yet)


@dataclass(eq=False)
class Channel:
    src: object
    dst: object
    key: tuple
    event: int = -1
    resources: set = field(default_factory=set)   # the buffers this channel hands from src to dst


class Seq:
    """An output statement list being built; sets can be inserted after any earlier statement."""

    def __init__(self, parent: "Seq | None", loop: bool = False):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.loop = loop
        self.loop_depth = self.depth if loop else (parent.loop_depth if parent is not None else -1)
        self.out: list = []
        self.after: dict = {}
        self.open_xfer: dict = {}      # (q, p) -> the last q->p transfer made in this list

    def append(self, stmt) -> int:
        self.out.append(stmt)
        return len(self.out) - 1

    def insert_after(self, idx: int, stmt) -> None:
        self.after.setdefault(idx, []).append(stmt)

    def materialize(self) -> list:
        res = list(self.after.get(-1, []))
        for i, s in enumerate(self.out):
            res.append(s)
            res.extend(self.after.get(i, []))
        return res


@dataclass(frozen=True)
class Point:
    seq: Seq
    idx: int
    origin: object = None     # what the access was (stable across the dry and the real pass of a loop)


class PipeSync:
    def __init__(self, resources_of, block_name: str, copy_of: dict | None = None, loop_src: dict | None = None,
                 defer_sets: bool = False, one_carry: bool = False):
        self.resources_of = resources_of      # Instr -> set of resource keys
        self.one_carry = one_carry            # one carried event per loop and pipe pair (saves event ids)
        self.defer_sets = defer_sets          # coalesce transfers by moving a set later (saves event ids)
        self.block_name = block_name
        self.copy_of = copy_of or {}          # id(stmt) -> which unrolled copy of its loop body it is in
        # id(For) -> its source loop: the copies of one source loop (in an unrolled outer body) share
        # their carried events, so the state one copy exits in is the state the next copy starts from
        self.loop_src = loop_src or {}
        self.channels: dict = {}
        self.chan_of: dict = {}               # id(SetFlag/WaitFlag) -> Channel
        self._keep: list = []
        self.state: dict = {}
        self.last: dict = {}                  # resource -> Point of its owner's last access
        self.first: dict | None = None        # dry run: resource -> first pipe

    # ------------------------------------------------------------------ emission helpers
    def channel(self, key, src, dst) -> Channel:
        ch = self.channels.get(key)
        if ch is None:
            ch = self.channels[key] = Channel(src, dst, key)
        return ch

    def _hands(self, ch: Channel, rs) -> None:
        """Record that ``ch`` hands ``rs`` over, in the real pass only: a dry run of a loop body starts from
        unknown states and may transfer a resource the real pass receives pending on a carried event, and
        event_alloc lets channels handing a common buffer share an event id."""
        if self.first is None:
            ch.resources |= set(rs)

    def _set(self, ch: Channel, loc=None) -> SetFlag:
        s = SetFlag(ch.src, ch.dst, -1, loc=loc)
        self.chan_of[id(s)] = ch
        self._keep.append(s)
        return s

    def _wait(self, ch: Channel, loc=None) -> WaitFlag:
        w = WaitFlag(ch.src, ch.dst, -1, loc=loc)
        self.chan_of[id(w)] = ch
        self._keep.append(w)
        return w

    def _set_index(self, seq: Seq, points: list) -> int:
        """Where a set goes: after the latest of ``points``, never outside the current list ``seq``: a point in
        an enclosing list puts it at the start of ``seq``, which in its pipe's order is still after that point
        (the sync lifts a point inside an earlier compound statement of ``seq`` to that statement)."""
        idx = -1
        for pt in points:
            if pt is not None and pt.seq is seq:
                idx = max(idx, pt.idx)
        return idx

    def _place_set(self, seq: Seq, points: list, ch: Channel, loc=None) -> None:
        seq.insert_after(self._set_index(seq, points), self._set(ch, loc))

    # ------------------------------------------------------------------ state changes
    def _wait_now(self, seq: Seq, ch: Channel, loc=None) -> None:
        """Consume ``ch`` here: every resource pending on it becomes owned by ch.dst."""
        idx = seq.append(self._wait(ch, loc))
        for r, st in self.state.items():
            if st == ("pend", ch):
                self.state[r] = ("own", ch.dst)
                self.last[r] = Point(seq, idx, ("wait", ch.key))

    def access(self, seq: Seq, ins: Instr) -> None:
        p = ins.pipe
        res = self.resources_of(ins)
        for r in res:
            st = self.state.get(r)
            if st is not None and st[0] == "pend" and st[1].dst != p:
                self._wait_now(seq, st[1], ins.loc)          # relay: the pending pipe takes it first
        waits, transfers = [], {}
        for r in res:
            st = self.state.get(r)
            if st is None:
                continue
            if st == ENTRY:
                self.first.setdefault(r, p)
            elif st[0] == "pend":
                if st[1] not in waits:
                    waits.append(st[1])
            elif st[1] != p:
                transfers.setdefault(st[1], []).append(r)
        for ch in waits:
            self._wait_now(seq, ch, ins.loc)
        for q, rs in transfers.items():
            self._transfer(seq, q, p, rs, ("xfer", id(ins), q, p), ins.loc)
        idx = seq.append(ins)
        for r in res:
            self.state[r] = ("own", p)
            self.last[r] = Point(seq, idx, id(ins))

    def _transfer(self, seq: Seq, q, p, rs, key, loc) -> tuple:
        """Hand ``rs`` from q to p here: a set after q's last access of them and a wait here, or none when
        the previous q->p transfer of this list covers them. Returns (channel, index of its wait)."""
        idx = self._set_index(seq, [self.last.get(r) for r in rs])
        prev = seq.open_xfer.get((q, p))
        if prev is not None and (idx <= prev[2] or (self.defer_sets and idx < prev[3])):
            # coalesce: the previous q->p transfer of this list is set after this transfer's source (or, with
            # defer_sets, its set moves there: one event fewer, but p's instructions after the earlier wait
            # then also wait for q's work in between, a matmul's A tile for the load of its B tile)
            ch, set_stmt, set_idx, wait_idx = prev
            self._hands(ch, rs)
            if idx > set_idx:
                seq.after[set_idx].remove(set_stmt)
                seq.insert_after(idx, set_stmt)
                seq.open_xfer[(q, p)] = (ch, set_stmt, idx, wait_idx)
            return ch, wait_idx
        ch = self.channel(key, q, p)
        self._hands(ch, rs)
        set_stmt = self._set(ch, loc)
        seq.insert_after(idx, set_stmt)
        wait_idx = seq.append(self._wait(ch, loc))
        seq.open_xfer[(q, p)] = (ch, set_stmt, idx, wait_idx)
        return ch, wait_idx

    def convert(self, seq: Seq, targets: dict, site, loc=None) -> None:
        """Bring each resource r to ``targets[r]`` (an ("own", pipe) or ("pend", channel) state) here."""
        if self.first is not None:                            # dry run: ENTRY converts for free
            for r, tgt in targets.items():
                if self.state.get(r) == ENTRY:
                    self.first.setdefault(r, tgt[1] if tgt[0] == "own" else tgt[1].dst)
                    self.state[r] = tgt
        todo = {r: t for r, t in targets.items() if self.state.get(r) != t}
        for r, tgt in todo.items():                           # 1. consume pendings that are not the target
            st = self.state.get(r)
            if st is not None and st[0] == "pend" and st != tgt:
                self._wait_now(seq, st[1], loc)
        transfers = {}
        for r, tgt in todo.items():                           # 2. move ownership to the pipe that must hold it
            st = self.state.get(r)
            if st == tgt:
                continue
            want = tgt[1] if tgt[0] == "own" else tgt[1].src
            if st is None:
                self.state[r] = ("own", want)
                self.last[r] = None
            elif st[1] != want:
                # also when the owner is the target's receiver: the set on the target's source pipe must not
                # fire before the receiver consumed that channel's previous set (one event set twice while
                # live), and only this hand-over to the source pipe orders it after the receiver's accesses
                # (that wait included); it costs no pair when an earlier hand-over of this list already does
                transfers.setdefault((st[1], want), []).append(r)
        for (q, p), rs in transfers.items():
            ch, idx = self._transfer(seq, q, p, rs, ("conv", site, q, p), loc)
            for r in rs:
                self.state[r] = ("own", p)
                self.last[r] = Point(seq, idx, ("wait", ch.key))
        releases = {}
        for r, tgt in todo.items():                           # 3. release towards a pending target
            if tgt[0] == "pend" and self.state.get(r) != tgt:
                releases.setdefault(tgt[1], []).append(r)
        for ch, rs in releases.items():
            self._hands(ch, rs)
            self._place_set(seq, [self.last.get(r) for r in rs], ch, loc)
            for r in rs:
                self.state[r] = ("pend", ch)

    def _lift(self, seq: Seq, idx: int, origin) -> None:
        """After closing a compound statement at seq[idx], points inside it become seq[idx]."""
        for r, pt in self.last.items():
            if pt is not None and pt.seq.depth > seq.depth:
                self.last[r] = Point(seq, idx, origin)

    # ------------------------------------------------------------------ structure
    def run(self, stmts: list, seq: Seq) -> None:
        for s in stmts:
            if isinstance(s, Instr):
                self.access(seq, s)
            elif isinstance(s, For):
                self.loop(s, seq)
            elif isinstance(s, If):
                self.branch(s, seq)
            else:
                seq.append(s)

    def branch(self, s: If, seq: Seq) -> None:
        # a resource both branches start with on the same pipe is handed to that pipe before the if
        first_t, first_e = self._first_pipes(s.then_body), self._first_pipes(s.else_body)
        common = {r: ("own", p) for r, p in first_t.items() if first_e.get(r) == p}
        if common:
            self.convert(seq, common, ("if", id(s)), s.loc)
        before = (dict(self.state), dict(self.last))
        t_seq = Seq(seq)
        self.run(s.then_body, t_seq)
        t_state, t_last = self.state, self.last
        self.state, self.last = dict(before[0]), dict(before[1])
        e_seq = Seq(seq)
        self.run(s.else_body, e_seq)
        e_state, e_last = self.state, self.last
        # a branch that did not touch a resource keeps the state from before the if, and the branch that
        # did converts back to it at its end (so a guarded body copy hands its slots back exactly as the
        # loop expects); when both touched it, the then-branch's state wins
        t_targets, e_targets = {}, {}
        for r in sorted(set(t_state) | set(e_state), key=_order):
            ts, es = t_state.get(r), e_state.get(r)
            if ts == es:
                continue
            t_touched = ts != before[0].get(r) or t_last.get(r) != before[1].get(r)
            e_touched = es != before[0].get(r) or e_last.get(r) != before[1].get(r)
            if (t_touched and e_touched) or es in (ENTRY, None):
                e_targets[r] = ts
            elif t_touched or ts in (ENTRY, None):
                t_targets[r] = es
            else:
                e_targets[r] = ts
        for targets, st, last, bseq, name in ((e_targets, e_state, e_last, e_seq, "else"),
                                             (t_targets, t_state, t_last, t_seq, "then")):
            self.state, self.last = st, last
            if targets:
                self.convert(bseq, {r: t for r, t in targets.items() if t is not None}, (id(s), name), s.loc)
            if name == "else":
                e_state, e_last = self.state, self.last
            else:
                t_state, t_last = self.state, self.last
        idx = seq.append(If(s.cond, t_seq.materialize(), e_seq.materialize(), loc=s.loc))
        self.state = t_state
        self.last = {r: (t_last.get(r) if t_last.get(r) == e_last.get(r) else
                         (Point(seq, idx, id(s)) if (t_last.get(r) or e_last.get(r)) is not None else None))
                     for r in sorted(set(t_last) | set(e_last), key=_order)}
        self._lift(seq, idx, id(s))

    def loop(self, s: For, seq: Seq) -> None:
        entry_targets = self._loop_entry_state(s, seq)
        self.convert(seq, entry_targets, ("pre", id(s)), s.loc)
        body = Seq(seq, loop=True)
        self.run(s.body, body)
        self.convert(body, entry_targets, ("end", id(s)), s.loc)
        idx = seq.append(For(s.var, s.start, s.stop, s.step, body.materialize(), dict(s.attrs), loc=s.loc))
        self._lift(seq, idx, id(s))

    def _loop_entry_state(self, s: For, seq: Seq) -> dict:
        """Dry-run the body from ENTRY to find each resource's first pipe and end state -> S0."""
        saved = (self.state, self.last, self.first)
        keys = sorted(set(self.state) | self._resources_in(s.body), key=_order)
        self.state = {r: ENTRY for r in keys}
        self.last = {}
        self.first = {}
        self.run(s.body, Seq(seq, loop=True))
        end, first, last = self.state, self.first, self.last
        self.state, self.last, self.first = saved
        targets, carried = {}, {}
        for r, x in end.items():
            if x == ENTRY or r not in first:
                continue
            f = first[r]
            if x == ("own", f):
                targets[r] = x
            elif x[0] == "pend" and x[1].dst == f:
                targets[r] = x
            else:
                # resources last released in the same unrolled copy of the body share one carried event:
                # a double buffer's slots get one each, so the next load of a slot waits for its own reader
                q = x[1] if x[0] == "own" else x[1].dst
                origin = last[r].origin if last.get(r) is not None else None
                group = None if self.one_carry else self.copy_of.get(origin, origin)
                loop_id = self.loop_src.get(id(s), id(s))
                carried.setdefault(("carry", loop_id, q, f, group), []).append(r)
        for key, rs in carried.items():
            ch = self._pending_as(rs, key[2], key[3]) or self.channel(key, key[2], key[3])
            self._hands(ch, rs)
            for r in rs:
                targets[r] = ("pend", ch)
        return targets

    def _pending_as(self, rs: list, src, dst) -> Channel | None:
        """The channel src -> dst on which exactly the resources ``rs`` are pending now, if any. A loop
        entered with them pending on it can carry them on it: its first access waits for the set already
        issued, its body's end sets it again, and it exits with them pending on it as it was entered.
        (A carried event of its own would be a wait of that channel and a set of the new one on entry, and
        the reverse wherever the enclosing code converts back: set/wait pairs on one pipe pair that order
        nothing; an outer loop's carried token re-issued as an inner loop's.)"""
        st = self.state.get(rs[0])
        if st is None or st[0] != "pend" or (st[1].src, st[1].dst) != (src, dst):
            return None
        if {r for r, x in self.state.items() if x == st} != set(rs):
            return None
        return st[1]

    def _first_pipes(self, stmts, out=None) -> dict:
        """resource -> pipe of its first access in program order (loop bodies included)."""
        out = {} if out is None else out
        for s in stmts:
            if isinstance(s, Instr):
                for r in self.resources_of(s):
                    out.setdefault(r, s.pipe)
            elif isinstance(s, For):
                self._first_pipes(s.body, out)
            elif isinstance(s, If):
                t, e = self._first_pipes(s.then_body), self._first_pipes(s.else_body)
                for r in sorted(set(t) | set(e), key=_order):
                    if r not in out:
                        out[r] = t[r] if t.get(r) == e.get(r) else None
        return {r: p for r, p in out.items() if p is not None}

    def _resources_in(self, stmts) -> set:
        out = set()
        for s in stmts:
            if isinstance(s, Instr):
                out |= set(self.resources_of(s))
            elif isinstance(s, For):
                out |= self._resources_in(s.body)
            elif isinstance(s, If):
                out |= self._resources_in(s.then_body) | self._resources_in(s.else_body)
        return out

    def finish(self, seq: Seq) -> None:
        """Drain: wait for every set still pending when the program ends."""
        done = []
        for r, st in list(self.state.items()):
            if st is not None and st[0] == "pend" and st[1] not in done:
                done.append(st[1])
                self._wait_now(seq, st[1])


def _order(r):
    """Resources in a fixed order, so the emitted program does not depend on hash seeds."""
    return (r[0], str(r[1]))


class UnionFind:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)
