"""Tiling hints (set_vec_tile_shapes / set_cube_tile_shapes): applied to the ops traced after them,
scoped to their trace, checked at the user's line against the machine compiled for; PYPTO_DUMP / dump= writes every stage; the
TileGraph JSON round trip; the Block IR verifier rejects broken programs."""
import json

import pytest
import torch

import pypto
from pypto.errors import CompileError, TilingError
from pypto.ir.block import SetFlag, WaitFlag
from pypto.ir.block_verify import verify_kernel
from pypto.ir.tile_graph import tile_graph_from_json, tile_graph_to_json
from pypto.frontend.hints import reset_tile_shapes
from .passes_helpers import lowered, rand, sim_vs_reference


@pytest.fixture(autouse=True)
def _clean_hints():
    reset_tile_shapes()
    yield
    reset_tile_shapes()


def test_vec_hint_sets_the_tile_shape():
    def f(x):
        pypto.set_vec_tile_shapes(4, 64)
        return (x * 2).exp()
    x = rand((37, 200), seed=1)
    sim_vs_reference(f, x)
    (k,) = lowered(f, x).kernels.values()
    assert {t.shape for t in k.blocks[0].tiles} == {(4, 64)}


def test_hints_apply_only_to_later_ops_and_do_not_leak():
    @pypto.jit
    def f(x):
        y = x + 1
        pypto.set_vec_tile_shapes(8, 32)
        return y * 2
    g = f.trace(rand((16, 64)))
    ops = {g.op(n): g.node(n)["attrs"].get("vec_tile") for n in g.nodes()}
    assert ops["add"] is None and ops["mul"] == (8, 32)
    g2 = pypto.jit(lambda x: x * 3).trace(rand((16, 64)))
    assert all("vec_tile" not in g2.node(n)["attrs"] for n in g2.nodes())


def test_a_hint_does_not_leak_into_a_later_trace_whose_graph_has_the_same_address():
    """CPython reuses a freed graph's memory: a later trace's root graph can have the id() of an
    earlier one. Tracing into the very same graph object twice stands for that case."""
    from pypto.frontend import context as ctx
    from pypto.ir.tensor_graph import TensorGraph
    from pypto.frontend.hints import get_vec_tile_shapes

    graph = TensorGraph("reused")
    ctx.push(graph)
    try:
        pypto.set_vec_tile_shapes(8, 32)
        assert get_vec_tile_shapes() == (8, 32)
    finally:
        ctx.pop()
    ctx.push(graph)
    try:
        assert get_vec_tile_shapes() is None
    finally:
        ctx.pop()


# a hint with more dims than the op is not an error: the op takes its trailing dims (CANN's rule,
# tests/frontend/test_cann_api.py); one with fewer dims is. An unaligned last dim is rounded up
# (test_unaligned_vec_hint_is_rounded_up_to_the_alignment). A hint dim larger than the op's tensors is
# clipped to them (CANN's rule; tests/frontend/test_runtime_control_writes.py): UB overflows only when
# the clipped tile does
@pytest.mark.parametrize("dims,shape,what", [((64,), (16, 64), "rank"), ((512, 512), (1024, 512), "UB")])
def test_bad_vec_hint_raises_at_the_user_line(dims, shape, what):
    def f(x):
        pypto.set_vec_tile_shapes(*dims)
        return x.exp()                                  # the offending op
    with pytest.raises(TilingError) as e:
        lowered(f, rand(shape))                         # rank at the trace, the rest when compiled
    assert e.value.loc.file == __file__ and e.value.loc.line == f.__code__.co_firstlineno + 2
    assert {"alignment": "alignment", "rank": "dims", "UB": "UB"}[what] in str(e.value)


@pytest.mark.parametrize("dims,shape,dtype,to,want", [
    ((8, 12), (16, 64), torch.float32, None, (8, 16)),          # 48 bytes of fp32 -> 64
    ((8,), (100,), torch.float32, torch.float16, (16,)),       # CANN's cast example: 16 bytes of fp16 -> 32
    ((4, 8), (37, 45), torch.bfloat16, None, (4, 16)),          # a tail in both dims, bf16 computed in fp32
    ((2, 24), (9, 50), torch.float16, torch.float32, (2, 32)),  # fp16 -> fp32 cast: the narrowest dtype counts
])
def test_unaligned_vec_hint_is_rounded_up_to_the_alignment(dims, shape, dtype, to, want):
    """A hint is a request: a last dim whose row is not a multiple of the machine's 32-byte alignment is
    rounded up to the next aligned size (never a failure), the result is torch's, and the report's
    decisions say what was asked and what was used."""
    def f(x):
        pypto.set_vec_tile_shapes(*dims)
        y = x * 2
        return y.to(pypto.dtypes.from_torch(to)) if to is not None else y.exp()
    x = rand(shape, dtype, seed=4)
    out = pypto.jit(f, backend="sim")(x)
    ref = (x * 2).to(to) if to is not None else (x.float() * 2).exp().to(dtype)
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    decisions = pypto.last_report().decisions
    notes = [n for d in decisions.values() for n in d.get("hint_adjusted", [])]
    assert notes and all(f"{list(dims)} -> {list(want)}" in n and "32-byte alignment" in n for n in notes), decisions
    tiles = {t.shape for k in lowered(f, x).kernels.values() for t in k.blocks[0].tiles}
    assert all(s[-1] <= want[-1] for s in tiles) and any(s[-1] == min(want[-1], shape[-1]) for s in tiles), tiles


def test_aligned_vec_hint_is_not_adjusted():
    def f(x):
        pypto.set_vec_tile_shapes(8, 16)
        return x.exp()
    pypto.jit(f, backend="sim")(rand((16, 64)))
    assert all("hint_adjusted" not in d for d in pypto.last_report().decisions.values())


@pytest.mark.parametrize("m,k,n", [([64, 32], [32, 32], [64, 64]), ([128, 128], [256, 256], [256, 256])])
def test_bad_cube_hint(m, k, n):
    with pytest.raises(TilingError):
        def f(a, b):
            pypto.set_cube_tile_shapes(m, k, n)
            return a @ b
        lowered(f, rand((64, 64), torch.float16), rand((64, 64), torch.float16))


def _mm_with_cube_hint(a, b):
    pypto.set_cube_tile_shapes([256, 256], [32, 64], [256, 256])    # L0C: 256 x 256 fp32 = 256 KiB
    return a @ b


def test_a_hint_is_checked_against_the_machine_compiled_for():
    """The L0C tile of this hint fits a5 (256 KiB) and not a2a3 (128 KiB), whatever the global machine is."""
    a, b = rand((256, 128), torch.float16, seed=2), rand((128, 256), torch.float16, seed=3)
    want = (a.float() @ b.float()).to(torch.float16)
    for default in ("a2a3", "a5"):
        saved = pypto.get_machine()
        pypto.set_machine(default)
        try:
            out = pypto.jit(_mm_with_cube_hint, backend="sim", machine="a5")(a, b)
            torch.testing.assert_close(out, want, rtol=2e-3, atol=2e-3)
            with pytest.raises(TilingError, match="L0C.*machine a2a3") as e:
                pypto.jit(_mm_with_cube_hint, backend="sim", machine="a2a3")(a, b)
            assert e.value.loc.file == __file__
            assert e.value.loc.line == _mm_with_cube_hint.__code__.co_firstlineno + 2
        finally:
            pypto.set_machine(saved)


def test_dump_writes_every_stage(tmp_path):
    f = pypto.jit(lambda x, w: pypto.rms_norm(x, w, 1e-6), backend="sim", dump=str(tmp_path))
    f(rand((8, 64)), rand((64,)))
    (d,) = [p for p in tmp_path.glob("*/*") if p.is_dir()]          # <dump>/<function>/<signature>/
    names = sorted(p.name for p in d.iterdir())
    for stem in ("01_tensor_graph_traced", "02_tensor_graph_decompose", "03_tensor_graph_canonicalize",
                 "04_tensor_graph_autocast", "05_tile_graph", "06_block_ir", "07_block_ir_memory",
                 "08_block_ir_sync", "09_execution_graph"):
        assert f"{stem}.txt" in names, (stem, names)
    assert "05_tile_graph.json" in names and "05_tile_graph.dot" in names and "02_tensor_graph_decompose.dot" in names
    kernels = list((d / "09_execution_graph_kernels").iterdir())
    assert len(kernels) == 1 and "TROWSUM" in kernels[0].read_text()


def test_tile_graph_json_round_trip():
    from pypto.passes.canonicalize import canonicalize
    from pypto.passes.decompose import decompose
    from pypto.passes.tiling import build_tile_graph
    g = pypto.jit(lambda x: pypto.softmax(x, -1) @ x.mT).trace(rand((20, 32)))
    tg = build_tile_graph(canonicalize(decompose(g)), pypto.get_machine())
    data = json.loads(json.dumps(tile_graph_to_json(tg)))
    back = tile_graph_from_json(data)
    assert str(back) == str(tg)


def _first(block, kind):
    from pypto.ir.block import walk
    return next(s for s in walk(block.body) if isinstance(s, kind))


def _remove(stmts, target):
    from pypto.ir.block import For, If
    for i, s in enumerate(stmts):
        if s is target:
            del stmts[i]
            return True
        for body in ((s.body,) if isinstance(s, For) else (s.then_body, s.else_body) if isinstance(s, If) else ()):
            if _remove(body, target):
                return True
    return False


@pytest.mark.parametrize("bug", ["drop_wait", "overlap", "over_capacity", "event_range"])
def test_verifier_catches_planted_bugs(bug):
    eg = lowered(lambda x: pypto.softmax(x, -1), rand((64, 256)))
    (k,) = eg.kernels.values()
    b = k.blocks[0]
    spec = pypto.get_machine()
    verify_kernel(k, spec)
    if bug == "drop_wait":
        _remove(b.body, _first(b, WaitFlag))
    elif bug == "overlap":
        a, c = [t for t in b.tiles if t.addr is not None][:2]
        c.addr = a.addr + 32 if c.addr != a.addr else a.addr + 64
    elif bug == "over_capacity":
        b.tiles[0].addr = spec.capacity["UB"] - 32
    else:
        _first(b, SetFlag).event = 99
    with pytest.raises(CompileError):
        verify_kernel(k, spec)


@pytest.mark.parametrize("bug,message", [("drop_wait", "race"), ("reuse_event", "event"),
                                         ("overlap", "overlap|clobber|race|live"), ("exceed_ub", "capacity")])
def test_sim_catches_planted_bugs_in_lowered_kernels(bug, message):
    """A lowered program, corrupted after the verifier, is rejected by the simulator's own checks."""
    import re
    from pypto.errors import SimError
    from pypto.ir.block import For
    from pypto.runtime import sim
    x = rand((1024, 512), seed=5)
    eg = lowered(lambda x: pypto.softmax(x, -1) * 2, x)
    (k,) = eg.kernels.values()
    b = k.blocks[0]
    loop = next(s for s in b.body if isinstance(s, For))
    if bug == "drop_wait":
        wait = next(s for s in loop.body if isinstance(s, WaitFlag) and str(s.src) == "MTE2")
        loop.body.remove(wait)
    elif bug == "reuse_event":
        sets = [s for s in b.body if isinstance(s, SetFlag)]
        dup = SetFlag(sets[0].src, sets[0].dst, sets[0].event)
        b.body.insert(b.body.index(sets[0]) + 1, dup)
    elif bug == "overlap":
        tiles = sorted((t for t in b.tiles if t.name.endswith("_1")), key=lambda t: t.addr)
        first = sorted((t for t in b.tiles if t.name.endswith("_0")), key=lambda t: t.addr)
        for t in tiles:
            t.addr -= tiles[0].addr - first[0].addr      # copy 1 onto copy 0: both in flight at once
    else:
        b.tiles[-1].addr = pypto.get_machine().capacity["UB"] - 32
    with pytest.raises(SimError) as e:
        sim.run(eg, {"x": x}, {})
    assert re.search(message, str(e.value), re.I), str(e.value)
