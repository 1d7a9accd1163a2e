"""Normalisation composites (softmax log_softmax rms_norm layer_norm l2norm) vs torch eager, both as
recorded (reference semantics) and as decomposed into primitive ops; dynamic sizes; errors."""
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto.errors import DTypeError, ShapeError, TypeMismatchError
from pypto.ops import REGISTRY

from .op_testing import T, Case, Inp, case_params, check_error, dynamic_params, run_case, run_dynamic

X = Inp((T, 64))
X3 = Inp((2, T, 32))


def fla_l2norm(x, dim=-1, eps=1e-6):
    """flash-linear-attention's l2norm, written independently in fp32."""
    xf = x.float()
    return (xf / torch.sqrt((xf * xf).sum(dim, keepdim=True) + eps)).to(x.dtype)


def torch_rms_norm(x, w=None, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


CASES = [
    Case("softmax_last", lambda m, x: m.softmax(x, -1), [X]),
    Case("softmax_dim0_method", lambda m, x: x.softmax(0), [X3]),
    Case("softmax_to_f32", lambda m, x: m.softmax(x, -1, dtype=m.float32), [X]),
    Case("log_softmax_last", lambda m, x: m.log_softmax(x, -1), [X]),
    Case("log_softmax_middle", lambda m, x: x.log_softmax(1), [X3]),
    Case("rms_norm_weight", lambda m, x, w: m.rms_norm(x, w, 1e-6) if m is pypto else torch_rms_norm(x, w),
         [X, Inp((64,))]),
    Case("rms_norm_plain_3d", lambda m, x: m.rms_norm(x, eps=1e-5) if m is pypto else torch_rms_norm(x, eps=1e-5),
         [X3]),
    Case("layer_norm_affine", lambda m, x, w, b: m.layer_norm(x, (64,), w, b) if m is pypto
         else F.layer_norm(x, (64,), w, b), [X, Inp((64,)), Inp((64,))]),
    Case("layer_norm_two_dims", lambda m, x, w: m.layer_norm(x, [4, 32], w, eps=1e-3) if m is pypto
         else F.layer_norm(x, (4, 32), w, eps=1e-3), [Inp((T, 4, 32)), Inp((4, 32))]),
    Case("layer_norm_bias_only", lambda m, x, b: m.layer_norm(x, 64, bias=b) if m is pypto
         else F.layer_norm(x, (64,), bias=b), [X, Inp((64,))]),
    Case("l2norm_last", lambda m, x: m.l2norm(x) if m is pypto else fla_l2norm(x), [X]),
    Case("l2norm_dim0", lambda m, x: m.l2norm(x, 0, eps=1e-5) if m is pypto else fla_l2norm(x, 0, 1e-5), [X3]),
]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_norm_matches_torch(case, dtype):
    run_case(case, dtype)


@pytest.mark.parametrize("case", dynamic_params(CASES))
def test_norm_dynamic_sizes_one_trace(case):
    run_dynamic(case)


def _decomposed(case: Case) -> Case:
    """The same case with the composite replaced by its decomposition (traced from the recorded node)."""
    def fn(m, *xs):
        if m is not pypto:
            return (case.ref or case.fn)(m, *xs)
        node_out = case.fn(m, *xs)
        g = node_out._graph
        node = g.node(node_out._node)
        ins = [pypto.Tensor._wrap(g, i) for i in node["inputs"]]
        return REGISTRY[node["op"]].decompose(m, ins, node["attrs"])
    return Case(case.name + "_decomposed", fn, case.inputs, dtypes=case.dtypes, tol=case.tol)


@pytest.mark.parametrize("case,dtype", case_params([_decomposed(c) for c in CASES]))
def test_norm_decomposition_matches_torch(case, dtype):
    f = run_case(case, dtype)
    g = next(iter(f.cache.values())).graph
    out_ops = {g.op(o.node) for o in g.outputs}
    assert not out_ops & {"softmax", "log_softmax", "rms_norm", "layer_norm", "l2norm"}


def test_softmax_decomposition_is_fp32_inside():
    """fp16 in, fp16 out, and every arithmetic op of the decomposition runs in fp32 (as the hardware)."""
    f = pypto.jit(lambda x: REGISTRY["softmax"].decompose(pypto, [x], {"dim": 1}), backend="reference")
    g = f.trace(torch.randn(4, 16, dtype=torch.float16))
    ops = [(g.op(n), g.info(n).dtype) for n in g.nodes() if g.op(n) not in ("input", "scalar")]
    assert ops[0] == ("cast", pypto.float32) and ops[-1] == ("cast", pypto.float16)
    assert [op for op, _ in ops[1:-1]] == ["amax", "sub", "exp", "sum", "div"]
    assert all(dt == pypto.float32 for _, dt in ops[1:-1])


ERRORS = [
    (lambda m, x: m.softmax(x, 2), [X], ShapeError, r"softmax: dim 2 is out of range"),
    (lambda m, x: m.softmax(x, None), [X], ShapeError, r"softmax: dim is required"),
    (lambda m, x: m.softmax(x, -1), [Inp((T, 4), "int", torch.int32)], DTypeError, r"softmax: input must be a floating"),
    (lambda m, x, w: m.rms_norm(x, w), [X, Inp((32,))], ShapeError, r"rms_norm: weight must have shape \[64\]"),
    (lambda m, x: m.rms_norm(x, eps="small"), [X], TypeMismatchError, r"rms_norm: eps must be a number"),
    (lambda m, x: m.layer_norm(x, (32,)), [X], ShapeError, r"normalized_shape \[32\] must equal the last dims"),
    (lambda m, x, b: m.layer_norm(x, (64,), None, b), [X, Inp((2, 32))], ShapeError, r"layer_norm: bias must have"),
    (lambda m, x: m.l2norm(x, -3), [X], ShapeError, r"l2norm: dim -3 is out of range"),
    (lambda m, x: m.rms_norm(3.0), [X], TypeMismatchError, r"pypto.rms_norm: expected a pypto.Tensor"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_norm_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)
