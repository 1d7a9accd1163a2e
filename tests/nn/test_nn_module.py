"""pypto.Module machinery: registration, iteration, state dicts, dtype/mode changes, compilation with
parameters as graph inputs, dynamic dims, buffers written back, errors."""
import copy
import pickle

import pytest
import torch
import torch.nn as tnn

import pypto
import pypto.nn as nn
import pypto.nn.functional as F


class FP16GEMM(pypto.Module):              # the seed example of issue 2, as written
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = pypto.Parameter(pypto.randn(out_features, in_features, dtype=pypto.float32))
        self.bias = pypto.Parameter(pypto.zeros(out_features, dtype=pypto.float32))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Block(pypto.Module):
    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d)
        self.register_buffer("scale", torch.full((d,), 0.5))
        self.register_buffer("cache", torch.zeros(2), persistent=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x)))) * self.scale


class TorchBlock(tnn.Module):
    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.norm = tnn.RMSNorm(d, eps=1e-6)
        self.up = tnn.Linear(d, hidden, bias=False)
        self.down = tnn.Linear(hidden, d)
        self.register_buffer("scale", torch.full((d,), 0.5))
        self.register_buffer("cache", torch.zeros(2), persistent=False)

    def forward(self, x):
        return x + self.down(tnn.functional.silu(self.up(self.norm(x)))) * self.scale


# ------------------------------------------------------------------ the seed example
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_seed_fp16gemm(dtype, assert_close):
    m = FP16GEMM(32, 16).to(dtype)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    for rows in (1, 7, 64):
        x = torch.randn(rows, 32).to(dtype)
        assert_close(m(x), tnn.functional.linear(x, m.weight, m.bias), dtype)
    assert m.compiled.trace_count == 1


def test_parameters_are_graph_inputs_not_constants():
    m = Block()
    g = m.trace(torch.randn(3, 5, 8))
    ops = [g.op(n) for n in g.nodes()]
    assert "constant" not in ops
    names = [g.info(i).name for i in g.inputs]
    assert names == ["x", "norm_weight", "up_weight", "down_weight", "down_bias", "scale", "cache"]


def test_new_weights_reuse_the_compilation(assert_close):
    m, ref = Block(), TorchBlock()
    x = torch.randn(2, 3, 8)
    m(x)
    for _ in range(2):
        for p in ref.parameters():
            tnn.init.normal_(p)
        m.load_state_dict(ref.state_dict())
        with torch.no_grad():
            assert_close(m(x), ref(x))
    assert m.compiled.trace_count == 1


# ------------------------------------------------------------------ registration and iteration
def test_registration_and_iteration_match_torch():
    m, ref = Block(), TorchBlock()
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in m.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert [n for n, _ in m.named_modules()] == [n for n, _ in ref.named_modules()]
    assert [n for n, _ in m.named_children()] == ["norm", "up", "down"]
    assert list(m.state_dict()) == list(ref.state_dict())          # non-persistent 'cache' left out
    assert len(list(m.parameters())) == 4 and len(list(m.buffers())) == 2
    assert isinstance(m.up, nn.Linear) and m.up.bias is None
    assert "up" in dir(m) and "scale" in dir(m)


def test_reassigning_and_deleting_attributes():
    m = Block()
    m.up = nn.Linear(8, 16)                   # replace a submodule
    assert "up.bias" in m.state_dict()
    m.scale = torch.ones(8)                   # a buffer stays a buffer
    assert torch.equal(m.state_dict()["scale"], torch.ones(8))
    m.extra = pypto.Parameter(torch.zeros(3))
    assert "extra" in m.state_dict()
    del m.extra
    assert "extra" not in m.state_dict() and not hasattr(m, "extra")
    m.down = None
    assert "down.weight" not in m.state_dict()


def test_tied_weights_are_one_input():
    class Tied(pypto.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    m = Tied()
    assert [n for n, _ in m.named_parameters()] == ["a.weight"]
    assert list(m.state_dict()) == ["a.weight", "b.weight"]          # torch lists both names
    x = torch.randn(2, 4)
    g = m.trace(x)
    assert len(g.inputs) == 2
    w = m.a.weight
    torch.testing.assert_close(m(x), x @ w.T @ w.T)


# ------------------------------------------------------------------ state dicts
def test_load_state_dict_converts_dtype_and_keeps_identity():
    m = Block().half()
    w = m.up.weight
    sd = TorchBlock().state_dict()
    m.load_state_dict(sd)
    assert m.up.weight is w and w.dtype == torch.float16
    torch.testing.assert_close(w, sd["up.weight"].half())


def test_load_state_dict_errors_are_clear():
    m = Block()
    sd = TorchBlock().state_dict()
    before = m.up.weight.clone()
    bad = dict(sd)
    del bad["down.bias"]
    bad["extra.weight"] = torch.zeros(1)
    bad["up.weight"] = torch.zeros(8, 16)
    with pytest.raises(nn.StateDictError) as e:
        m.load_state_dict(bad)
    text = str(e.value)
    assert "missing key 'down.bias'" in text and "unexpected key 'extra.weight'" in text
    assert "'up.weight': expected shape [16, 8] (the module's), found [8, 16]" in text
    assert e.value.loc.file == __file__
    assert torch.equal(m.up.weight, before), "nothing is copied when loading fails"


def test_load_state_dict_non_strict():
    m = Block()
    sd = TorchBlock().state_dict()
    del sd["down.bias"]
    sd["foo"] = torch.zeros(1)
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["down.bias"] and res.unexpected_keys == ["foo"]
    sd["up.weight"] = torch.zeros(3)
    with pytest.raises(nn.StateDictError, match="expected shape"):
        m.load_state_dict(sd, strict=False)          # shape mismatches always raise
    with pytest.raises(pypto.TypeMismatchError):
        m.load_state_dict([1, 2])


def test_load_state_dict_assign():
    m = Block()
    sd = TorchBlock().state_dict()
    m.load_state_dict(sd, assign=True)
    assert isinstance(m.up.weight, pypto.Parameter)
    torch.testing.assert_close(m.up.weight, sd["up.weight"])


# ------------------------------------------------------------------ dtype and modes
def test_dtype_conversion_recompiles():
    m = Block()
    m.register_buffer("steps", torch.zeros(1, dtype=torch.int64))
    x = torch.randn(2, 8)
    m(x)
    m.bfloat16()
    assert all(p.dtype == torch.bfloat16 for p in m.parameters())
    assert m.scale.dtype == torch.bfloat16 and m.steps.dtype == torch.int64
    y = m(x.bfloat16())
    assert y.dtype == torch.bfloat16 and m.compiled.trace_count == 2
    assert m.float().up.weight.dtype == torch.float32
    assert m.to("float16").up.weight.dtype == torch.float16
    assert m.to(torch.float32, "cpu").up.weight.dtype == torch.float32
    with pytest.raises(pypto.PyptoError, match="expected 'cpu'"):
        m.to("cuda")
    with pytest.raises(pypto.TypeMismatchError, match="floating"):
        m.to(pypto.int32)


def test_train_eval_flags_key_the_cache():
    class Mode(pypto.Module):
        def forward(self, x):
            return x * 2.0 if self.training else x * 3.0

    outer = nn.Sequential(Mode())
    x = torch.ones(2, 3)
    assert torch.equal(outer(x), x * 2)
    outer.eval()
    assert not outer[0].training
    assert torch.equal(outer(x), x * 3)
    assert outer.train().training and outer[0].training
    assert torch.equal(outer(x), x * 2)
    assert outer.compiled.trace_count == 2


def test_copy_and_pickle():
    m = Block()
    x = torch.randn(2, 8)
    y = m(x)
    c = copy.deepcopy(m)
    c.up.weight.data.zero_()
    torch.testing.assert_close(m(x), y)                   # the copy owns its weights and its compilation
    assert not torch.equal(c(x), y)
    p = pickle.loads(pickle.dumps(m))
    torch.testing.assert_close(p(x), y)
    assert isinstance(p.up.weight, pypto.Parameter)


# ------------------------------------------------------------------ dynamic dims
def test_default_dynamic_dims_serve_every_length():
    m = nn.Linear(8, 4)
    g = m.trace(torch.randn(2, 3, 8))
    assert [str(d) for d in g.info(g.inputs[0]).shape] == ["input_d0", "input_d1", "8"]
    for t in (1, 7, 64, 1000):
        x = torch.randn(2, t, 8)
        torch.testing.assert_close(m(x), tnn.functional.linear(x, m.weight, m.bias))
    assert m.compiled.trace_count == 1


def test_compile_static_and_named_dims():
    m = nn.Linear(8, 4).compile(dynamic=False)
    for t in (1, 2):
        m(torch.randn(t, 8))
    assert m.compiled.trace_count == 2
    m.compile(dynamic={"input": {0: "B", 1: "T"}})
    g = m.trace(torch.randn(5, 5, 8))
    assert [str(d) for d in g.info(g.inputs[0]).shape] == ["B", "T", "8"]
    m.compile(dynamic={"input": [-2]})
    g = m.trace(torch.randn(5, 3, 8))
    assert [str(d) for d in g.info(g.inputs[0]).shape] == ["5", "input_d1", "8"]
    with pytest.raises(pypto.ShapeError, match="K=input_d1"):
        m.compile(dynamic=True)(torch.randn(5, 8))       # the feature dim must stay static for the weight
    g = nn.SiLU().compile(dynamic=True).trace(torch.randn(5, 8))
    assert [str(d) for d in g.info(g.inputs[0]).shape] == ["input_d0", "input_d1"]


def test_forward_annotations_win():
    class Ann(pypto.Module):
        def __init__(self):
            super().__init__()
            self.w = pypto.Parameter(torch.ones(8))

        def forward(self, x: pypto.Tensor[[pypto.DYNAMIC, 8], pypto.float32]):
            return x * self.w

    m = Ann()
    g = m.trace(torch.randn(3, 8))
    assert str(g.info(g.inputs[0]).shape[0]) == "x_d0"
    with pytest.raises(pypto.DTypeError, match="must be float32"):
        m(torch.randn(3, 8).half())


def test_string_annotations_are_evaluated():      # as under `from __future__ import annotations`
    class Ann(pypto.Module):
        def forward(self, x: "pypto.Tensor[[pypto.DYNAMIC, 8], pypto.float32]"):
            return x * 2.0

    g = Ann().trace(torch.randn(3, 8))
    assert [str(d) for d in g.info(g.inputs[0]).shape] == ["x_d0", "8"]
    with pytest.raises(pypto.ShapeError, match="must have rank 2"):
        Ann()(torch.randn(3))


def test_non_tensor_arguments_key_the_cache():
    class Scaled(pypto.Module):
        def forward(self, x, factor: float = 2.0, mask=None):
            y = x * factor
            return y if mask is None else pypto.where(mask, y, 0.0)

    m = Scaled()
    x = torch.randn(3, 4)
    torch.testing.assert_close(m(x), x * 2)
    torch.testing.assert_close(m(x, 5.0), x * 5)
    mask = x > 0
    torch.testing.assert_close(m(x, mask=mask), torch.where(mask, x * 2, 0.0))
    assert m.compiled.trace_count == 3


# ------------------------------------------------------------------ buffers
def test_buffer_values_are_inputs_and_writes_go_back():
    class Acc(pypto.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(4))
            self.register_buffer("last", torch.zeros(4))

        def forward(self, x):
            self.total = self.total + x          # assignment writes the buffer
            self.last[...] = x * 2.0             # so does an indexed write
            return self.total * 1.0

    m = Acc()
    for k in range(1, 4):
        y = m(torch.ones(4))
        assert torch.equal(y, torch.full((4,), float(k))) and torch.equal(m.total, y)
    assert torch.equal(m.last, torch.full((4,), 2.0))
    assert m.compiled.trace_count == 1


# ------------------------------------------------------------------ composition
def test_module_inside_jit_function_is_inlined():
    lin = nn.Linear(4, 2)

    @pypto.jit
    def f(x):
        return lin(x) + 1.0

    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), tnn.functional.linear(x, lin.weight, lin.bias) + 1)
    assert lin._compiler is None                          # not compiled on its own


def test_submodule_called_alone_compiles_separately():
    m = Block()
    x = torch.randn(2, 8)
    torch.testing.assert_close(m.up(x), x @ m.up.weight.T)
    assert m.up.compiled is not None and m._compiler is None


def test_module_list_and_dict():
    class Stack(pypto.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 1)})

        def forward(self, x):
            for layer in self.layers:
                x = F.silu(layer(x))
            return self.heads["a"](x), self.heads["b"](x)

    m = Stack()
    assert "layers.2.bias" in m.state_dict() and "heads.b.weight" in m.state_dict()
    a, b = m(torch.randn(5, 4))
    assert a.shape == (5, 2) and b.shape == (5, 1)
    assert len(m.layers) == 3 and list(m.heads) == ["a", "b"]


# ------------------------------------------------------------------ Parameter
def test_parameter_is_a_plain_torch_tensor():
    p = pypto.Parameter(torch.ones(2, 3))
    assert isinstance(p, torch.Tensor) and not p.requires_grad
    q = p * 2
    assert type(q) is torch.Tensor
    assert "pypto.Parameter containing" in repr(p)
    assert isinstance(copy.deepcopy(p), pypto.Parameter)
    with pytest.raises(pypto.TypeMismatchError, match="expected a torch tensor"):
        pypto.Parameter([1.0, 2.0])
    with pytest.raises(pypto.DTypeError):
        pypto.Parameter(torch.zeros(2, dtype=torch.complex64))


# ------------------------------------------------------------------ user errors
def test_assignment_errors():
    m = Block()
    with pytest.raises(pypto.TypeMismatchError, match="expected a pypto.Parameter or None"):
        m.up.weight = torch.zeros(16, 8)
    with pytest.raises(pypto.TypeMismatchError, match="expected a pypto.Module or None"):
        m.up = 3
    with pytest.raises(pypto.TypeMismatchError, match="expected a torch tensor or None"):
        m.scale = 3.0

    class NoInit(pypto.Module):
        def __init__(self):
            self.w = pypto.Parameter(torch.zeros(1))

    with pytest.raises(pypto.PyptoError, match=r"call super\(\).__init__\(\)"):
        NoInit()


def test_compile_errors():
    class VarArgs(pypto.Module):
        def forward(self, *xs):
            return xs[0]

    with pytest.raises(pypto.PyptoError, match="needs named arguments"):
        VarArgs()(torch.ones(2))
    with pytest.raises(pypto.PyptoError, match="unknown backend"):
        nn.Linear(2, 2).compile(backend="gpu")
    with pytest.raises(pypto.PyptoError, match="expected names of forward's arguments"):
        nn.Linear(2, 2).compile(dynamic={"x": [0]})(torch.ones(2, 2))
    with pytest.raises(pypto.ShapeError, match="out of range"):
        nn.Linear(2, 2).compile(dynamic={"input": [3]})(torch.ones(2, 2))
    with pytest.raises(pypto.PyptoError, match="does not define forward"):
        pypto.Module()(torch.ones(1))

    class ReturnsFloat(pypto.Module):
        def forward(self, x):
            return 3.0

    with pytest.raises(pypto.TypeMismatchError, match="must return a pypto.Tensor") as e:
        ReturnsFloat()(torch.ones(2))
    assert e.value.loc.file == __file__ and e.value.loc.func == "forward"
