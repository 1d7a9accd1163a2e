"""The host runtime (pypto/runtime/host) that sim, cpu and npu share: GM buffers and views, the 2-D
box dependency model, the control program's expansion, and one behaviour on both runnable backends
(same errors, same results, loop-dependent views)."""
from __future__ import annotations

import shutil

import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import PyptoError, ShapeError, SourceLoc
from pypto.ir.execution import Buffer, ExecutionGraph, Loop, Region, Task
from pypto.runtime import cpu, sim
from pypto.runtime.host import GMBuffers, Geometry, bind_sizes, expand
from pypto.runtime.host.deps import DependencyTracker
from pypto.testing import kernels as S

F32 = dtypes.float32
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
BACKENDS = ["sim", pytest.param("cpu", marks=needs_gxx)]


def _run(backend, graph, args, env):
    return (sim.run if backend == "sim" else cpu.run)(graph, args, env)


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _geometry(**shapes):
    bufs = {n: Buffer(n, s, F32, "workspace") for n, s in shapes.items()}
    g = ExecutionGraph({}, bufs, [], [], [])
    return Geometry(GMBuffers(g, {}, {}, timing_only=True))


def test_dependencies_from_2d_boxes():
    """RAW / WAR / WAW between overlapping boxes; boxes disjoint in rows or in columns stay independent."""
    geo = _geometry(y=(4, 200), z=(10,))
    tracker = DependencyTracker(geo)

    def y(r0, r1, c0, c1):
        return geo.box("y", (r0, c0), (r1 - r0, c1 - c0), {})
    accesses = [([], [y(0, 2, 0, 200)]),                    # 0 writes rows 0-1
                ([], [y(2, 4, 0, 200)]),                    # 1 writes rows 2-3: independent of 0
                ([y(1, 3, 0, 200)], []),                    # 2 reads rows 1-2: RAW on 0 and 1
                ([], [y(1, 2, 0, 50)]),                     # 3: WAR on 2, WAW on 0
                ([], [geo.box("z", (0,), (10,), {})]),      # 4: another buffer
                ([], [y(0, 4, 100, 200)]),                  # 5 writes the right half: WAW 0, 1; WAR 2
                ([y(0, 4, 0, 100)], [])]                    # 6 reads the left half: not after 5
    deps = [tracker.add(i, r, w) for i, (r, w) in enumerate(accesses)]
    assert deps == [set(), set(), {0, 1}, {0, 2}, set(), {0, 1, 2}, {0, 1, 3}]


def test_dependencies_of_boxes_that_share_grid_cells():
    """Adjacent boxes do not overlap; a read never stands in for an earlier read (only a write orders
    what it covers), so a write after two reads follows both."""
    geo = _geometry(y=(4, 200))
    tracker = DependencyTracker(geo)

    def y(r0, r1, c0, c1):
        return geo.box("y", (r0, c0), (r1 - r0, c1 - c0), {})
    accesses = [([], [y(0, 4, 0, 100)]),                    # 0: the grid's cells are [4, 100]
                ([], [y(1, 2, 100, 150)]),                  # 1
                ([y(0, 1, 50, 100)], []),                   # 2: RAW on 0
                ([], [y(1, 2, 150, 200)]),                  # 3: next to 1 in its cell, independent
                ([y(2, 3, 100, 200)], []),                  # 4 reads
                ([y(0, 4, 100, 200)], []),                  # 5 reads over 4: RAW on 1, 3
                ([], [y(2, 3, 150, 160)])]                  # 6: WAR on 4 and 5
    deps = [tracker.add(i, r, w) for i, (r, w) in enumerate(accesses)]
    assert deps == [set(), set(), {0}, set(), set(), {1, 3}, {4, 5}]


def test_views_alias_their_base():
    g = ExecutionGraph({}, {"a": Buffer("a", (4, 8), F32, "input"),
                            "v": Buffer("v", (2, 4), F32, "workspace", view_of="a", view_offset=8),
                            "h": Buffer("h", (32,), dtypes.float16, "workspace", view_of="a")},
                       ["a"], [], [])
    a = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    bufs = GMBuffers(g, {"a": a}, {})
    v = bufs.get("v", {})
    assert torch.equal(v, a.reshape(-1)[8:16].reshape(2, 4))
    v[0, 0] = -1
    assert a[1, 0] == -1
    assert bufs.get("h", {}).numel() == 32 and bufs.location("h", {}) == ("a", 0)
    assert bufs.location("v", {}) == ("a", 32) and bufs.base_of("v") == "a"
    # v[1, 0:4] is elements 12..15 of a: its row 1, columns 4..7
    assert Geometry(bufs).box("v", (1, 0), (1, 4), {}) == ("a", 1, 2, 4, 8)


def test_a_view_that_moves_with_a_loop_variable():
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    g = ExecutionGraph({}, {"a": Buffer("a", (4, 8), F32, "input"),
                            "row": Buffer("row", (1, 8), F32, "workspace", view_of="a", view_offset=8 * i)},
                       ["a"], [], [])
    a = _rand(4, 8)
    bufs = GMBuffers(g, {"a": a}, {})
    assert bufs.is_dynamic("row")
    assert torch.equal(bufs.get("row", {"i": 2}), a[2:3])
    assert bufs.location("row", {"i": 3}) == ("a", 96)
    with pytest.raises(ShapeError, match="runs past its base 'a'"):
        bufs.get("row", {"i": 4})


def _vadd_graph(rows, chunk):
    """z = (x + y) + y over row chunks in a Loop with a run-time trip count: two dependent tasks per
    chunk, each kernel seeing [chunk, 32] views whose offset moves with the loop variable."""
    kern = S.vector_add_kernel(chunk, 32, 8, F32)
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    bufs = {"x": Buffer("x", (rows, 32), F32, "input"), "y": Buffer("y", (rows, 32), F32, "input"),
            "t": Buffer("t", (rows, 32), F32, "workspace"), "z": Buffer("z", (rows, 32), F32, "output")}
    for name in list(bufs):
        bufs[f"{name}_c"] = Buffer(f"{name}_c", (chunk, 32), F32, "workspace", view_of=name,
                                   view_offset=i * chunk * 32)
    region = lambda b: [Region(b, (i * chunk, 0), (chunk, 32))]
    t1 = Task("vadd", {"x": "x_c", "y": "y_c", "z": "t_c"}, {}, 1, reads=region("x") + region("y"),
              writes=region("t"), name="add1")
    t2 = Task("vadd", {"x": "t_c", "y": "y_c", "z": "z_c"}, {}, 1, reads=region("t") + region("y"),
              writes=region("z"), name="add2")
    symbols = [rows] if isinstance(rows, sympy.Symbol) else []
    return ExecutionGraph({"vadd": kern}, bufs, ["x", "y"], ["z"],
                          [Loop(i, 0, sympy.ceiling(sympy.sympify(rows) / chunk), 1, [t1, t2])], symbols=symbols)


def test_expand_loops_dependencies_and_submissions():
    R = sympy.Symbol("R", integer=True, positive=True)
    g = _vadd_graph(R, 16)
    env = bind_sizes(g, {"x": torch.empty(48, 32)}, {})
    assert env == {"R": 48}
    instances, submissions = expand(g, env, Geometry(GMBuffers(g, {}, env, timing_only=True)), stitch=2)
    assert [inst.label for inst in instances] == [f"add{k}[i={c}]" for c in range(3) for k in (1, 2)]
    # add2 of a chunk reads what add1 of the chunk wrote; chunks are independent of each other
    assert [inst.deps for inst in instances] == [set(), {0}, set(), {2}, set(), {4}]
    assert [inst.write_boxes for inst in instances[:2]] == [[("t", 0, 16, 0, 32)], [("z", 0, 16, 0, 32)]]
    assert [[inst.id for inst in s] for s in submissions] == [[0, 1, 2, 3], [4, 5]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_dependent_views_run_on_both_backends(backend):
    """The cpu backend used to evaluate view offsets once per run (a SymbolicError for i here)."""
    x, y = _rand(48, 32), _rand(48, 32, seed=1)
    out, _ = _run(backend, _vadd_graph(48, 16), {"x": x, "y": y}, {})
    torch.testing.assert_close(out["z"], x + 2 * y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_written_arguments_are_copied_back(backend):
    x = _rand(32, 48).t()                       # non-contiguous inputs [48, 32]
    y = _rand(32, 48, seed=1).t()
    z = torch.zeros(32, 48).t()                 # a non-contiguous output
    versions = x._version, y._version
    out, _ = _run(backend, _vadd_graph(48, 16), {"x": x, "y": y, "z": z}, {})
    assert out["z"] is z and (x._version, y._version) == versions
    torch.testing.assert_close(z, x + 2 * y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_binding_a_buffer_of_another_shape_is_one_error_on_both(backend):
    kern = S.vector_add_kernel(16, 32, 8, F32)
    where = SourceLoc("model.py", 12, "f")
    bufs = {n: Buffer(n, (16, 32), F32, "input" if n != "z" else "output") for n in "xyz"}
    bufs["y"] = Buffer("y", (16, 64), F32, "input")
    g = ExecutionGraph({"vadd": kern}, bufs, ["x", "y"], ["z"],
                       [Task("vadd", {"x": "x", "y": "y", "z": "z"}, {}, 1, loc=where, name="add")])
    with pytest.raises(ShapeError, match=r"task add: kernel vadd param y has shape \[16, 32\] but buffer 'y' "
                                         r"is \[16, 64\]") as e:
        _run(backend, g, {"x": _rand(16, 32), "y": _rand(16, 64)}, {})
    assert e.value.loc == where


@pytest.mark.parametrize("backend", BACKENDS)
def test_control_program_errors_name_the_task(backend):
    kern = S.vector_add_kernel(16, 32, 8, F32)
    where = SourceLoc("model.py", 7, "f")
    bufs = {n: Buffer(n, (16, 32), F32, "input" if n != "z" else "output") for n in "xyz"}
    args = {"x": _rand(16, 32), "y": _rand(16, 32)}
    g = ExecutionGraph({"vadd": kern}, bufs, ["x", "y"], ["z"],
                       [Task("vsub", {"x": "x", "y": "y", "z": "z"}, {}, 1, loc=where, name="sub")])
    with pytest.raises(PyptoError, match="task sub launches kernel 'vsub', which the graph does not have") as e:
        _run(backend, g, args, {})
    assert e.value.loc == where
    g.program = [Task("vadd", {"x": "x", "y": "y"}, {}, 1, loc=where, name="add")]
    with pytest.raises(PyptoError, match="task add binds no buffer to GM param 'z' of kernel vadd"):
        _run(backend, g, args, {})
    q = sympy.Symbol("q", integer=True)
    g.program = [Task("vadd", {"x": "x", "y": "y", "z": "z"}, {"r": q + 1}, 1, loc=where, name="add")]
    with pytest.raises(PyptoError, match="task add scalar needs a value for 'q', which is not bound") as e:
        _run(backend, g, args, {})
    assert e.value.loc == where
    with pytest.raises(ShapeError, match="size R is 16 but argument 'y' has 8 there"):
        R = sympy.Symbol("R", integer=True, positive=True)
        g2 = _vadd_graph(R, 8)
        _run(backend, g2, {"x": _rand(16, 32), "y": _rand(8, 32)}, {})
