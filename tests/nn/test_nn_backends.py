"""pypto.nn modules on the lowered backends (sim, cpu) and the README demo, vs torch."""
import importlib
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn as tnn

import pypto
import pypto.nn as nn
import pypto.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


def _lowering_available() -> bool:
    try:
        importlib.import_module("pypto.passes.pipeline")
        return True
    except ModuleNotFoundError:
        return False


class MLP(pypto.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(64, eps=1e-6)
        self.up = nn.Linear(64, 128, bias=False)
        self.down = nn.Linear(128, 64, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


class NormAct(pypto.Module):
    """Vector-unit only: RMSNorm, SiLU, a scalar multiply."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(64, eps=1e-6)

    def forward(self, x):
        return F.silu(self.norm(x)) * 2.0


@pytest.mark.parametrize("backend, dtype", [("sim", torch.float32), ("sim", torch.float16), ("cpu", torch.float32)],
                         ids=["sim-fp32", "sim-fp16", "cpu-fp32"])
def test_vector_module_on_lowered_backend(backend, dtype, assert_close):
    if not _lowering_available():
        pytest.skip("the lowering pipeline (pypto.passes.pipeline) is not available yet")
    m = NormAct().compile(backend=backend).to(dtype)
    m.norm.weight.data.copy_(torch.rand(64) + 0.5)
    for t in (1, 17):
        x = torch.randn(2, t, 64).to(dtype)
        expected = (tnn.functional.silu(tnn.functional.rms_norm(x.float(), [64], m.norm.weight.float(), 1e-6))
                    * 2).to(dtype)
        assert_close(m(x), expected, dtype)
    assert m.compiled.trace_count == 1
    if backend == "sim":
        assert pypto.last_report() is not None


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_mlp_on_lowered_backend(backend, assert_close):
    if not _lowering_available():
        pytest.skip("the lowering pipeline (pypto.passes.pipeline) is not available yet")
    if backend == "cpu":
        import shutil
        if shutil.which("g++") is None:
            pytest.skip("g++ is not installed")
    ref = tnn.Module()
    ref.norm, ref.up, ref.down = tnn.RMSNorm(64, eps=1e-6), tnn.Linear(64, 128, bias=False), tnn.Linear(128, 64, bias=False)
    m = MLP().compile(backend=backend)
    m.load_state_dict(ref.state_dict())
    try:
        m(torch.randn(2, 1, 64))
    except (ImportError, pypto.CompileError, pypto.BackendUnavailableError) as e:
        pytest.skip(f"backend '{backend}' cannot compile this module yet: {e}")
    for t in (1, 17):
        x = torch.randn(2, t, 64)
        with torch.no_grad():
            expected = x + ref.down(tnn.functional.silu(ref.up(ref.norm(x))))
        assert_close(m(x), expected)
    assert m.compiled.trace_count == 1


def test_demo_runs_and_matches_torch(capsys):
    spec = importlib.util.spec_from_file_location("pypto_demo", ROOT / "examples" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.main(["--backend", "reference", "--hidden", "32", "--lengths", "1", "5"]) == 0
    out = capsys.readouterr().out
    assert "graph MLPBlock(" in out and "all results match torch" in out
