"""The cross-core handoff pass (pypto/passes/cross_core.py) on hand-built cube + vector blocks.

Each output is checked on an abstract cluster (one cube, two vector sub-blocks, a2a3 "mode 2": a cube
set reaches both sub-blocks, a cube wait needs a set from each) that knows nothing of the pass: for
trip counts 0..5 and both scheduling orders every core finishes, every flag counter is back at zero,
and a load of a workspace never runs before its store nor a store before the load of the slot's
previous contents. Planted bugs (a flag dropped, a wait given the other flag of its pair, the
sub-block `if` around the flags) must each be caught by that model.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import sympy

from pypto.dtypes import float16, float32
from pypto.errors import SourceLoc, SyncError
from pypto.ir.block import (SUBBLOCK_IDX, Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMRegion, If,
                            Instr, TileDecl, instr, walk)
from pypto.ir.isa import MemSpace, Pipe
from pypto.machine import load_machine
from pypto.passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer, HandoffError, HandoffGroup, \
    insert_handoff_flags

A2A3 = load_machine("a2a3")

N = sympy.Symbol("n", integer=True, nonnegative=True)
I = sympy.Symbol("i", integer=True, nonnegative=True)
K = sympy.Symbol("k", integer=True, nonnegative=True)

VEC_TILES = {"x": TileDecl("x", MemSpace.UB, float16, (16, 16))}
CUBE_TILES = {"a": TileDecl("a", MemSpace.L1, float16, (16, 16)),
              "c": TileDecl("c", MemSpace.L0C, float32, (16, 16))}


def buf(name, depth=2, group=None):
    return HandoffBuffer(name, f"workspace {name}", depth, group, SourceLoc("kernel.py", 7))


def store(tiles, param, src, mark=None):
    return instr("TSTORE", [GMRegion(param, (0, 0)), src], tiles, {HANDOFF: mark} if mark else None)


def load(tiles, dst, param, mark=None):
    return instr("TLOAD", [dst, GMRegion(param, (0, 0))], tiles, {HANDOFF: mark} if mark else None)


def blocks(cube_body, vec_body):
    return [Block("k_aic", CoreType.AIC, [], [N], list(CUBE_TILES.values()), cube_body),
            Block("k_aiv", CoreType.AIV, [], [N], list(VEC_TILES.values()), vec_body)]


# ------------------------------------------------------------------------------------ abstract cluster
def events(stmts, env) -> list:
    """The block's flag and workspace events for one core under ``env`` (loops run, branches decided)."""
    out = []
    for s in stmts:
        if isinstance(s, Instr) and s.op in ("TLOAD", "TSTORE"):
            region = s.operands[1] if s.op == "TLOAD" else s.operands[0]
            if region.param.startswith("ws"):
                out.append(("load" if s.op == "TLOAD" else "store", region.param))
        elif isinstance(s, CrossCoreSetFlag):
            out.append(("set", s.flag))
        elif isinstance(s, CrossCoreWaitFlag):
            out.append(("wait", s.flag))
        elif isinstance(s, For):
            lo, hi = (int(sympy.sympify(x).subs(env)) for x in (s.start, s.stop))
            for v in range(lo, hi, int(s.step)):
                out += events(s.body, {**env, s.var: v})
        elif isinstance(s, If):
            out += events(s.then_body if bool(sympy.sympify(s.cond).subs(env)) else s.else_body, env)
    return out


def run_cluster(bs, env, depth: dict, vector_first=False, parts=None) -> str | None:
    """None when the cluster runs clean, else what went wrong. ``depth``: slots per workspace; ``parts``:
    (kind, workspace) -> accesses per use where not 1. Greedy schedule: each core runs until it
    blocks, in the given order, until nobody moves (so a writer runs as far ahead as it can)."""
    parts = parts or {}
    cube = next(b for b in bs if b.core == CoreType.AIC)
    vec = next(b for b in bs if b.core == CoreType.AIV)
    seqs = {"C": events(cube.body, env), "V0": events(vec.body, {**env, SUBBLOCK_IDX: 0}),
            "V1": events(vec.body, {**env, SUBBLOCK_IDX: 1})}
    order = ["V0", "V1", "C"] if vector_first else ["C", "V0", "V1"]
    to_vec = {sb: [0] * A2A3.cross_core_flags for sb in ("V0", "V1")}     # cube sets not yet waited, per sub-block
    to_cube = {sb: [0] * A2A3.cross_core_flags for sb in ("V0", "V1")}    # a sub-block's sets not yet waited
    writers = {p: [c for c in seqs if ("store", p) in seqs[c]] for p in depth}
    readers = {p: [c for c in seqs if ("load", p) in seqs[c]] for p in depth}
    done = {c: {} for c in seqs}                                     # core -> (kind, param) -> count
    pos = dict.fromkeys(seqs, 0)
    moved = True
    while moved:
        moved = False
        for c in order:
            while pos[c] < len(seqs[c]):
                kind, x = seqs[c][pos[c]]
                if kind == "wait":
                    sources = to_cube.values() if c == "C" else [to_vec[c]]
                    if any(cnt[x] == 0 for cnt in sources):
                        break
                    for cnt in sources:
                        cnt[x] -= 1
                elif kind == "set":
                    for cnt in (to_vec.values() if c == "C" else [to_cube[c]]):
                        cnt[x] += 1
                        if cnt[x] > A2A3.cross_core_max_pending:
                            return f"flag {x} overflows"
                else:
                    k = done[c].get((kind, x), 0)        # this core's k-th access of x (from 0)
                    use = k // parts.get((kind, x), 1)
                    ps, pl = parts.get(("store", x), 1), parts.get(("load", x), 1)
                    if kind == "load" and any(done[w].get(("store", x), 0) < (use + 1) * ps for w in writers[x]):
                        return f"{c} loads {x} (use {use}) before it was stored"
                    if kind == "store" and any(done[r].get(("load", x), 0) < (use + 1 - depth[x]) * pl
                                               for r in readers[x]):
                        return f"{c} overwrites {x} (use {use}) before it was read"
                    done[c][(kind, x)] = k + 1
                pos[c] += 1
                moved = True
    if any(pos[c] < len(seqs[c]) for c in seqs):
        return "deadlock"
    if any(any(cnt) for cnt in list(to_vec.values()) + list(to_cube.values())):
        return "a set was never waited"
    return None


def check(bs, depth, trips=range(6), parts=None):
    for n in trips:
        for vector_first in (False, True):
            err = run_cluster(bs, {N: n}, depth, vector_first, parts)
            assert err is None, f"n={n}, vector first={vector_first}: {err}"


def flag_stmts(bs) -> list:
    """(statement list, index) of every cross-core flag statement."""
    out = []

    def rec(stmts):
        for k, s in enumerate(stmts):
            if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)):
                out.append((stmts, k))
            elif isinstance(s, For):
                rec(s.body)
            elif isinstance(s, If):
                rec(s.then_body)
                rec(s.else_body)
    for b in bs:
        rec(b.body)
    return out


def mutants(bs):
    """Copies of the pass output with one flag statement dropped, or one wait given its pair's other flag."""
    n = len(flag_stmts(bs))
    for k in range(n):
        m = copy.deepcopy(bs)
        lst, i = flag_stmts(m)[k]
        del lst[i]
        yield f"drop #{k}", m
        m = copy.deepcopy(bs)
        lst, i = flag_stmts(m)[k]
        if isinstance(lst[i], CrossCoreWaitFlag):
            lst[i].flag ^= 1
            yield f"swap #{k}", m


def caught(bs, depth, parts=None) -> tuple:
    hits = total = 0
    for _, m in mutants(bs):
        total += 1
        hits += any(run_cluster(m, {N: n}, depth, vf, parts) is not None for n in (1, 3) for vf in (False, True))
    return hits, total


# ------------------------------------------------------------------------------------ kernels
def vector_to_cube(mode2=False):
    """The vectors store x into ws0 every iteration (only sub-block 0 when ``mode2``); the cube loads it."""
    ws = buf("ws0")
    st = store(VEC_TILES, "ws0", "x", HandoffAccess(ws, 0))
    vbody = [load(VEC_TILES, "x", "X"), If(sympy.Eq(SUBBLOCK_IDX, 0), [st]) if mode2 else st]
    return blocks([For(I, 0, N, 1, [load(CUBE_TILES, "a", "ws0", HandoffAccess(ws, 0))])],
                  [For(I, 0, N, 1, vbody)])


def attention_like():
    """The cube hands S over (ws0, stored in two row halves), the vectors hand P back (ws1), per iteration."""
    s, p = buf("ws0"), buf("ws1", depth=3)
    ms, mp = HandoffAccess(s, 0), HandoffAccess(p, 1)
    cube = [For(I, 0, N, 1, [store(CUBE_TILES, "ws0", "c", ms), store(CUBE_TILES, "ws0", "c", ms),
                             load(CUBE_TILES, "a", "ws1", mp)])]
    vec = [For(I, 0, N, 1, [load(VEC_TILES, "x", "ws0", HandoffAccess(s, 0)),
                            store(VEC_TILES, "ws1", "x", HandoffAccess(p, 1))])]
    return blocks(cube, vec), {"ws0": 2, "ws1": 3}, {("store", "ws0"): 2}


def test_vector_to_cube_output_and_balance():
    bs = vector_to_cube()
    insert_handoff_flags(bs, A2A3)
    cube, vec = bs
    assert [type(s).__name__ for s in cube.body] == ["CrossCoreSetFlag", "CrossCoreSetFlag", "For"]
    assert [(s.pipe, s.flag) for s in cube.body[:2]] == [(Pipe.MTE2, 1), (Pipe.MTE2, 1)]   # two empty slots
    assert [type(s).__name__ for s in cube.body[2].body] == ["CrossCoreWaitFlag", "Instr", "CrossCoreSetFlag"]
    assert (cube.body[2].body[0].flag, cube.body[2].body[2].flag) == (0, 1)                # wait full, set empty
    loop = vec.body[0]
    assert [(type(s).__name__, getattr(s, "flag", None)) for s in loop.body] == \
        [("Instr", None), ("CrossCoreWaitFlag", 1), ("Instr", None), ("CrossCoreSetFlag", 0)]
    assert [(type(s).__name__, s.pipe, s.flag) for s in vec.body[1:]] == \
        [("CrossCoreWaitFlag", Pipe.MTE3, 1)] * 2                                          # the last tokens
    assert not any(HANDOFF in s.attrs for b in bs for s in walk(b.body) if isinstance(s, Instr))
    check(bs, {"ws0": 2})
    hits, total = caught(bs, {"ws0": 2})
    assert total == 12 and hits == total, f"caught {hits} of {total} planted bugs"


def test_mode2_flags_stay_outside_the_sub_block_if():
    bs = vector_to_cube(mode2=True)
    insert_handoff_flags(bs, A2A3)
    loop = bs[1].body[0]
    assert [type(s).__name__ for s in loop.body] == ["Instr", "CrossCoreWaitFlag", "If", "CrossCoreSetFlag"]
    assert [type(s).__name__ for s in loop.body[2].then_body] == ["Instr"]
    check(bs, {"ws0": 2})
    # the same flags inside the `if`: sub-block 1 never sets, the cube's wait (mode 2) never completes
    wait, cond, set_ = loop.body.pop(1), loop.body[1], loop.body.pop(2)
    cond.then_body[:] = [wait] + cond.then_body + [set_]
    assert run_cluster(bs, {N: 1}, {"ws0": 2}) == "deadlock"


def test_two_way_handoff_multi_part_use_and_planted_bugs():
    bs, depth, parts = attention_like()
    insert_handoff_flags(bs, A2A3)
    loop = next(s for s in bs[0].body if isinstance(s, For))
    kinds = [type(s).__name__ for s in loop.body]
    # one bracket around both halves of S: wait empty(ws0), store, store, set full(ws0)
    assert kinds[:4] == ["CrossCoreWaitFlag", "Instr", "Instr", "CrossCoreSetFlag"], kinds
    assert sum(isinstance(s, CrossCoreSetFlag) and s.flag == 3 for s in bs[1].body) == 0
    assert sum(isinstance(s, CrossCoreSetFlag) and s.flag == 3 for s in bs[0].body) == 3   # ws1's 3 slots
    check(bs, depth, parts=parts)
    hits, total = caught(bs, depth, parts)
    assert total >= 20 and hits == total, f"caught {hits} of {total} planted bugs"


def test_explicit_home_brackets_the_whole_inner_loop():
    """Professional mode's home: a slot acquired in the outer loop body and written in an inner loop is one use."""
    ws = buf("ws0", depth=1)
    outer = []
    mark = HandoffAccess(ws, 0, home=outer)
    outer += [For(K, 0, 2, 1, [store(VEC_TILES, "ws0", "x", mark)])]
    bs = blocks([For(I, 0, N, 1, [load(CUBE_TILES, "a", "ws0", HandoffAccess(ws, 0)),
                                  load(CUBE_TILES, "a", "ws0", HandoffAccess(ws, 0))])],
                [For(I, 0, N, 1, outer)])
    insert_handoff_flags(bs, A2A3)
    assert [type(s).__name__ for s in outer] == ["CrossCoreWaitFlag", "For", "CrossCoreSetFlag"]
    cube_loop = bs[0].body[1]
    assert [type(s).__name__ for s in cube_loop.body] == \
        ["CrossCoreWaitFlag", "Instr", "Instr", "CrossCoreSetFlag"]
    check(bs, {"ws0": 1}, parts={("store", "ws0"): 2, ("load", "ws0"): 2})


def test_deep_group_shares_one_counting_pair():
    """Nine one-slot buffers of one group: more than the pairs the flags give, so one pair for the group."""
    g = HandoffGroup("g", "workspace group ws", SourceLoc("kernel.py", 3))
    wss = [buf(f"ws{i}", depth=1, group=g) for i in range(9)]
    vec = [store(VEC_TILES, f"ws{i}", "x", HandoffAccess(w, i)) for i, w in enumerate(wss)]
    cube = [load(CUBE_TILES, "a", f"ws{i}", HandoffAccess(w, i)) for i, w in enumerate(wss)]
    bs = blocks(cube, vec)
    insert_handoff_flags(bs, A2A3)
    assert {s.flag for b in bs for s in walk(b.body) if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag))} \
        == {0, 1}
    check(bs, {f"ws{i}": 1 for i in range(9)}, trips=[0])


def test_one_sided_buffer_gets_no_flags_and_loses_its_mark():
    ws = buf("ws0")
    bs = blocks([load(CUBE_TILES, "a", "X")], [store(VEC_TILES, "ws0", "x", HandoffAccess(ws, 0))])
    insert_handoff_flags(bs, A2A3)
    assert not flag_stmts(bs)
    assert HANDOFF not in bs[1].body[0].attrs


@pytest.mark.parametrize("case,message", [
    ("both roles", "workspace ws0 is both written and read in the vector section"),
    ("two writers", "workspace ws0 is written by both sections"),
    ("outside home", "workspace ws0 is used outside the statement list where it was acquired"),
    ("too many", "9 cube<->vector handoff buffers need 18 cross-core flags; the machine has 16"),
    ("too deep", "workspace group ws has 17 slots; a cross-core flag counts at most 16 sets in flight"),
])
def test_misuse_is_a_sync_error_naming_the_buffer(case, message):
    ws = buf("ws0")
    if case == "both roles":
        bs = blocks([load(CUBE_TILES, "a", "ws0", HandoffAccess(ws, 0))],
                    [store(VEC_TILES, "ws0", "x", HandoffAccess(ws, 0)), load(VEC_TILES, "x", "ws0", HandoffAccess(ws, 1))])
    elif case == "two writers":
        bs = blocks([store(CUBE_TILES, "ws0", "c", HandoffAccess(ws, 0))],
                    [store(VEC_TILES, "ws0", "x", HandoffAccess(ws, 0))])
    elif case == "outside home":
        bs = blocks([load(CUBE_TILES, "a", "ws0", HandoffAccess(ws, 0))],
                    [For(I, 0, N, 1, [store(VEC_TILES, "ws0", "x", HandoffAccess(ws, 0, home=[]))])])
    else:
        g = HandoffGroup("g", "workspace group ws") if case == "too deep" else None
        wss = [buf(f"ws{i}", depth=1, group=g) for i in range(17 if g else 9)]
        bs = blocks([load(CUBE_TILES, "a", f"ws{i}", HandoffAccess(w, i)) for i, w in enumerate(wss)],
                    [store(VEC_TILES, f"ws{i}", "x", HandoffAccess(w, i)) for i, w in enumerate(wss)])
    with pytest.raises(HandoffError, match=message) as info:
        insert_handoff_flags(bs, A2A3)
    assert isinstance(info.value, SyncError)
    if case != "too deep":
        assert info.value.loc == SourceLoc("kernel.py", 7)


def test_flag_budget_is_the_machines():
    """The flag count and a counter's capacity come from the MachineSpec given, not from the pass."""
    small = dataclasses.replace(A2A3, cross_core={"flags": 4, "max_pending_sets": 2})

    def handoffs(n, depth=1):
        wss = [buf(f"ws{i}", depth=depth) for i in range(n)]
        return blocks([load(CUBE_TILES, "a", f"ws{i}", HandoffAccess(w, i)) for i, w in enumerate(wss)],
                      [store(VEC_TILES, f"ws{i}", "x", HandoffAccess(w, i)) for i, w in enumerate(wss)])

    bs = handoffs(2)
    insert_handoff_flags(bs, small)
    assert {s.flag for b in bs for s in walk(b.body) if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag))} \
        == {0, 1, 2, 3}
    with pytest.raises(HandoffError, match="3 cube<->vector handoff buffers need 6 cross-core flags; the machine "
                                           "has 4"):
        insert_handoff_flags(handoffs(3), small)
    with pytest.raises(HandoffError, match="workspace ws0 has 3 slots; a cross-core flag counts at most 2 sets"):
        insert_handoff_flags(handoffs(1, depth=3), small)
    insert_handoff_flags(handoffs(3), A2A3)          # the same kernels fit a2a3's 16 flags
    insert_handoff_flags(handoffs(1, depth=3), A2A3)
