"""The vector-clock race check against an independent oracle: random straight-line programs on one
vector core (loads on MTE2, vector ops on V, stores on MTE3, random set/wait pairs); the oracle builds
the happens-before graph explicitly (program order per pipe, set -> matching wait edges) and calls two
conflicting tile accesses of different pipes a race when neither reaches the other."""
import networkx as nx
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pypto import dtypes
from pypto.errors import SimError
from pypto.ir.block import Block, CoreType, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.isa import MemSpace, Pipe
from pypto.runtime import sim

F32 = dtypes.float32
N_TILES = 4
PIPES = [Pipe.MTE2, Pipe.V, Pipe.MTE3]
TILES = [TileDecl(f"t{i}", MemSpace.UB, F32, (8, 64), addr=i * 2048) for i in range(N_TILES)]
T = {t.name: t for t in TILES}


@st.composite
def programs(draw):
    """Statements: ("load", tile) | ("add", dst, a, b) | ("store", tile, row) | ("sync", src, dst, ev)."""
    n = draw(st.integers(4, 14))
    stmts, stores = [], 0
    for _ in range(n):
        kind = draw(st.sampled_from(["load", "add", "store", "sync", "sync"]))
        if kind == "load":
            stmts.append(("load", draw(st.integers(0, N_TILES - 1))))
        elif kind == "add":
            stmts.append(("add",) + tuple(draw(st.integers(0, N_TILES - 1)) for _ in range(3)))
        elif kind == "store":
            stmts.append(("store", draw(st.integers(0, N_TILES - 1)), stores))
            stores += 1
        else:
            src, dst = draw(st.sampled_from([(a, b) for a in range(3) for b in range(3) if a != b]))
            stmts.append(("sync", src, dst, draw(st.integers(0, 1))))
    return stmts


def _block(stmts):
    body = []
    for s in stmts:
        if s[0] == "load":
            body.append(instr("TLOAD", [f"t{s[1]}", GMRegion("x", (0, 0))], T))
        elif s[0] == "add":
            body.append(instr("TADD", [f"t{s[1]}", f"t{s[2]}", f"t{s[3]}"], T))
        elif s[0] == "store":
            body.append(instr("TSTORE", [GMRegion("z", (8 * s[2], 0)), f"t{s[1]}"], T))
        else:
            src, dst = PIPES[s[1]], PIPES[s[2]]
            body += [SetFlag(src, dst, s[3]), WaitFlag(src, dst, s[3])]
    params = [GMParam("x", F32, (8, 64)), GMParam("z", F32, (8 * 16, 64))]
    return Kernel("k", [Block("prop", CoreType.AIV, params, [], TILES, body)])


def _oracle_has_race(stmts) -> bool:
    """Happens-before by graph reachability; accesses = (node, pipe, tile, is_write)."""
    g = nx.DiGraph()
    last = {}
    accesses = []
    node = 0

    def on_pipe(p):
        nonlocal node
        node += 1
        g.add_node(node)
        if p in last:
            g.add_edge(last[p], node)
        last[p] = node
        return node

    for s in stmts:
        if s[0] == "load":
            accesses.append((on_pipe(0), 0, s[1], True))
        elif s[0] == "add":
            n = on_pipe(1)
            accesses += [(n, 1, s[2], False), (n, 1, s[3], False), (n, 1, s[1], True)]
        elif s[0] == "store":
            accesses.append((on_pipe(2), 2, s[1], False))
        else:
            set_node = on_pipe(s[1])          # the set fires after the src pipe's earlier work
            wait_node = on_pipe(s[2])         # the dst pipe's later work waits for it
            g.add_edge(set_node, wait_node)
    for i, (n1, p1, t1, w1) in enumerate(accesses):
        for n2, p2, t2, w2 in accesses[i + 1:]:
            if p1 != p2 and t1 == t2 and (w1 or w2) and n1 != n2:
                if not (nx.has_path(g, n1, n2) or nx.has_path(g, n2, n1)):
                    return True
    return False


@settings(max_examples=120, deadline=None)
@given(programs())
def test_race_check_agrees_with_the_happens_before_oracle(stmts):
    k = _block(stmts)
    args = {"x": torch.randn(8, 64), "z": torch.zeros(128, 64)}
    try:
        sim.run_kernel(k, args, {})
        raced = False
    except SimError as e:
        assert "race" in str(e), str(e)
        raced = True
    assert raced == _oracle_has_race(stmts)
