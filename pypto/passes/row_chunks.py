"""Row chunks (issue 14 item 3, MPMD overlap of a row-parallel program): TensorGraph -> TensorGraph.

A program whose every op works row by row over the leading dim T of its outputs (a LLaMA MLP: rms_norm,
gate / up matmuls, silu * up, down matmul, residual) lowers to one task per op, each over all T rows, so
the cube and the vector tasks alternate: the AIVs idle while the matmuls run and the AICs idle while the
vector ops run. Cut into C chunks of R rows, it becomes ``for c in pypto.loop(C): out[c*R:(c+1)*R] =
program(rows c*R..)``; the loop's iterations are independent (each writes its own rows), so the host's
dependency model (runtime/host/deps.py, with multibuffer.py's workspace copies) starts a chunk's vector
ops as soon as its matmul finished, while the AICs go on with the next chunks' matmuls.

Which programs (``row_ops``): no loops or kernel nodes, every output returned with the same static
leading dim T; walking back from the outputs, a value that must be by rows is an input, an elementwise op
(its operands of the same rank with leading dim T by rows, the others broadcast along the rows:
row-invariant), a reduction over dims other than 0, or a 2-d matmul whose A is by rows (B row-invariant).
A value wanted both by rows and row-invariant, or any other op, leaves the program as it is.
Row-invariant vector work (a norm's weight cast to fp32) is made in the loop body, where fusion keeps it
in the programs' setup; a row-invariant matmul runs once, before the loop.

When (``chunk_count``): the program has cube work by rows and vector work by rows, T is static, and each
chunk keeps the cube cores busy: at least ``MIN_ROWS`` rows and ``TILES_PER_CORE`` x the AICs output tiles
of [128, 256] per chunk over its matmuls. R is the smallest such multiple of 128 dividing T, at most
``MAX_CHUNKS`` chunks. The matmuls are marked ``row_chunks=C`` so that the tile chooser
(cube_tiling.py) picks the tiles of the whole problem, not of one chunk.
"""
from __future__ import annotations

from ..frontend import api, control, hints
from ..frontend import context as ctx
from ..frontend.tensor import Tensor
from ..ir.tensor_graph import OutputSpec, TensorGraph
from ..ir.tile_graph import TileProgram
from ..ops.registry import get_op

ROW_TILE = 128            # rows of a chunk: a multiple of the cube's preferred M tile
MIN_ROWS = 256
MAX_CHUNKS = 16
TILES_PER_CORE = 2        # [128, 256] output tiles per AIC in one chunk, over its matmuls
REDUCE_OPS = ("sum", "prod", "amax", "amin", "mean")


def row_ops(g: TensorGraph):
    """(T, {node: "row" | "inv"}) when every output of ``g`` is computed row by row over its leading dim
    T (see the module docstring), else None."""
    if any(g.op(n) in ("loop", "loop_result", "custom_kernel", "kernel_result") for n in g.nodes()):
        return None
    if not g.outputs or any(o.kind != "return" for o in g.outputs):
        return None
    outs = [o.node for o in g.outputs]
    if len(set(outs)) != len(outs) or any(g.op(n) == "input" for n in outs):
        return None
    T = g.info(outs[0]).shape[0] if g.info(outs[0]).rank else None
    if not isinstance(T, int):
        return None
    label: dict = {}

    def want(n, kind) -> bool:
        if label.get(n, kind) != kind:
            return False
        label[n] = kind
        return True

    for n in outs:
        info = g.info(n)
        if not info.rank or info.shape[0] != T or not want(n, "row"):
            return None
    for n in sorted(g.nodes(), reverse=True):       # consumers before producers
        kind = label.get(n)
        if kind is None:
            continue
        node = g.node(n)
        ins = node["inputs"]
        if kind == "inv" or node["op"] == "input":
            if not all(want(i, "inv") for i in ins):
                return None
            continue
        for i, k in zip(ins, _operand_kinds(g, n, T)):
            if k is None or not want(i, k):
                return None
    return T, label


def _operand_kinds(g, n, T) -> list:
    """How each operand of the by-rows node ``n`` must be: "row", "inv", or None (not by rows)."""
    node = g.node(n)
    op, ins, attrs = node["op"], node["inputs"], node["attrs"]
    out = g.info(n)
    family = get_op(op).family
    if family == "elementwise":
        kinds = []
        for i in ins:
            info = g.info(i)
            if info.rank == out.rank and info.shape[0] == T:
                kinds.append("row")
            elif info.rank < out.rank or info.shape[0] == 1:
                kinds.append("inv")
            else:
                kinds.append(None)
        return kinds
    if op in REDUCE_OPS:
        rank = g.info(ins[0]).rank
        dims = attrs.get("dims")
        if dims is None or any(d % rank == 0 for d in dims):
            return [None]
        return ["row"]
    if op == "matmul" and len(ins) == 2:
        a, b = (g.info(i) for i in ins)
        if a.rank == 2 and b.rank == 2 and not attrs.get("a_trans") and a.shape[0] == T:
            return ["row", "inv"]
    return [None] * len(ins)


def chunk_count(g, label, T, spec) -> int:
    """How many row chunks (1: leave the program as it is)."""
    rows = [n for n, k in label.items() if k == "row" and g.op(n) != "input"]
    widths = [g.info(n).shape[-1] for n in rows if g.op(n) == "matmul"]
    if not widths or not all(isinstance(w, int) for w in widths) \
            or not any(get_op(g.op(n)).unit == "vector" for n in rows):
        return 1
    for C in range(MAX_CHUNKS, 1, -1):
        R = T // C
        if T % C or R < MIN_ROWS or R % ROW_TILE:
            continue
        tiles = sum(-(-R // 128) * -(-w // 256) for w in widths)     # [128, 256] output tiles of one chunk
        if tiles >= TILES_PER_CORE * spec.num_aic:
            return C
    return 1


def chunk_rows(g: TensorGraph, spec, chunks: int | None = None) -> tuple:
    """(``g`` as a loop over row chunks when that keeps both kinds of cores busy (module docstring), the
    nodes of the rewritten graph that only give the loop's outputs a first value: drop_fills).
    ``chunks``: that many chunks wherever the rows divide evenly (for tests and comparisons)."""
    found = row_ops(g)
    if found is None:
        return g, set()
    T, label = found
    if chunks is None:
        C = chunk_count(g, label, T, spec)
    else:
        C = chunks if chunks > 1 and T % chunks == 0 else 1
    if C == 1:
        return g, set()
    return _rewrite(g, label, T, C)


def drop_fills(tg, fills: set) -> None:
    """The loop writes every row of its outputs, so the programs that fill them first (the carried
    values' zeros) are left out of the TileGraph, in place."""
    if fills:
        tg.items = [it for it in tg.items if not (isinstance(it, TileProgram) and it.nodes and set(it.nodes) <= fills)]


def _emit_like(g, n, ins) -> Tensor:
    """Node ``n`` of ``g`` applied to ``ins`` (its hints and source line kept)."""
    node = g.node(n)
    attrs = dict(node["attrs"])
    with hints.scoped(attrs.get("vec_tile"), attrs.get("cube_tile")):
        t = api.emit(node["op"], ins, attrs)
    t._graph.node(t._node)["loc"] = node["loc"]
    return t


def _invariant(g, n, vals, made) -> Tensor:
    """The row-invariant value ``n``, made once in ``made`` (inputs and hoisted values are in ``vals``)."""
    if n not in made:
        made[n] = _emit_like(g, n, [_invariant(g, i, vals, made) for i in g.node(n)["inputs"]])
    return made[n]


def _rewrite(g, label, T, C) -> tuple:
    R = T // C
    new = TensorGraph(g.name)
    new.symbols = list(g.symbols)
    new.returns_tuple = g.returns_tuple
    new.notes = [*g.notes, f"row chunks: the {T}-row program runs as a loop of {C} chunks of {R} rows, so that "
                           f"one chunk's vector work overlaps the next chunks' matmuls (passes/row_chunks.py)"]
    new.scalar_reads = dict(g.scalar_reads)
    loc = g.node(g.outputs[0].node)["loc"]
    vals: dict = {}
    ctx.push(new)
    try:
        for n in g.inputs:
            vals[n] = Tensor._wrap(new, new.add_input(g.info(n), g.node(n)["loc"]))
        for n in g.nodes():                       # row-invariant cube work: once, before the loop
            if label.get(n) == "inv" and g.op(n) != "input" and get_op(g.op(n)).unit == "cube":
                vals[n] = _invariant(g, n, vals, vals)
        with hints.scoped(None, None):
            outs = [api.zeros(*g.info(o.node).shape, dtype=g.info(o.node).dtype) for o in g.outputs]
        inits = [t._node for t in outs]           # (the Tensors are rebound to the loop's results)
        lp = control.loop(C, name="rc")
        lp.loc = loc
        for c in lp:
            rows: dict = {}
            inv = dict(vals)                      # row-invariant vector work: in the body, fused as setup
            for n in g.nodes():
                if label.get(n) != "row":
                    continue
                if g.op(n) == "input":
                    with hints.scoped(None, None):
                        rows[n] = vals[n][c * R:(c + 1) * R]
                    continue
                ins = [rows[i] if label[i] == "row" else _invariant(g, i, vals, inv) for i in g.node(n)["inputs"]]
                t = _emit_like(g, n, ins)
                if g.op(n) == "matmul":
                    t._graph.node(t._node)["attrs"]["row_chunks"] = C
                rows[n] = t
            with hints.scoped(None, None):
                for o, dst in zip(g.outputs, outs):
                    dst[c * R:(c + 1) * R] = rows[o.node]
    finally:
        ctx.pop()
    _locate(new, loc)
    new.inputs = [vals[n]._node for n in g.inputs]
    new.outputs = [OutputSpec(t._node, "return", o.index) for o, t in zip(g.outputs, outs)]
    return new, set(inits)


def _locate(g, loc) -> None:
    """The nodes this pass made (zeros, the loop, row views, writes) at the program's output line."""
    for n in g.nodes():
        node = g.node(n)
        if node["op"] in ("full", "loop", "loop_result", "view", "assemble", "reshape"):
            node["loc"] = loc
        if node["op"] == "loop":
            _locate(node["attrs"]["body"], loc)
