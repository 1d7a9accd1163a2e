"""The backend's plumbing: entry point, options, partitioning around unsupported ops, and the eager
fallback on every kind of pypto failure (with a logged reason), never a wrong answer."""
import importlib.metadata
import logging
import os
import sys

import pytest
import sympy
import torch

import pypto
import pypto.dynamo as pd
import pypto.fx.convert as fxc
import pypto.fx.meta as fxm
import pypto.fx.rules as fxr
from dynamo_models import MLP, WithUnsupportedOp

aten = torch.ops.aten


def _compile(model, **options):
    return torch.compile(model, backend="pypto", options={"backend": "reference", **options})


def test_entry_point_names_the_backend():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert [e.value for e in eps if e.name == "pypto"] == ["pypto.dynamo:pypto_backend"]
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("pypto") is pd.pypto_backend
    assert "torch_npu" not in sys.modules


def test_options_are_checked():
    assert pd.parse_options(None).backend == pypto.get_backend()
    assert pd.parse_options({"backend": "reference", "machine": "a5"}).machine == "a5"
    with pytest.raises(pypto.PyptoError, match="unknown option.*bogus"):
        pd.parse_options({"bogus": 1})
    with pytest.raises(pypto.PyptoError, match="unknown backend"):
        pd.parse_options({"backend": "tpu"})
    with pytest.raises(Exception, match="unknown option"):
        _compile(torch.exp, bogus=1)(torch.randn(3))


def test_unsupported_op_splits_the_graph(caplog):
    torch.manual_seed(0)
    model = WithUnsupportedOp().eval()
    compiled = _compile(model)
    x = torch.randn(3, 4, 16)
    with caplog.at_level(logging.INFO, logger="pypto.dynamo"), torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    # fc1+tanh+scale before cumprod, fc2+exp after it: two pypto partitions, cumprod in eager
    assert pd.counters["partitions"] == 2 and pd.counters["runs"] == 2
    assert pd.counters["eager_ops"] >= 1
    assert "no pypto rule for aten.cumprod" in caplog.text


def _broken(*args, **kwargs):
    raise RuntimeError("deliberately broken converter")


def test_broken_conversion_falls_back_with_reason(monkeypatch, caplog):
    monkeypatch.setitem(fxr.RULES, aten.addmm.default, fxr.Rule(_broken, needs=("matmul",)))
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = _compile(model)
    x = torch.randn(5, 16)
    with caplog.at_level(logging.WARNING, logger="pypto.dynamo"), torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert pd.counters["fallbacks"] == 1 and pd.counters["runs"] == 0
    assert "runs in eager" in caplog.text and "deliberately broken converter" in caplog.text


def test_wrong_shape_from_a_rule_is_caught(monkeypatch, caplog):
    """A rule bug that would give a wrong answer (here: a row sum that forgets to reduce) is caught by
    the check against torch's FakeTensor shapes, and the partition runs in eager."""
    monkeypatch.setitem(fxr.RULES, aten.sum.dim_IntList, fxr.Rule(lambda cx, input, **_: input))

    def f(x):
        return (x.exp().sum(-1, keepdim=True) + 1).log()
    x = torch.randn(4, 6)
    with caplog.at_level(logging.WARNING, logger="pypto.dynamo"):
        torch.testing.assert_close(_compile(f)(x), f(x))
    assert pd.counters["fallbacks"] == 1
    assert "differs from torch's" in caplog.text


def test_failure_at_run_time_falls_back(monkeypatch, caplog):
    def failing_run(self, inputs, env):
        raise pypto.SimError("simulated device failure")
    monkeypatch.setattr(pypto.backends.Compiled, "run", failing_run)
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = _compile(model)
    with caplog.at_level(logging.WARNING, logger="pypto.dynamo"), torch.no_grad():
        for n in (3, 3):
            x = torch.randn(n, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert pd.counters["run_fallbacks"] == 1       # the second call goes straight to eager
    assert "failed at run time" in caplog.text and "simulated device failure" in caplog.text


def test_strict_mode_raises(monkeypatch):
    monkeypatch.setitem(fxr.RULES, aten.addmm.default, fxr.Rule(_broken, needs=("matmul",)))
    with pytest.raises(Exception, match="deliberately broken"):
        _compile(MLP().eval(), strict=True)(torch.randn(2, 16))


def test_backward_through_an_unsupported_op_matches_eager():
    torch.manual_seed(0)
    model = WithUnsupportedOp()
    twin = WithUnsupportedOp()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 16, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    model(x).sum().backward()
    _compile(twin)(x2).sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-4, atol=1e-4)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4)


def test_output_never_aliases_an_input():
    def f(x):
        return x.view(-1), (x * 2).exp()
    x = torch.randn(3, 4)
    a, b = _compile(f)(x)
    torch.testing.assert_close(b, (x * 2).exp())
    a.add_(1)                              # eager semantics: a is a view of x
    torch.testing.assert_close(a.view(3, 4), x)


def test_dump_writes_each_partition(tmp_path):
    _compile(lambda x: x.sigmoid() * x, dump=str(tmp_path))(torch.randn(4, 4))
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["01_aten_graph.py", "02_tensor_graph_traced.dot", "02_tensor_graph_traced.json",
                     "02_tensor_graph_traced.txt"]
    assert "sigmoid" in next(tmp_path.rglob("02_tensor_graph_traced.txt")).read_text()


def test_size_expressions_translate():
    from torch.utils._sympy.functions import CeilDiv, FloorDiv, Max, ModularIndexing
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    n = pypto.symbolic.symbol("s0")
    assert fxm.size_expr(FloorDiv(s0, 4)) == sympy.floor(n / 4)
    ceil = fxm.size_expr(CeilDiv(s0, 4))
    assert [pypto.symbolic.evaluate(ceil, {"s0": v}) for v in (4, 5, 8, 9)] == [1, 2, 2, 3]
    assert fxm.size_expr(Max(s0, 3) * 2) == 2 * sympy.Max(n, 3)
    assert fxm.size_expr(ModularIndexing(s0, 2, 8)) == sympy.Mod(sympy.floor(n / 2), 8)
    assert pypto.symbolic.evaluate(fxm.size_expr(FloorDiv(s0, 4) + 1), {"s0": 10}) == 3
    with pytest.raises(fxm.ConversionError):
        fxm.size_expr(sympy.sin(s0))


def test_wrong_result_from_a_backend_is_caught_by_check(monkeypatch, caplog):
    """check=True compares each partition with eager at its first run per size: a backend returning
    a wrong value (here: every output off by one) is caught, and eager answers from then on."""
    real_run = pypto.backends.Compiled.run

    def wrong_run(self, inputs, env):
        outs, report = real_run(self, inputs, env)
        return [o + 1 for o in outs], report
    monkeypatch.setattr(pypto.backends.Compiled, "run", wrong_run)

    def f(x):
        return torch.tanh(x) * 2
    compiled = _compile(f, check=True)
    x = torch.randn(4, 4)
    with caplog.at_level(logging.WARNING, logger="pypto.dynamo"):
        torch.testing.assert_close(compiled(x), f(x))
        torch.testing.assert_close(compiled(x), f(x))
    assert pd.counters["run_fallbacks"] == 1 and "differs from eager" in caplog.text


@pytest.mark.parametrize("probe_first", [False, True], ids=["split-on-failure", "probe-first"])
def test_probe_keeps_ops_a_lowering_lacks_in_eager(monkeypatch, caplog, probe_first):
    """On a lowered backend each kind of node is compiled alone first; one the lowering rejects stays
    in eager and the rest still runs through pypto (here a fake 'sim' that cannot lower tanh)."""
    import pypto.fx.probe as probe
    probe.clear()
    real_compile = pypto.backends.compile_graph

    def fake_compile(graph, backend, options):
        if backend == "sim" and any(graph.op(n) == "tanh" for n in graph.nodes()):
            raise pypto.CompileError("no tanh on this machine")
        return real_compile(graph, "reference", options)
    monkeypatch.setattr(pypto.backends, "compile_graph", fake_compile)

    def f(x):
        return torch.sigmoid(torch.tanh(x.exp() + 1) * 3)
    x = torch.randn(4, 8)
    with caplog.at_level(logging.INFO, logger="pypto.dynamo"):
        torch.testing.assert_close(_compile(f, backend="sim", check=False, probe=probe_first)(x), f(x))
    assert pd.counters["partitions"] == 2 and pd.counters["eager_ops"] == 1 and not pd.failures
    assert "sim lowering: no tanh on this machine" in caplog.text
    e = pd.Explanation(list(pd.records), 1, 0.0)
    assert [p.status for p in e.partitions] == ["pypto", "pypto"] and e.captured_ops == e.total_ops - 1
    probe.clear()


def test_one_compilation_per_partition(monkeypatch):
    """By default support is decided from the rules: no node is compiled alone, each partition once."""
    import pypto.fx.probe as probe
    probe.clear()
    calls = []
    real_compile = pypto.backends.compile_graph

    def counting(graph, backend, options):
        calls.append(graph.name)
        return real_compile(graph, "reference", options)
    monkeypatch.setattr(pypto.backends, "compile_graph", counting)
    model = WithUnsupportedOp().eval()
    x = torch.randn(3, 4, 16)
    with torch.no_grad():
        torch.testing.assert_close(_compile(model, backend="sim", check=False)(x), model(x), rtol=1e-5, atol=1e-5)
    assert pd.counters["partitions"] == 2 and len(calls) == 2 and not any(c.startswith("probe") for c in calls)


def _symbolic_graph():
    """y: [s0*s1, 16], z: [s0, 16] -> exp(y).view(s0, s1, 16) + z[:, None, :], built by hand with
    FakeTensor metadata (a partition whose inputs carry compound sizes, as after an eager op)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch._dynamo.source import ConstantSource
    env = ShapeEnv()
    s0, s1 = (env.create_symintnode(env.create_symbol(h, ConstantSource(n)), hint=h) for n, h in (("a", 3), ("b", 5)))
    g = torch.fx.Graph()
    with FakeTensorMode(shape_env=env):
        y, z = g.placeholder("y"), g.placeholder("z")
        y.meta["val"], z.meta["val"] = torch.empty(s0 * s1, 16), torch.empty(s0, 16)

        def call(op, *args):
            node = g.call_function(op, args)
            node.meta["val"] = op(*torch.fx.node.map_arg(args, lambda a: a.meta["val"]))
            return node
        out = call(aten.add.Tensor, call(aten.view.default, call(aten.exp.default, y), [s0, s1, 16]),
                   call(aten.unsqueeze.default, z, 1))
    g.output(out)
    return torch.fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.filterwarnings("ignore:Raw SymInt")
def test_compound_input_sizes_are_solved_or_made_opaque():
    gm = _symbolic_graph()
    conv = fxc.convert(gm, "solve")
    # s0 is bound from z's first dim; s1 is solved from y's: s0*s1 = v
    s0 = str(gm.graph.find_nodes(op="placeholder")[1].meta["val"].shape[0])     # z's first dim
    (n0, solved0), (s1, solved1) = [(b[2], b[3] is not None) for b in conv.binders]
    assert (n0, solved0, solved1) == (s0, False, True)
    compiled = pypto.backends.compile_graph(conv.graph, "reference", {})
    for a, b in ((3, 5), (4, 7)):
        y, z = torch.randn(a * b, 16), torch.randn(a, 16)
        env = conv.bind([y, z])
        assert env == {s0: a, s1: b}
        out, _ = compiled.run([y, z], env)
        torch.testing.assert_close(out[0], y.exp().view(a, b, 16) + z[:, None, :])
    # the exp alone: s0*s1 appears only as a whole, so it becomes one opaque size
    exp_only = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    g = exp_only.graph
    y = g.placeholder("y")
    y.meta = dict(next(iter(gm.graph.nodes)).meta)
    e = g.call_function(aten.exp.default, (y,))
    e.meta = dict(next(n for n in gm.graph.nodes if n.target == aten.exp.default).meta)
    g.output(e)
    conv = fxc.convert(exp_only, "opaque")
    assert [b[2] for b in conv.binders] == ["u0"] and conv.bind([torch.randn(12, 16)]) == {"u0": 12}


def test_empty_namespace_package_is_a_clear_error(tmp_path):
    """Run from a folder holding an empty `pypto/` (the parent of a checkout): `import pypto` is then a
    namespace package whose __init__ never ran; torch.compile says so at the user's line instead of
    leaving every op in eager as "unknown op 'matmul'"."""
    import subprocess
    (tmp_path / "pypto").mkdir()
    script = tmp_path / "user_model.py"
    script.write_text("import torch\n"
                      "model = torch.nn.Linear(4, 4)\n"
                      "fast = torch.compile(model, backend='pypto')\n"
                      "fast(torch.randn(2, 4))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0
    assert f"{script}:3:" in run.stderr
    assert "empty namespace package" in run.stderr and str(tmp_path / "pypto") in run.stderr
    assert "unknown op" not in run.stderr
