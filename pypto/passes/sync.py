"""Sync insertion (Block IR pass): set_flag/wait_flag for every dependency between two pipes.

Pipes of one core run concurrently; only the order of one pipe's own instructions is guaranteed.
For every pair of instructions on different pipes that touch overlapping bytes of a tile (RAW,
WAR, WAW; addresses after memory planning, so reused buffers are covered) the consumer must wait
for the producer:

* forward dependencies (producer earlier in the same pass over the program): ``set_flag`` right
  after the statement holding the producer and ``wait_flag`` right before the statement holding
  the consumer, both in the innermost statement list holding the two (so a producer before a
  loop is waited for once, before the loop; a producer inside a loop is signalled after it);
  a wait already placed in that list for a later producer of the same pipe covers earlier ones.
* loop-carried dependencies (the producer is later in the loop body than the consumer, i.e. it
  is the previous iteration's): the standard preload pattern — ``set_flag`` before the loop,
  ``wait_flag`` before the consumer's statement and ``set_flag`` after the producer's statement in
  the body, and a final ``wait_flag`` after the loop, so every set has exactly one wait whatever
  the trip count.

Event ids are allocated per (src pipe, dst pipe) by interval colouring over program order and
checked against ``MachineSpec.memory.event_ids``.

Same-pipe hazards: the vector pipe is pipelined and does not check its own dependences, so a vector
instruction that reads or overwrites bytes an earlier vector instruction wrote (since the last
barrier) gets ``pipe_barrier(V)`` first, as Ascend kernels do (``BARRIER_PIPES``). The other pipes
order their own work.
"""
from __future__ import annotations

from collections import defaultdict

from ..errors import CompileError
from ..ir.block import Block, For, If, Instr, PipeBarrier, SetFlag, WaitFlag
from ..ir.isa import Pipe


class _Lists:
    """Statement lists of a block, each with an id; the path of every instruction through them."""

    def __init__(self, block: Block):
        self.lists = {}       # id -> python list
        self.paths = {}       # id(instr) -> [(list id, index), ...] root first
        self.order = []       # instrs in program order
        self.loops = []       # (For stmt, list id of its body, path to the For)
        self._walk(block.body, [])

    def _walk(self, stmts, path):
        lid = len(self.lists)
        self.lists[lid] = stmts
        for i, s in enumerate(stmts):
            here = path + [(lid, i)]
            if isinstance(s, Instr):
                self.paths[id(s)] = here
                self.order.append(s)
            elif isinstance(s, For):
                body_id = len(self.lists)
                self.loops.append((s, body_id, here))
                self._walk(s.body, here)
            elif isinstance(s, If):
                self._walk(s.then_body, here)
                self._walk(s.else_body, here)


def _ranges(block: Block, ins: Instr):
    """(reads, writes) of an instruction as (space, lo, hi) byte ranges of its tiles."""
    def rng(name):
        t = block.tile(name)
        return (t.space, t.addr, t.addr + t.nbytes)
    tiles = ins.tile_operands()
    if ins.spec.kind == "store":
        return [rng(tiles[0])], []
    if ins.spec.kind == "load":
        return [], [rng(tiles[0])]
    reads = [rng(t) for t in tiles[1:]]
    if ins.op == "TMATMUL_ACC":
        reads.append(rng(tiles[0]))
    return reads, [rng(tiles[0])]


def _overlap(a, b) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def _split(pa, pb):
    """Innermost common list of two paths and the element index of each in it."""
    k = 0
    while k < min(len(pa), len(pb)) - 1 and pa[k] == pb[k]:
        k += 1
    # pa[k] and pb[k] are in the same list (same list id) but different elements, or paths diverge
    while k > 0 and pa[k][0] != pb[k][0]:
        k -= 1
    return pa[k][0], pa[k][1], pb[k][1]


def insert_sync(block: Block, machine) -> Block:
    info = _Lists(block)
    acc = {id(i): _ranges(block, i) for i in info.order}
    pos = {id(i): k for k, i in enumerate(info.order)}
    before = defaultdict(list)     # (list id, index) -> stmts to insert before
    after = defaultdict(list)      # (list id, index) -> stmts to insert after
    events = []                    # [src, dst, set points, wait points, interval (lo, hi)]

    # ------------------------------------------------ forward dependencies
    history = []                   # (instr, reads, writes) in program order
    # what a pipe knows has completed, per statement list: (list, pipe) -> [(wait element, {pipe: element})];
    # a wait on a set carries the setter's knowledge too (happens-before is transitive), so a dependency
    # already ordered through a chain of flags (MTE2 -> V -> MTE3) needs no flag of its own
    known = defaultdict(list)

    def knowledge(lid, pipe, at):
        snap = {}
        for w, k in known[(lid, pipe)]:
            if w > at:
                break
            snap = k
        return snap
    for ins in info.order:
        reads, writes = acc[id(ins)]
        deps = {}
        for prev, preads, pwrites in reversed(history):
            if prev.pipe == ins.pipe:
                continue
            hit = any(_overlap(r, w) for r in reads for w in pwrites) or \
                any(_overlap(w, x) for w in writes for x in pwrites + preads)
            if hit:
                key = prev.pipe
                # the latest producer per pipe is enough: an earlier one of that pipe completed before it
                if key not in deps:
                    deps[key] = prev
        for src_pipe, prev in deps.items():
            lid, ia, ib = _split(info.paths[id(prev)], info.paths[id(ins)])
            if ia >= ib:
                continue      # same enclosing statement: a loop-carried case, handled below
            mine = knowledge(lid, ins.pipe, ib)
            if mine.get(src_pipe, -1) >= ia:
                continue
            gained = dict(mine)
            for q, e in list(knowledge(lid, src_pipe, ia).items()) + [(src_pipe, ia)]:
                gained[q] = max(gained.get(q, -1), e)
            known[(lid, ins.pipe)].append((ib, gained))
            events.append([src_pipe, ins.pipe, [("after", lid, ia)], [("before", lid, ib)],
                           (pos[id(prev)], pos[id(ins)])])
        history.append((ins, reads, writes))

    # ------------------------------------------------ loop-carried dependencies
    for loop, body_id, loop_path in info.loops:
        inside = [i for i in info.order if any(p[0] == body_id for p in info.paths[id(i)])]
        if not inside:
            continue
        lo, hi = pos[id(inside[0])], pos[id(inside[-1])]
        want = {}
        for a in inside:
            ra, wa = acc[id(a)]
            for b in inside:
                if pos[id(b)] >= pos[id(a)] or a.pipe == b.pipe:
                    continue
                rb, wb = acc[id(b)]
                hit = any(_overlap(w, x) for w in wa for x in rb + wb) or any(_overlap(r, w) for r in ra for w in wb)
                if not hit:
                    continue
                ea = _elem(info.paths[id(a)], body_id)
                eb = _elem(info.paths[id(b)], body_id)
                if ea < eb:
                    continue      # ordered within the iteration already
                k = (a.pipe, b.pipe, eb)
                want[k] = max(want.get(k, -1), ea)
        # one event per (pipes, wait point, set point); a hazard whose producer is signalled no later
        # than an event's set and whose consumer comes no earlier than its wait rides on that event
        chosen = defaultdict(list)
        for (src, dst, eb), ea in sorted(want.items(), key=lambda kv: (kv[0][2], str(kv[0][0]), str(kv[0][1]))):
            if any(b0 <= eb and a0 >= ea for b0, a0 in chosen[(src, dst)]):
                continue
            chosen[(src, dst)].append((eb, ea))
        lid, li = loop_path[-1]
        for (src, dst), evs in chosen.items():
            for eb, ea in evs:
                events.append([src, dst, [("before", lid, li), ("after", body_id, ea)],
                               [("before", body_id, eb), ("after", lid, li)], (lo - 1, hi + 1)])

    _assign_ids(events, machine)
    for src, dst, sets, waits, _iv, ev in events:
        for where, lid, idx in sets:
            (before if where == "before" else after)[(lid, idx)].append(SetFlag(src, dst, ev))
        for where, lid, idx in waits:
            (before if where == "before" else after)[(lid, idx)].append(WaitFlag(src, dst, ev))
    _apply(info, before, after)
    return insert_barriers(block)


BARRIER_PIPES = (Pipe.V,)


def insert_barriers(block: Block) -> Block:
    """pipe_barrier before an instruction of a BARRIER_PIPES pipe that touches bytes the same pipe wrote
    since its last barrier (loop bodies are walked twice so the previous iteration's writes count)."""
    def touches(block, ins):
        reads, writes = _ranges(block, ins)
        return reads + writes, writes

    def walk(stmts, dirty, insert):
        out = [] if insert else None
        for st in stmts:
            if isinstance(st, Instr):
                if st.pipe in BARRIER_PIPES:
                    rng, writes = touches(block, st)
                    d = dirty.setdefault(st.pipe, [])
                    if any(_overlap(a, b) for a in rng for b in d):
                        if insert:
                            out.append(PipeBarrier(st.pipe))
                        d.clear()
                    d.extend(writes)
                if insert:
                    out.append(st)
            elif isinstance(st, For):
                walk(st.body, dirty, False)          # the previous iteration's writes
                if insert:
                    st.body[:] = walk(st.body, dirty, True)
                    out.append(st)
                else:
                    walk(st.body, dirty, False)
            elif isinstance(st, If):
                a = {k: list(v) for k, v in dirty.items()}
                b = {k: list(v) for k, v in dirty.items()}
                then_new = walk(st.then_body, a, insert)
                else_new = walk(st.else_body, b, insert)
                if insert:
                    st.then_body[:] = then_new
                    st.else_body[:] = else_new
                    out.append(st)
                for k in set(a) | set(b):
                    dirty[k] = a.get(k, []) + b.get(k, [])
            else:
                if insert:
                    out.append(st)
        return out
    block.body[:] = walk(block.body, {}, True)
    return block


def _elem(path, list_id) -> int:
    return next(i for lid, i in path if lid == list_id)


def _assign_ids(events, machine):
    limit = machine.memory.get("event_ids", 8)
    by_pair = defaultdict(list)
    for e in events:
        by_pair[(e[0], e[1])].append(e)
    for (src, dst), evs in by_pair.items():
        evs.sort(key=lambda e: e[4])
        busy = []          # (hi, id)
        for e in evs:
            lo, hi = e[4]
            free = sorted({i for i in range(limit)} - {i for h, i in busy if h >= lo})
            if not free:
                raise CompileError(f"more than {limit} events in flight between pipes {src} and {dst}")
            e.append(free[0])
            busy.append((hi, free[0]))


def _apply(info: _Lists, before, after):
    # rebuild every list bottom-up (indices refer to the original lists)
    for lid in sorted(info.lists, reverse=True):
        stmts = info.lists[lid]
        new = []
        for i, s in enumerate(stmts):
            new.extend(sorted(before.get((lid, i), []), key=_wait_last))
            new.append(s)
            new.extend(after.get((lid, i), []))
        stmts[:] = new


def _wait_last(s) -> int:
    # before a statement: loop pre-sets first, then the waits
    return 1 if isinstance(s, WaitFlag) else 0


__all__ = ["insert_sync", "insert_barriers"]
