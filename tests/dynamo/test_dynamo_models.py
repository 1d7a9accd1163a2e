"""torch.compile(model, backend="pypto") on plain torch.nn models, eager vs pypto, on every backend
that exists here (others are skipped with the reason).

Tolerances: fp32 results match eager to 1e-4 (relative to the output's scale); bf16 results are
compared with an fp32 copy of the model and must be within 2x eager bf16's own error plus 1e-2 of it
(pypto may round differently from eager, never worse than that)."""
import copy

import pytest
import torch

import pypto.dynamo as pd
from dynamo_cases import backends, check_ran_in_pypto
from dynamo_models import MODELS, TransformerLayer, MLP

# the quick suite: every model and dtype on reference; the MLP and the bf16 transformer layer on sim
# (the layer holds the other models); the rest (and everything on cpu but the fp32 MLP) with --runslow
MODEL_CASES = [
    pytest.param(b, name, dt, id=f"{b}-{name}-{'fp32' if dt == torch.float32 else 'bf16'}",
                 marks=[pytest.mark.slow] if (b == "cpu" and (name, dt) != ("mlp", torch.float32)) or
                 (b == "sim" and name != "mlp" and (name, dt) != ("transformer_layer", torch.bfloat16)) else [])
    for b in ("reference", "sim", "cpu") for name in MODELS for dt in (torch.float32, torch.bfloat16)]


def _compile(model, backend, **kw):
    return torch.compile(model, backend="pypto", options={"backend": backend}, **kw)


def _scale(t):
    return t.float().abs().max().item() + 1e-6


@pytest.mark.parametrize("backend,name,dtype", MODEL_CASES, indirect=["backend"])
def test_model_matches_eager(name, dtype, backend):
    torch.manual_seed(0)
    model32 = MODELS[name]().eval()
    model = copy.deepcopy(model32).to(dtype)
    compiled = _compile(copy.deepcopy(model), backend)
    x32 = torch.randn(2, 7, 16)
    x = x32.to(dtype)
    with torch.no_grad():
        got, eager, exact = compiled(x), model(x), model32(x32)
    assert got.dtype == dtype and got.shape == eager.shape
    if dtype == torch.float32:
        torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-4 * _scale(eager))
    else:
        err = (got.float() - exact).abs().max().item()
        eager_err = (eager.float() - exact).abs().max().item()
        assert err <= 2 * eager_err + 1e-2 * _scale(exact), (err, eager_err)
    check_ran_in_pypto(backend)


@pytest.mark.parametrize("backend", backends(slow=("sim", "cpu")), indirect=True)
def test_dynamic_sequence_lengths_compile_once(backend):
    torch.manual_seed(0)
    model = TransformerLayer().eval()
    compiled = _compile(copy.deepcopy(model), backend, dynamic=True)
    compiled_after_first = None
    with torch.no_grad():
        for t in (3, 8, 13):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
            compiled_after_first = compiled_after_first or pd.counters["partitions"]
    check_ran_in_pypto(backend)
    assert pd.counters["graphs"] == 1 and pd.counters["partitions"] == compiled_after_first
    assert pd.counters["runs"] == 3 * compiled_after_first
    graph = pd.partitions[-1].conv.graph
    # sizes are the shape environment's symbols (from FakeTensor metadata), not placeholder names
    assert graph.symbols and all(s.name.startswith("s") and s.name[1:].isdigit() for s in graph.symbols)


@pytest.mark.parametrize("backend", backends(), indirect=True)
def test_symint_used_as_a_scalar(backend):
    def f(x):
        return (x * x.shape[1]).exp() / x.shape[0] + (x * 4 + 3 < x.shape[1]).float()
    compiled = _compile(f, backend, dynamic=True)
    for t in (3, 6):
        x = torch.randn(2, t)
        torch.testing.assert_close(compiled(x), f(x))
        x = torch.arange(2.0 * t).reshape(2, t) / 4     # comparisons land on both sides
        torch.testing.assert_close(compiled(x), f(x))
    check_ran_in_pypto(backend)
    assert pd.counters["graphs"] == 1 and pd.counters["runs"] == 4
    if backend == "reference":
        assert pd.counters["eager_ops"] == 0


@pytest.mark.parametrize("backend,name", [
    pytest.param(b, name, id=f"{b}-{name}", marks=[pytest.mark.slow] if b == "cpu" or (b, name) == (
        "sim", "transformer_layer") else []) for b in ("reference", "sim", "cpu") for name in ("mlp", "transformer_layer")],
    indirect=["backend"])
def test_backward_gradients_match_eager(name, backend):
    torch.manual_seed(0)
    model = MODELS[name]()
    twin = copy.deepcopy(model)
    compiled = _compile(twin, backend)
    x = torch.randn(2, 5, 16, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    y, y2 = model(x), compiled(x2)
    g = torch.randn_like(y)
    y.backward(g)
    y2.backward(g)
    torch.testing.assert_close(y2, y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-4, atol=1e-4)
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=n)
    # the backward graph itself ran through pypto
    check_ran_in_pypto(backend)
    assert any("_bw_" in p.name for p in pd.partitions)
    assert pd.counters["fallbacks"] == 0


@pytest.mark.parametrize("backend", backends(slow=("sim", "cpu")), indirect=True)
def test_mlp_bf16_training_step(backend):
    torch.manual_seed(0)
    model = MLP().to(torch.bfloat16)
    twin = copy.deepcopy(model)
    compiled = _compile(twin, backend)
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    model(x).float().square().sum().backward()
    compiled(x).float().square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad.float(), p.grad.float(), rtol=2e-2, atol=2e-2 * _scale(p.grad))
    check_ran_in_pypto(backend)


@pytest.mark.parametrize("backend", backends(), indirect=True)
def test_indexing_and_scans_dynamic(backend):
    from dynamo_models import IndexingAndScans
    torch.manual_seed(0)
    model = IndexingAndScans().eval()
    compiled = _compile(model, backend, dynamic=True)
    with torch.no_grad():
        for t in (4, 9):
            ids, x = torch.randint(0, 10, (2, t)), torch.randn(2, t)
            x[0, 1], x[1, 2] = float("nan"), float("-inf")
            torch.testing.assert_close(compiled(ids, x), model(ids, x), equal_nan=True)
    check_ran_in_pypto(backend)
    assert pd.counters["graphs"] == 1
    if backend == "reference":
        assert pd.counters["partitions"] == 1 and pd.counters["eager_ops"] == 0


@pytest.mark.parametrize("backend", backends(slow=("sim", "cpu")), indirect=True)
def test_dynamic_training_keeps_float_attributes_in_pypto(backend):
    """Under dynamic=True dynamo passes a module's float attribute (RMSNorm eps) as a 0-d float64
    input; it must not split the graph, and gradients must match."""
    torch.manual_seed(0)
    model = MODELS["rmsnorm_swiglu"]()
    twin = copy.deepcopy(model)
    compiled = _compile(twin, backend, dynamic=True)
    for t in (3, 6):
        x = torch.randn(2, t, 16)
        model(x).sum().backward()
        compiled(x).sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4)
    check_ran_in_pypto(backend)
    assert pd.counters["graphs"] == 2        # one forward and one backward graph for both lengths
    if backend == "reference":               # (lowered backends may keep ops they cannot lower in eager)
        assert pd.counters["partitions"] == 2 and pd.counters["eager_ops"] == 0
