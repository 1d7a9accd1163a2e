"""The shared pipe-sync pass (pypto.passes.pipe_sync.synchronize) on hand-built Block IR: its resource rule,
its contract checked by the simulator (no race, no event set twice while live, every set waited, no deadlock)
and by a sequential torch evaluation of the same program, event ids within the machine, the out-of-ids
error at the user's line, and the fallback that trades waits for event ids."""
import dataclasses

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pypto
from pypto import dtypes
from pypto.errors import SourceLoc, SyncError
from pypto.ir.block import (SUBBLOCK_IDX, Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMParam,
                            GMRegion, If, Kernel, PipeBarrier, SetFlag, TileDecl, WaitFlag, instr, walk)
from pypto.ir.isa import MemSpace, Pipe
from pypto.passes.pipe_sync import block_resources, synchronize
from pypto.passes.vector_barriers import insert_barriers
from pypto.runtime import sim

F32 = dtypes.float32
ROWS, COLS = 8, 64
TILE_BYTES = ROWS * COLS * 4


def _machine(event_ids: int):
    spec = pypto.get_machine()
    return dataclasses.replace(spec, memory=dict(spec.memory, event_ids=event_ids))


def _tiles(n, stride=TILE_BYTES):
    return {f"t{i}": TileDecl(f"t{i}", MemSpace.UB, F32, (ROWS, COLS), addr=i * stride) for i in range(n)}


def _flags(block):
    return [s for s in walk(block.body) if isinstance(s, (SetFlag, WaitFlag))]


# ------------------------------------------------------------------ the resource rule
def test_tiles_share_a_resource_exactly_when_they_share_bytes():
    half = TILE_BYTES // 2
    tiles = {"a": TileDecl("a", MemSpace.UB, F32, (ROWS, COLS), addr=0),
             "b": TileDecl("b", MemSpace.UB, F32, (ROWS, COLS), addr=half),        # overlaps a and c
             "c": TileDecl("c", MemSpace.UB, F32, (ROWS, COLS), addr=TILE_BYTES),
             "d": TileDecl("d", MemSpace.L1, F32, (ROWS, COLS), addr=0)}           # same bytes, other space
    block = Block("k", CoreType.AIV, [GMParam("x", F32, (ROWS, COLS)), GMParam("v", F32, (ROWS, COLS))], [],
                  list(tiles.values()), [])
    res = block_resources(block, gm_alias={"v": "x"}, tied={"a": 7, "c": 7})
    plain = block_resources(block)

    def on(rule, t):
        return set(rule(instr("TLOAD", [t, GMRegion("x", (0, 0))], tiles))) - {("gm", "x")}
    assert on(plain, "a") & on(plain, "b") and on(plain, "b") & on(plain, "c")
    assert not on(plain, "a") & on(plain, "c")          # no byte in common, though both meet b
    assert not on(plain, "a") & on(plain, "d")
    assert on(res, "a") & on(res, "c")                  # tied (Professional mode's mutex ids)
    assert res(instr("TLOAD", ["d", GMRegion("v", (0, 0))], tiles))[-1] == ("gm", "x")   # a view of x


def test_no_hand_over_between_tiles_that_share_no_byte():
    """t0 and t2 both overlap t1's bytes but not each other's: a load into t2 does not wait for the
    vector op on t0 (the union of overlapping tiles made them one resource)."""
    tiles = _tiles(3, stride=TILE_BYTES // 2)
    body = [instr("TLOAD", ["t0", GMRegion("x", (0, 0))], tiles),
            instr("TABS", ["t0", "t0"], tiles),
            instr("TLOAD", ["t2", GMRegion("x", (0, 0))], tiles)]
    block = Block("k", CoreType.AIV, [GMParam("x", F32, (ROWS, COLS))], [], list(tiles.values()), body)
    synchronize(block, pypto.get_machine())
    pairs = [(s.src, s.dst) for s in _flags(block)]
    assert pairs == [(Pipe.MTE2, Pipe.V)] * 2, block.body


# ------------------------------------------------------------------ the contract on random programs
N_TILES = 4
OPS = ["load", "loadz", "add", "abs", "store"]


@st.composite
def programs(draw):
    """Statements ("load", t, row) | ("loadz", t, row) | ("add", d, a, b) | ("abs", d, a) | ("store", t, row)
    | ("loop", trips, [statements]); every tile is loaded first, so nothing reads the simulator's poison."""
    def stmts(depth, n):
        out = []
        for _ in range(n):
            kind = draw(st.sampled_from(OPS + (["loop"] if depth < 2 else [])))
            t = lambda: draw(st.integers(0, N_TILES - 1))          # noqa: E731
            row = lambda: draw(st.integers(0, 3))                   # noqa: E731
            if kind == "loop":
                out.append(("loop", draw(st.integers(0, 3)), stmts(depth + 1, draw(st.integers(1, 5)))))
            elif kind in ("load", "loadz", "store"):
                out.append((kind, t(), row()))
            elif kind == "add":
                out.append(("add", t(), t(), t()))
            else:
                out.append(("abs", t(), t()))
        return out
    prologue = [("load", i, i) for i in range(N_TILES)]
    return prologue + stmts(0, draw(st.integers(3, 12))) + [("store", i, 4 + i) for i in range(N_TILES)]


def _build(prog, tiles):
    counter = iter(range(1000))

    def emit(stmts):
        body = []
        for s in stmts:
            loc = SourceLoc("user_kernel.py", 10 + len(body))
            if s[0] == "loop":
                body.append(For(sympy.Symbol(f"i{next(counter)}", integer=True), 0, s[1], 1, emit(s[2]), loc=loc))
            elif s[0] in ("load", "loadz"):
                body.append(instr("TLOAD", [f"t{s[1]}", GMRegion("x" if s[0] == "load" else "z",
                                                                  (ROWS * s[2], 0))], tiles, loc=loc))
            elif s[0] == "store":
                body.append(instr("TSTORE", [GMRegion("z", (ROWS * s[2], 0)), f"t{s[1]}"], tiles, loc=loc))
            elif s[0] == "add":
                body.append(instr("TADD", [f"t{s[1]}", f"t{s[2]}", f"t{s[3]}"], tiles, loc=loc))
            else:
                body.append(instr("TABS", [f"t{s[1]}", f"t{s[2]}"], tiles, loc=loc))
        return body
    params = [GMParam("x", F32, (ROWS * 4, COLS)), GMParam("z", F32, (ROWS * 8, COLS))]
    return Block("prog", CoreType.AIV, params, [], list(tiles.values()), emit(prog))


def _sequential(prog, x, z):
    """The program's meaning: its statements one after another (torch on the host)."""
    t = {}

    def run(stmts):
        for s in stmts:
            if s[0] == "loop":
                for _ in range(s[1]):
                    run(s[2])
            elif s[0] == "load":
                t[s[1]] = x[ROWS * s[2]:ROWS * (s[2] + 1)].clone()
            elif s[0] == "loadz":
                t[s[1]] = z[ROWS * s[2]:ROWS * (s[2] + 1)].clone()
            elif s[0] == "store":
                z[ROWS * s[2]:ROWS * (s[2] + 1)] = t[s[1]]
            elif s[0] == "add":
                t[s[1]] = t[s[2]] + t[s[3]]
            else:
                t[s[1]] = t[s[2]].abs()
    run(prog)
    return z


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([8, 2]))
def test_synchronized_random_programs_run_race_free_and_compute_the_sequential_result(prog, event_ids):
    tiles = _tiles(N_TILES)
    block = _build(prog, tiles)
    try:
        synchronize(block, _machine(event_ids))
        insert_barriers(block)
    except SyncError as e:
        # only a machine with 2 ids per pipe pair may run out, and the error names a line of the kernel
        assert event_ids == 2 and e.loc is not None and e.loc.file == "user_kernel.py", e
        return
    assert all(s.event < event_ids for s in _flags(block))
    x = torch.randn(ROWS * 4, COLS)
    z0 = torch.randn(ROWS * 8, COLS)
    z = z0.clone()
    sim.run_kernel(Kernel("k", [block]), {"x": x, "z": z}, check=True)   # raises SimError on a race/reuse
    torch.testing.assert_close(z, _sequential(prog, x, z0.clone()), rtol=0, atol=0)


# ------------------------------------------------------------------ a carried event set again inside a branch
def _branch_on_a_carried_tile():
    """A loop carries t0 from its store (MTE3) to its next vector op (V) on one event; the vector op is in an
    ``if``, so the branch waits that event and must hand t0 back pending on it at its end. Each iteration's
    vector pipe first waits for the cube (a cross-core flag after 40 loads), so the vector pipe lags far
    behind MTE3: a set of the carried event that only follows the vector op in program order fires before
    the vector pipe consumed the previous one."""
    loc = lambda n: SourceLoc("user_kernel.py", n)          # noqa: E731
    i, j, k = (sympy.Symbol(n, integer=True) for n in "ijk")
    tiles = _tiles(1)
    vec = [instr("TLOAD", ["t0", GMRegion("x", (0, 0))], tiles, loc=loc(1)),
           For(i, 0, 4, 1, [CrossCoreWaitFlag(Pipe.V, 0, loc=loc(3)),
                            If(sympy.Ge(i, 1), [instr("TABS", ["t0", "t0"], tiles, loc=loc(5))], loc=loc(4)),
                            instr("TSTORE", [GMRegion("z", (ROWS * SUBBLOCK_IDX + ROWS * 2 * i, 0)), "t0"],
                                  tiles, loc=loc(6))], loc=loc(2))]
    vblock = Block("v", CoreType.AIV, [GMParam("x", F32, (ROWS, COLS)), GMParam("z", F32, (ROWS * 8, COLS))],
                   [], list(tiles.values()), vec)
    big = {"a": TileDecl("a", MemSpace.L1, F32, (64, 256), addr=0)}
    cube = [For(j, 0, 4, 1, [For(k, 0, 40, 1, [instr("TLOAD", ["a", GMRegion("y", (0, 0))], big, loc=loc(12))],
                                 loc=loc(11)),
                             CrossCoreSetFlag(Pipe.MTE2, 0, loc=loc(13))], loc=loc(10))]
    cblock = Block("c", CoreType.AIC, [GMParam("y", F32, (64, 256))], [], list(big.values()), cube)
    return vblock, cblock


def test_a_branch_sets_a_carried_event_again_only_after_its_wait():
    """The set that hands t0 back at the branch's end runs on MTE3 behind a V -> MTE3 hand-over of t0 (so
    after the branch's wait of the carried event); a set ordered by program order alone was 'event reused
    while live' here. The stores see x, then |x| three times."""
    vblock, cblock = _branch_on_a_carried_tile()
    synchronize(vblock, pypto.get_machine())
    synchronize(cblock, pypto.get_machine())
    x, y = torch.randn(ROWS, COLS), torch.randn(64, 256)
    z = torch.zeros(ROWS * 8, COLS)
    sim.run_kernel(Kernel("k", [cblock, vblock]), {"x": x, "y": y, "z": z}, check=True)
    want = torch.cat([x, x] + [x.abs()] * 6)
    torch.testing.assert_close(z, want, rtol=0, atol=0)
    branch = next(s for s in walk(vblock.body) if isinstance(s, If))
    flags = [(type(s).__name__, s.src, s.dst) for s in branch.then_body if isinstance(s, (SetFlag, WaitFlag))]
    carried = ("SetFlag", Pipe.MTE3, Pipe.V)
    assert carried in flags and ("WaitFlag", Pipe.V, Pipe.MTE3) in flags[:flags.index(carried)], flags


# ------------------------------------------------------------------ event ids: the fallback and the error
def _two_loads_two_consumers():
    tiles = _tiles(4)
    body = [instr("TLOAD", ["t0", GMRegion("x", (0, 0))], tiles),
            instr("TLOAD", ["t1", GMRegion("x", (ROWS, 0))], tiles),
            instr("TABS", ["t2", "t0"], tiles),
            instr("TABS", ["t3", "t1"], tiles),
            instr("TSTORE", [GMRegion("z", (0, 0)), "t2"], tiles),
            instr("TSTORE", [GMRegion("z", (ROWS, 0)), "t3"], tiles)]
    params = [GMParam("x", F32, (2 * ROWS, COLS)), GMParam("z", F32, (2 * ROWS, COLS))]
    return Block("k", CoreType.AIV, params, [], list(tiles.values()), body)


@pytest.mark.parametrize("event_ids", [8, 1])
def test_a_consumer_waits_only_for_its_own_load_unless_ids_run_out(event_ids):
    """With ids to spare the first load's hand-over is set right after it, so the first vector op waits for
    that load only; with one id per pipe pair the two hand-overs share one set/wait pair, set after the second
    load. Both run right on the sim."""
    block = _two_loads_two_consumers()
    events = synchronize(block, _machine(event_ids))
    kinds = [type(s).__name__ if not hasattr(s, "op") else s.op for s in block.body]
    loads_before_first_set = kinds[:kinds.index("SetFlag")].count("TLOAD")
    assert loads_before_first_set == (1 if event_ids == 8 else 2), kinds
    assert max(events.values()) <= event_ids
    x = torch.randn(2 * ROWS, COLS)
    z = torch.zeros(2 * ROWS, COLS)
    sim.run_kernel(Kernel("k", [block]), {"x": x, "z": z}, check=True)
    torch.testing.assert_close(z, x.abs(), rtol=0, atol=0)


def test_running_out_of_event_ids_in_straight_line_code_serialises():
    """Ten tiles loaded, then each one processed and stored: ten V -> MTE3 hand-overs that nothing orders
    against each other (no chain runs from MTE3 back to V), so ten ids live at once. With 8 ids the ninth
    and tenth sets reuse an id behind a pipe_barrier(S) (was a SyncError); the simulator checks no event
    is set twice while live and the result is the sequential one."""
    tiles = _tiles(10)
    body = [instr("TLOAD", [f"t{i}", GMRegion("x", (ROWS * i, 0))], tiles, loc=SourceLoc("model.py", 100 + i))
            for i in range(10)]
    for i in range(10):
        body += [instr("TABS", [f"t{i}", f"t{i}"], tiles, loc=SourceLoc("model.py", 200 + i)),
                 instr("TSTORE", [GMRegion("x", (ROWS * i, 0)), f"t{i}"], tiles, loc=SourceLoc("model.py", 300 + i))]
    block = Block("k", CoreType.AIV, [GMParam("x", F32, (ROWS * 10, COLS))], [], list(tiles.values()), body)
    wide = dataclasses.replace(block, body=list(body))
    assert max(synchronize(wide, _machine(10)).values()) == 10
    assert not any(isinstance(s, PipeBarrier) for s in wide.body)
    assert synchronize(block, _machine(8))["V->MTE3"] == 8
    assert all(s.event < 8 for s in _flags(block))
    assert any(isinstance(s, PipeBarrier) and s.pipe == Pipe.S for s in block.body)
    insert_barriers(block)
    x = torch.randn(ROWS * 10, COLS)
    out = x.clone()
    sim.run_kernel(Kernel("k", [block]), {"x": out}, check=True)   # raises SimError on a race/reuse
    assert torch.equal(out, x.abs())


def test_vector_barriers_separate_dependent_vector_instructions_only():
    tiles = _tiles(3)
    body = [instr("TLOAD", ["t0", GMRegion("x", (0, 0))], tiles),
            instr("TABS", ["t1", "t0"], tiles),
            instr("TABS", ["t2", "t0"], tiles),      # reads what the load wrote: no barrier (other pipe)
            instr("TADD", ["t0", "t1", "t2"], tiles)]  # reads t1, t2 the vector pipe just wrote: barrier
    block = Block("k", CoreType.AIV, [GMParam("x", F32, (ROWS, COLS))], [], list(tiles.values()), body)
    synchronize(block, pypto.get_machine())
    insert_barriers(block)
    kinds = [s.op if hasattr(s, "op") else type(s).__name__ for s in block.body]
    assert kinds.count("PipeBarrier") == 1 and kinds[kinds.index("PipeBarrier") + 1] == "TADD", kinds
    assert all(s.pipe == Pipe.V for s in block.body if isinstance(s, PipeBarrier))


# ------------------------------------------------------------------ vector barriers (vector_barriers.py)
def _barrier_text(text: str) -> str:
    from pypto.ir.block_printer import print_block
    from .ir_text import block
    blk = block(text)
    insert_barriers(blk)
    return print_block(blk)


_VEC_HEAD = """
block k  core=AIV  args(x: gm f32[8, 64])
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
  tile c : ub f32[8, 64] @0x01000
  tile d : ub f32[8, 64] @0x01800
  tile s : ub f32[8, 64] @0x02000
"""


def _ops_before_barriers(text: str) -> list:
    """The instruction right after each pipe_barrier V of the printed block."""
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    return [lines[i + 1][0] + " " + lines[i + 1][1].rstrip(",") for i, ln in enumerate(lines[:-1])
            if ln[:2] == ["pipe_barrier", "V"]]


def test_a_loop_s_first_iteration_sees_the_vector_writes_before_the_loop():
    """TADD reads a, written by the TABS before the loop; the body's own TABS d, c needs a barrier too,
    which clears the body's writes at its end — the first iteration still needs the one before TADD."""
    got = _barrier_text(_VEC_HEAD + """
  TLOAD  a, x[0, 0]
  TLOAD  b, x[0, 0]
  TABS   a, a
  for i in range(0, 4, 1):
    TADD   c, a, b
    TABS   d, c
  TSTORE x[0, 0], d
""")
    assert _ops_before_barriers(got) == ["TADD c", "TABS d"], got


def test_a_scratch_tile_is_a_write_of_its_instruction_and_a_user_barrier_clears():
    """Two row sums share the scratch s (passes/memory.py plans one per instruction, but two may share dead
    bytes): the second overwrites what the first wrote there. A pipe_barrier V, or S (PIPE_ALL), already
    in the program separates what comes before it: no second barrier."""
    got = _barrier_text(_VEC_HEAD + """
  TROWSUM  c, a {tmp=s}
  TROWSUM  d, b {tmp=s}
  TABS     a, d
  pipe_barrier V
  TABS     b, a
  pipe_barrier S
  TADD     c, a, b
""")
    assert _ops_before_barriers(got) == ["TROWSUM d", "TABS a", "TABS b"], got
    assert got.count("pipe_barrier") == 4 and got.split().count("S") == 1, got


def _unseparated_vector_hazards(block) -> list:
    """(first, second) vector instructions of one statement list where the second reads or writes what the
    first wrote, or writes what the first read, with no pipe_barrier between them (a check of each list on
    its own, independent of the pass: it does not follow loops or branches)."""
    found = []

    def rng(name):
        t = block.tile(name)
        return (t.space, t.addr, t.addr + t.nbytes)

    def check(stmts):
        written = []                   # (range, instruction, written (else read)) since the last barrier
        for s in stmts:
            if isinstance(s, PipeBarrier):
                written = []
            elif hasattr(s, "op") and s.pipe == Pipe.V:
                scratch = [s.attrs["tmp"]] if isinstance(s.attrs.get("tmp"), str) else []
                names = s.tile_operands() + scratch
                outs = s.tile_operands()[:1] + scratch
                for w, first, was_write in written:
                    later = names if was_write else outs
                    if any(rng(n)[0] == w[0] and rng(n)[1] < w[2] and w[1] < rng(n)[2] for n in later):
                        found.append((first.op, s.op))
                        break
                written += [(rng(n), s, True) for n in outs] + [(rng(n), s, False) for n in names]
            for body in (getattr(s, "body", None), getattr(s, "then_body", None), getattr(s, "else_body", None)):
                if isinstance(body, list):
                    check(body)
    check(block.body)
    return found


def _load_example(folder: str, name: str):
    import importlib.util
    import os
    import sys
    root = os.path.join(os.path.dirname(__file__), "..", "..", "examples", folder)
    if folder == "pro":
        sys.path.insert(0, os.path.abspath(root))
    spec = importlib.util.spec_from_file_location(f"{folder}_example_{name}", os.path.join(root, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tile_level_and_professional_mode_get_the_vector_barriers_too():
    """One behaviour for the three levels (Tensor mode's pipeline ran it already): the Tile level's layer
    norm and Professional mode's softmax (automatic sync) have a barrier between every dependent pair of
    vector instructions, and do have such pairs."""
    import pypto.tile as pt
    ln = _load_example("tile", "layer_norm")
    x = torch.empty(64, 256, dtype=torch.float16)
    w = torch.empty(256, dtype=torch.float16)
    tile_block = pt.kernel(ln.layer_norm.fn, backend="sim")[(4,)].compile(x, w, w, torch.empty_like(x)).kernel.blocks[0]
    sm = _load_example("pro", "softmax")
    xs = torch.zeros(64, 256, dtype=torch.float16)
    pro_block = sm.softmax_kernel.compile(xs, xs).kernel.blocks[0]
    for blk in (tile_block, pro_block):
        assert any(isinstance(s, PipeBarrier) for s in walk(blk.body)), blk
        assert _unseparated_vector_hazards(blk) == [], blk
