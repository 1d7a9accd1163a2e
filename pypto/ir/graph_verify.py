"""The TensorGraph verifier: structure (inputs, outputs, edges mirror ``inputs``, ids in topological
order), types (re-running every op's ``infer`` reproduces the recorded ValueInfo) and loops (their
bodies verified recursively; carried values and results agree with the body's outputs).

The op table is the caller's (``ops``: op name -> an entry with ``num_inputs`` and
``infer(infos, attrs)``, as pypto.ops.registry.REGISTRY holds): the IR knows no ops of its own.

A failure is a compiler bug or a hand-built graph gone wrong, not a user mistake: it raises
``CompileError`` naming the graph, the node and what was expected."""
from __future__ import annotations

from ..errors import CompileError, PyptoError
from .tensor_graph import TensorGraph, ValueInfo

_STRUCTURAL = {"input", "loop", "loop_result"}


def _fail(g: TensorGraph, nid, message: str):
    loc = g.node(nid).get("loc") if nid is not None and nid in g.nx.nodes else None
    where = f"graph {g.name}" + (f", node %{nid}" if nid is not None else "")
    raise CompileError(f"invalid TensorGraph ({where}): {message}", loc=loc)


def _same_value(a: ValueInfo, b: ValueInfo) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def _fmt(v: ValueInfo) -> str:
    return f"{v.dtype}[{', '.join(str(d) for d in v.shape)}]"


def _check_structure(g: TensorGraph) -> None:
    nodes = set(g.nx.nodes)
    for k, nid in enumerate(g.inputs):
        if nid not in nodes or g.op(nid) != "input":
            _fail(g, None, f"input {k} is %{nid}, which is not an 'input' node")
    stray = [nid for nid in nodes if g.op(nid) == "input" and nid not in g.inputs]
    if stray:
        _fail(g, stray[0], "an 'input' node that is not among the graph's inputs")
    for o in g.outputs:
        if o.node not in nodes:
            _fail(g, None, f"output %{o.node} does not exist")
        if o.kind == "inplace" and not 0 <= o.index < len(g.inputs):
            _fail(g, o.node, f"in-place output writes input {o.index}, but the graph has {len(g.inputs)} inputs")
    for nid in g.nodes():
        ins = g.node(nid)["inputs"]
        for src in ins:
            if src not in nodes:
                _fail(g, nid, f"operand %{src} does not exist")
            if src >= nid:
                _fail(g, nid, f"operand %{src} does not come before it (ids must be a topological order)")
        want = {}
        for pos, src in enumerate(ins):
            want.setdefault(src, []).append(pos)
        have = {src: list(g.nx.edges[src, nid]["pos"]) for src in g.nx.predecessors(nid)}
        if have != want:
            _fail(g, nid, f"edges {have} do not match its operands {want} (operand -> positions)")


def _check_loop(g: TensorGraph, nid: int, node: dict, ops) -> None:
    attrs = node["attrs"]
    body = attrs.get("body")
    if not isinstance(body, TensorGraph):
        _fail(g, nid, "a loop node without a body graph")
    for key in ("var", "start", "stop", "step", "carried"):
        if key not in attrs:
            _fail(g, nid, f"a loop node without '{key}'")
    if len(body.inputs) != len(node["inputs"]):
        _fail(g, nid, f"the body takes {len(body.inputs)} inputs but the loop passes {len(node['inputs'])}")
    for k, (b_in, src) in enumerate(zip(body.inputs, node["inputs"])):
        if not _same_value(body.info(b_in), g.info(src)):
            _fail(g, nid, f"body input {k} is {_fmt(body.info(b_in))} but the loop passes "
                          f"{_fmt(g.info(src))} (%{src})")
    carried = attrs["carried"]
    if len(carried) != len(body.outputs):
        _fail(g, nid, f"{len(carried)} carried values but the body has {len(body.outputs)} outputs")
    outs = node["out"]
    if not isinstance(outs, (list, tuple)) or len(outs) != len(body.outputs):
        _fail(g, nid, "the loop's results do not match the body's outputs")
    for k, (pos, o, res) in enumerate(zip(carried, body.outputs, outs)):
        if not 0 <= pos < len(body.inputs):
            _fail(g, nid, f"carried value {k} names body input {pos}, which does not exist")
        out_v = body.info(o.node)
        if not (_same_value(out_v, body.info(body.inputs[pos])) and _same_value(out_v, res)):
            _fail(g, nid, f"carried value {k}: body output {_fmt(out_v)}, body input "
                          f"{_fmt(body.info(body.inputs[pos]))} and loop result {_fmt(res)} must agree")
    verify_graph(body, ops)


def _check_types(g: TensorGraph, ops) -> None:
    for nid in g.nodes():
        node = g.node(nid)
        op = node["op"]
        if op == "loop":
            _check_loop(g, nid, node, ops)
        elif op == "loop_result":
            src = node["inputs"]
            if len(src) != 1 or g.op(src[0]) != "loop":
                _fail(g, nid, "a loop_result must read exactly one loop node")
            results = g.info(src[0])
            k = node["attrs"].get("index")
            if not isinstance(k, int) or not 0 <= k < len(results):
                _fail(g, nid, f"result index {k} is out of range for a loop with {len(results)} results")
            if not _same_value(results[k], node["out"]):
                _fail(g, nid, f"records {_fmt(node['out'])} but loop result {k} is {_fmt(results[k])}")
        elif op != "input":
            if op not in ops:
                _fail(g, nid, f"unknown op '{op}'")
            infos = [g.info(i) for i in node["inputs"]]
            n_in = ops[op].num_inputs
            if n_in is not None and len(infos) != n_in:
                _fail(g, nid, f"'{op}' takes {n_in} operands, found {len(infos)}")
            # a kernel node (ops/kernel_node.py) has one result per written argument, read by kernel_result
            if any(isinstance(v, (list, tuple)) for v in infos) and op != "kernel_result":
                _fail(g, nid, "an operand is a multi-result node; read it through loop_result / kernel_result")
            try:
                again = ops[op].infer(infos, dict(node["attrs"]))
            except PyptoError as e:
                _fail(g, nid, f"'{op}' rejects its recorded operands: {e.message}")
            if isinstance(again, list):
                if not (isinstance(node["out"], list) and len(again) == len(node["out"])
                        and all(_same_value(a, b) for a, b in zip(again, node["out"]))):
                    _fail(g, nid, f"'{op}' infers {len(again)} results that the node does not record")
            elif not _same_value(again, node["out"]):
                _fail(g, nid, f"'{op}' infers {_fmt(again)} but the node records {_fmt(node['out'])}")


def verify_graph(g: TensorGraph, ops) -> None:
    """Raise CompileError at the first inconsistency of ``g`` (loop bodies included), its nodes'
    types checked against the op table ``ops``."""
    _check_structure(g)
    _check_types(g, ops)
