"""passes/kernel_nodes.py: how a custom_kernel node (a pl / pt kernel called in a traced function) is lowered:
the buffers its arguments get, its kernel_result values, one Task of the prebuilt kernel, which the memory
and sync passes leave as its front end built it."""
import torch

import pypto
import pypto_pro.language as pl
from pypto.passes.pipeline import lower
from pypto.passes.tiling import build_tile_graph
from pypto.ir.kernel_node import KernelCall
from pypto.machine import get_machine


def _body(x: pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP32], y: pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP32],
          z: pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP32]):
    t = pl.TileType(shape=[64, 128], dtype=pl.DT_FP32, target_memory=pl.MemorySpace.Vec)
    a, b = pl.make_tile(t, 0x0), pl.make_tile(t, 0x10000)
    with pl.section_vector():
        for i in pl.range(pl.get_block_idx(), (x.shape[0] + 63) // 64, pl.get_block_num()):
            pl.load_tile(a, x, [i, 0])
            pl.load_tile(b, y, [i, 0])
            pl.add(a, a, b)
            pl.store_tile(z, a, [i, 0])


add = pl.jit(_body, name="add_node")


def _fn():
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 256], pypto.float32], y: pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float32]):
        z = pypto.zeros(x.shape[0], 128)
        add[None, 3](x[:, :128], y, z)          # x: a column box (copied); y: a whole input (in place)
        return z + 1.0
    return pypto.jit(f, backend="sim")


def _graph():
    return _fn().trace(torch.randn(70, 256), torch.randn(70, 128))


def test_the_node_and_its_result_in_the_traced_graph():
    g = _graph()
    ops = [g.op(n) for n in g.nodes()]
    assert ops.count("custom_kernel") == 1 and ops.count("kernel_result") == 1      # z is its one written arg
    node = next(n for n in g.nodes() if g.op(n) == "custom_kernel")
    assert g.node(node)["attrs"]["kernel"].outputs == ("z",)


def test_arguments_get_buffers_and_the_call_is_one_item():
    g = _graph()
    tg = build_tile_graph(g, get_machine())
    calls = [it for it in tg.items if isinstance(it, KernelCall)]
    assert len(calls) == 1
    args = calls[0].gm_args
    assert args["y"] == "y"                                           # read in place
    assert tg.buffers[args["x"]].role == "workspace"                  # the column box, copied contiguous
    assert tg.buffers[args["z"]].role == "workspace" and args["z"] not in ("x", "y")
    # zeros stored straight into z's workspace by its own program (the node is its only reader)
    writers = [p for p in tg.programs() if not isinstance(p, KernelCall) and any(
        args["z"] in (q.buffer, tg.buffers[q.buffer].view_of) and q.mode != "in" for q in p.params)]
    assert [p.kind for p in writers] == ["vector"]


def test_the_prebuilt_kernel_is_left_alone_and_launched_once():
    g = _graph()
    before = str(add.cache[next(iter(add.cache))].kernel)
    eg = lower(g)
    tasks = [t for t in eg.tasks() if eg.kernels[t.kernel].attrs.get("prebuilt")]
    assert len(tasks) == 1 and tasks[0].block_dim == 3 and tasks[0].reads is None
    assert str(eg.kernels[tasks[0].kernel]) == before                 # no pass changed its Block IR
    x, y = torch.randn(70, 256), torch.randn(70, 128)
    torch.testing.assert_close(_fn()(x, y), x[:, :128] + y + 1.0, rtol=1e-6, atol=1e-6)


def test_a_dump_shows_the_call(tmp_path):
    import json
    from pypto.ir.tile_graph import tile_graph_from_json
    fn = _fn()
    fn2 = pypto.jit(fn.fn, backend="sim", dump=str(tmp_path))
    fn2(torch.randn(70, 256), torch.randn(70, 128))
    (folder,) = (tmp_path / "f").iterdir()
    text = (folder / "05_tile_graph.txt").read_text()
    assert "kernel_call add_node (pro, prebuilt)  args(x=" in text and ", y=y, z=" in text
    assert "(pro kernel)" in (folder / "05_tile_graph.dot").read_text()
    back = tile_graph_from_json(json.loads((folder / "05_tile_graph.json").read_text()))
    assert [type(it).__name__ for it in back.items].count("KernelCall") == 1
    assert "add_node" in (folder / "09_execution_graph.txt").read_text()
