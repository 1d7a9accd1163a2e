"""TensorGraph: the text printer, DOT export, JSON round trip (symbolic sizes, dtypes, constants, loops,
source locations) and the verifier, which must accept traced graphs and reject broken ones."""
import copy
import json
import math

import pytest
import torch

import pypto
from pypto.sanitize import path_component
from pypto.errors import CompileError
from pypto.ir.tensor_graph import TensorGraph, ValueInfo
from pypto.ops.registry import REGISTRY
from pypto.runtime.reference import run_graph

F16 = pypto.float16


@pypto.jit(backend="reference")
def block_softmax(x: pypto.Tensor[[pypto.dynamic("T"), 32], F16], w: pypto.Tensor[[32, 16], F16]):
    n = x.shape[0]
    out = pypto.zeros(n, 16, dtype=F16)
    for i in pypto.loop(pypto.ceildiv(n, 8)):
        rows = x[i * 8:(i + 1) * 8, :]
        h = pypto.matmul(pypto.softmax(rows, -1), w) + torch.ones(16, dtype=torch.float16)
        out[i * 8:(i + 1) * 8, :] = pypto.where(h > 0, h, -math.inf).amax(-1, keepdim=True).expand(-1, 16)
    return out


def traced():
    return block_softmax.trace(torch.randn(20, 32, dtype=torch.float16), torch.randn(32, 16, dtype=torch.float16))


def test_printer_lists_nodes_with_types_attrs_and_lines():
    text = str(traced())
    first = text.splitlines()[0]
    assert first.startswith("graph block_softmax(%0: f16[T, 32], %1: f16[32, 16]) -> (") and "sizes(T)" in first
    assert "= loop(" in text and "stop=ceiling(T/8)" in text and "body(" in text
    assert "softmax(" in text and "{dim=1}" in text and "tensor[16]" in text
    assert "test_tensor_graph.py:" in text


def test_dot_has_a_node_per_op_and_an_edge_per_operand():
    g = traced()
    dot = g.to_dot()
    assert dot.startswith('digraph "block_softmax"') and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == g.nx.number_of_edges()
    assert all(f"n{n} [" in dot for n in g.nodes())


def test_json_round_trip_is_lossless_and_runs():
    g = traced()
    data = json.loads(json.dumps(g.to_json()))
    g2 = TensorGraph.from_json(data)
    assert str(g2) == str(g) and g2.to_json() == g.to_json()
    g2.verify(REGISTRY)
    x, w = torch.randn(13, 32, dtype=torch.float16), torch.randn(32, 16, dtype=torch.float16)
    env = {"T": 13}
    for a, b in zip(run_graph(g, [x, w], env), run_graph(g2, [x, w], env)):
        assert torch.equal(a, b)


def test_verifier_accepts_every_traced_graph():
    traced().verify(REGISTRY)


def _corrupt(mutate):
    g = copy.deepcopy(traced())
    mutate(g)
    return g


def _first(g, op):
    return next(n for n in g.nodes() if g.op(n) == op)


def _body(g):
    return g.node(_first(g, "loop"))["attrs"]["body"]


def _set_out(g, op, info):
    g.node(_first(g, op))["out"] = info


BROKEN = [
    ("wrong ValueInfo", lambda g: _set_out(_body(g), "softmax", ValueInfo((8, 32), F16)),
     r"'softmax' infers f16\[Min\(8, T - 8\*i\d+\), 32\] but the node records f16\[8, 32\]"),
    ("wrong dtype", lambda g: _set_out(_body(g), "matmul", ValueInfo(_body(g).info(_first(_body(g), "matmul")).shape,
                                                                     pypto.float32)), r"'matmul' infers f16"),
    ("edge missing", lambda g: g.nx.remove_edge(*next(iter(g.nx.in_edges(_first(g, "loop"))))),
     r"edges .* do not match its operands"),
    ("operand after user", lambda g: g.node(_first(g, "full"))["inputs"].append(max(g.nodes())),
     r"does not come before it"),
    ("output missing", lambda g: g.outputs.__setitem__(0, type(g.outputs[0])(999)), r"output %999 does not exist"),
    ("input list", lambda g: g.inputs.pop(), r"an 'input' node that is not among the graph's inputs"),
    ("unknown op", lambda g: g.node(_first(g, "full")).__setitem__("op", "frobnicate"), r"unknown op 'frobnicate'"),
    ("bad attrs", lambda g: _body(g).node(_first(_body(g), "softmax"))["attrs"].__setitem__("dim", 7),
     r"'softmax' rejects its recorded operands: softmax: dim 7 is out of range"),
    ("loop carried", lambda g: g.node(_first(g, "loop"))["attrs"].__setitem__("carried", [0]),
     r"carried value 0: body output f16\[T, 16\], body input f16\[T, 32\]"),
    ("loop_result index", lambda g: g.node(_first(g, "loop_result"))["attrs"].__setitem__("index", 3),
     r"result index 3 is out of range"),
]


@pytest.mark.parametrize("what,mutate,match", BROKEN, ids=[b[0] for b in BROKEN])
def test_verifier_rejects_broken_graphs(what, mutate, match):
    g = _corrupt(mutate)
    with pytest.raises(CompileError, match=match):
        g.verify(REGISTRY)


def test_dump_writes_text_dot_and_json(tmp_path):
    f = pypto.jit(lambda x: x.softmax(-1), backend="reference", dump=str(tmp_path))
    f(torch.randn(2, 3))
    d = tmp_path / path_component("<lambda>")       # '<lambda>' is no safe folder name: sanitised, hashed
    assert d.name.startswith("_lambda_-")
    (d,) = d.iterdir()                               # one specialisation
    stem = "01_tensor_graph_traced"
    assert {p.name for p in d.iterdir()} >= {f"{stem}.txt", f"{stem}.dot", f"{stem}.json"}
    TensorGraph.from_json(json.loads((d / f"{stem}.json").read_text())).verify(REGISTRY)


def test_verifier_checks_types_against_the_table_it_is_given():
    """The IR has no op table of its own: an op missing from the given table is unknown, and an
    entry whose infer disagrees with the recorded value is reported."""
    g = traced()
    table = {k: v for k, v in REGISTRY.items() if k != "softmax"}
    with pytest.raises(CompileError, match="unknown op 'softmax'"):
        g.verify(table)
    wrong = copy.copy(REGISTRY["matmul"])
    wrong.infer = lambda infos, attrs: ValueInfo(infos[0].shape, pypto.float32)
    with pytest.raises(CompileError, match=r"'matmul' infers f32"):
        g.verify({**REGISTRY, "matmul": wrong})
