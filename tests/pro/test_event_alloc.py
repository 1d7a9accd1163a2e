"""Event-id allocation's happens-before (pypto.passes.event_alloc._Region): the bitset sweep answers
exactly what a plain graph search over the region's nodes answers, on random statement lists with
flags, branches, nested loops and both copies of a loop body."""
import functools
import random
from collections import defaultdict

import pytest
import sympy

from pypto.ir.block import For, If, PipeBarrier, SetFlag, WaitFlag
from pypto.ir.isa import Pipe
from pypto.passes.event_alloc import _pipes, _Region

PIPES = [Pipe.MTE2, Pipe.V, Pipe.MTE3, Pipe.M]


def random_stmts(rng, chan_of, depth=0, n=None):
    out = []
    for _ in range(n or rng.randint(2, 9)):
        kind = rng.random()
        if kind < 0.3:
            out.append(PipeBarrier(rng.choice(PIPES)))
        elif kind < 0.7:                         # a hand-over, its wait a few statements later
            src, dst = rng.sample(PIPES, 2)
            ch = ("ch", len(chan_of))
            s, w = SetFlag(src, dst, -1), WaitFlag(src, dst, -1)
            chan_of[id(s)] = chan_of[id(w)] = ch
            out.append(s)
            out.extend(PipeBarrier(rng.choice(PIPES)) for _ in range(rng.randint(0, 2)))
            out.append(w)
        elif kind < 0.85 and depth < 2:
            out.append(If(sympy.Symbol("c") > 0, random_stmts(rng, chan_of, depth + 1),
                          random_stmts(rng, chan_of, depth + 1) if rng.random() < 0.6 else []))
        elif depth < 2:
            out.append(For(sympy.Symbol("j"), 0, 4, 1, random_stmts(rng, chan_of, depth + 1)))
    return out


def region_edges(region, chan_of) -> dict:
    """node (position, pipe) -> its successors: every later node of its pipe, the wait of its set."""
    succ = defaultdict(list)
    on_pipe = defaultdict(list)
    for pos, (stmt, _) in enumerate(region.items):
        for pipe in _pipes(stmt):
            for earlier in on_pipe[pipe]:
                succ[earlier].append((pos, pipe))
            on_pipe[pipe].append((pos, pipe))
    pending = {}
    for pos, (stmt, cond) in enumerate(region.items):
        if isinstance(stmt, SetFlag):
            pending[(chan_of[id(stmt)], cond)] = (pos, stmt.src)
        elif isinstance(stmt, WaitFlag) and (chan_of[id(stmt)], cond) in pending:
            succ[pending.pop((chan_of[id(stmt)], cond))].append((pos, stmt.dst))
    return succ


def searched_before(region, succ, a, b) -> bool:
    """The definition: a path of pipe-order and set -> wait edges from a to b whose intermediate nodes
    all have a condition path that is a prefix of a's or b's."""
    ends = (region.items[a[0]][1], region.items[b[0]][1])

    def allowed(n):
        c = region.items[n[0]][1]
        return any(e[:len(c)] == c for e in ends)
    seen, stack = set(), [a]
    while stack:
        for nxt in succ[stack.pop()]:
            if nxt == b:
                return True
            if nxt not in seen and allowed(nxt):
                seen.add(nxt)
                stack.append(nxt)
    return False


SEEDS = range(30)


@functools.lru_cache(maxsize=None)
def both_answers(seed):
    rng = random.Random(seed)
    chan_of = {}
    stmts = random_stmts(rng, chan_of, n=rng.randint(6, 12))
    loop = seed % 2 == 0
    region = _Region(stmts, chan_of, loop)
    waits = [(p, s.dst) for p, (s, _) in enumerate(region.items) if isinstance(s, WaitFlag)]
    sets = [(p, s.src) for p, (s, _) in enumerate(region.items) if isinstance(s, SetFlag)]
    succ = region_edges(region, chan_of)
    return ([region.before(a, b) for a in waits for b in sets],
            [searched_before(region, succ, a, b) for a in waits for b in sets])


@pytest.mark.parametrize("seed", SEEDS)
def test_sweep_matches_the_searched_definition(seed):
    swept, searched = both_answers(seed)
    assert swept == searched


def test_the_random_programs_exercise_both_outcomes():
    answers = [x for seed in SEEDS for x in both_answers(seed)[0]]
    assert 0.1 < sum(answers) / len(answers) < 0.9
