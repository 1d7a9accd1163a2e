"""pypto.dynamo.explain(model, *args): partitions, captured vs total ATen ops, each fallback with its
reason (at compile and at run time), compile time per partition."""
import pytest
import torch

import pypto
import pypto.dynamo as pd
import pypto.fx.rules as fxr
from dynamo_models import MLP, WithUnsupportedOp

aten = torch.ops.aten
REF = {"backend": "reference"}


def test_explain_counts_partitions_and_eager_ops():
    torch.manual_seed(0)
    model = WithUnsupportedOp().eval()
    with torch.no_grad():
        e = pd.explain(model, torch.randn(3, 4, 16), options=REF)
    assert len(e.graphs) == 1 and e.dynamo_graphs == 1 and e.graphs[0].name.endswith("_inf")
    assert [p.status for p in e.partitions] == ["pypto", "pypto"] and not e.fallbacks
    (op, why), = e.eager_ops
    assert op == "aten.cumprod.default" and why.startswith("no pypto rule for aten.cumprod")
    # every ATen op is either in a pypto partition or the eager cumprod
    assert e.total_ops == e.captured_ops + 1 == sum(len(p.ops) for p in e.partitions) + 1
    assert e.captured == pytest.approx(e.captured_ops / e.total_ops)
    assert all(p.compile_s >= 0 and p.first_run_s is not None for p in e.partitions)
    text = str(e)
    assert f"{e.captured_ops}/{e.total_ops} ATen ops in pypto" in text and "aten.cumprod.default" in text


def test_explain_names_each_fallback_and_its_reason(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("deliberately broken converter")
    monkeypatch.setitem(fxr.RULES, aten.addmm.default, fxr.Rule(broken, needs=("matmul",)))
    with torch.no_grad():
        e = pd.explain(MLP().eval(), torch.randn(5, 16), options=REF)
    assert len(e.fallbacks) == 1 and "deliberately broken converter" in e.fallbacks[0][1]
    assert e.captured_ops == 0 and e.run_fallbacks == 0
    assert "EAGER" in str(e)


def test_explain_counts_run_time_fallbacks(monkeypatch):
    def failing(self, inputs, env):
        raise pypto.SimError("simulated device failure")
    monkeypatch.setattr(pypto.backends.Compiled, "run", failing)
    with torch.no_grad():
        e = pd.explain(MLP().eval(), torch.randn(5, 16), options=REF)
    assert e.run_fallbacks == 1 and e.captured_ops == 0
    assert e.fallbacks[0][1] == "at run time: simulated device failure"


def test_explain_backward_graph():
    torch.manual_seed(0)
    e = pd.explain(MLP(), torch.randn(4, 16), options=REF, backward=True)
    assert [g.name.rsplit("_", 1)[1] for g in e.graphs] == ["fw", "bw"]
    assert all(g.captured_ops == g.total_ops > 0 for g in e.graphs)
    with pytest.raises(pypto.PyptoError, match="no floating tensor that requires grad"):
        with torch.no_grad():
            pd.explain(MLP(), torch.randn(4, 16), options=REF, backward=True)
