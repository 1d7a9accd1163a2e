"""Iteration spaces of TensorGraph ops, for fusion and tiling.

Every vector op iterates over a space of ``Dim``s (its non-unit dims; static size-1 dims never
take part). Each operand and the result map their dims onto that space: ``maps[k][j]`` is the
``Dim`` that dim ``j`` of input ``k`` runs along, or None for a broadcast/size-1 dim. Dims are
union-find nodes: fusing two ops identifies the dims their shared value runs along.

``CLASS`` says how the lowering treats each op (table, not branches):
  ew       elementwise with broadcasting (incl. cast, where, clip, gelu, comparisons)
  reduce   reduction over ``attrs["dims"]`` (argmax: ``attrs["dim"]``)
  scan     cumsum along ``attrs["dim"]``
  gen      generators with no tensor inputs (full, arange)
  mask     tril / triu (a generated mask and a select)
  alias    a reshape that only adds or removes size-1 dims (no data movement in tiles)
  access   views of GM data: view (box), reshape, expand, transpose, permute
  matmul   the cube
  scalar / source / assemble / loop / loop_result / concat / pad / fillpad / gather / index_select
  kernel / kernel_result   a pl / pt kernel called as a node (passes/kernel_nodes.py)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .exprs import same

CLASS = {
    "full": "gen", "arange": "gen", "scalar": "scalar", "input": "source", "constant": "source",
    "cast": "ew", "where": "ew", "clip": "ew", "gelu": "ew", "copy": "ew",
    "sum": "reduce", "prod": "reduce", "amax": "reduce", "amin": "reduce", "argmax": "reduce",
    "cumsum": "scan", "tril": "mask", "triu": "mask",
    "view": "access", "reshape": "access", "expand": "access", "transpose": "access", "permute": "access",
    "matmul": "matmul", "assemble": "assemble", "loop": "loop", "loop_result": "loop_result",
    "concat": "concat", "pad": "pad", "fillpad": "fillpad", "gather": "gather", "index_select": "index_select",
    "custom_kernel": "kernel", "kernel_result": "kernel_result",
}


def op_class(g, nid) -> str:
    op = g.op(nid)
    if op in CLASS:
        c = CLASS[op]
        if c == "access" and op == "reshape" and is_unit_reshape(g.info(g.node(nid)["inputs"][0]).shape,
                                                                 g.info(nid).shape):
            return "alias"
        return c
    from ..ops.registry import get_op
    if get_op(op).family == "elementwise":
        return "ew"
    return "unknown"


def is_one(d) -> bool:
    return isinstance(d, int) and d == 1


def non_unit(shape) -> list:
    return [d for d in shape if not is_one(d)]


def is_unit_reshape(src, dst) -> bool:
    """True when the reshape only inserts or removes static size-1 dims."""
    a, b = non_unit(src), non_unit(dst)
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


class Dim:
    __slots__ = ("size", "parent", "id")
    _next = 0

    def __init__(self, size):
        self.size = size
        self.parent = self
        Dim._next += 1
        self.id = Dim._next

    def find(self) -> "Dim":
        d = self
        while d.parent is not d:
            d.parent = d.parent.parent
            d = d.parent
        return d

    def __repr__(self) -> str:
        r = self.find()
        return f"D{r.id}({r.size})"


def find(d):
    return None if d is None else d.find()


@dataclass
class NodeSpace:
    dims: list                      # the op's iteration dims, outer to inner
    in_maps: list                   # per input: tuple of Dim | None per input dim
    out_map: tuple                  # per result dim: Dim | None
    reduces: list = field(default_factory=list)   # dims combined by a reduction (in order)
    scans: list = field(default_factory=list)     # dims a scan runs along


def _space_of(shape):
    dims, amap = [], []
    for d in shape:
        if is_one(d):
            amap.append(None)
        else:
            dim = Dim(d)
            dims.append(dim)
            amap.append(dim)
    return dims, tuple(amap)


def _right_aligned(out_map, shape):
    r = len(out_map)
    return tuple(None if is_one(d) else out_map[r - len(shape) + j] for j, d in enumerate(shape))


def reduce_dims(g, nid) -> tuple:
    a = g.node(nid)["attrs"]
    if "dims" in a:
        return tuple(a["dims"])
    return (a["dim"],) if a.get("dim") is not None else tuple(range(len(g.info(g.node(nid)["inputs"][0]).shape)))


def node_space(g, nid) -> NodeSpace:
    cls = op_class(g, nid)
    n = g.node(nid)
    ins = [g.info(i) for i in n["inputs"]]
    out = g.info(nid)
    if cls in ("ew", "mask"):
        dims, out_map = _space_of(out.shape)
        return NodeSpace(dims, [_right_aligned(out_map, i.shape) for i in ins], out_map)
    if cls == "gen":
        dims, out_map = _space_of(out.shape)
        return NodeSpace(dims, [], out_map)
    if cls in ("reduce", "scan"):
        dims, in_map = _space_of(ins[0].shape)
        rdims = reduce_dims(g, nid) if cls == "reduce" else (n["attrs"]["dim"],)
        combined = [in_map[d] for d in rdims if in_map[d] is not None]
        if cls == "scan":
            return NodeSpace(dims, [in_map], in_map, scans=combined)
        keep = n["attrs"].get("keepdim", False)
        if keep:
            out_map = tuple(None if j in rdims else m for j, m in enumerate(in_map))
        else:
            out_map = tuple(m for j, m in enumerate(in_map) if j not in rdims)
        if len(out_map) != len(out.shape):      # argmax over everything with keepdim: all ones
            out_map = tuple(None for _ in out.shape)
        return NodeSpace(dims, [in_map], out_map, reduces=combined)
    if cls == "alias":
        dims, in_map = _space_of(ins[0].shape)
        it = iter(dims)
        out_map = tuple(None if is_one(d) else next(it) for d in out.shape)
        return NodeSpace(dims, [in_map], out_map)
    raise KeyError(cls)
