"""pypto.last_report() is the report of the most recent run on any backend and from any front end
(Tensor level, Tile level, Professional mode): one record, in pypto/runtime/report.py."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import pypto
import pypto.tile as pt
import pypto_pro.language as pl

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES / "pro"))
import add  # noqa: E402  examples/pro/add.py


def _load(path: Path):
    """An example by file (examples/tile and examples/pro share module names: none goes on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"last_report_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layer_norm = _load(EXAMPLES / "tile" / "layer_norm.py")


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_a_professional_kernel_leaves_its_report(backend):
    x, y = torch.randn(256, 256, dtype=torch.float16), torch.randn(256, 256, dtype=torch.float16)
    z = torch.empty_like(x)
    report = pl.jit(add.add_kernel.fn, backend=backend)[None, 2](x, y, z)
    torch.testing.assert_close(z, x + y)
    assert report is not None and pypto.last_report() is report and pt.last_report() is report
    assert report.backend == backend


def test_the_latest_run_wins_and_a_reference_run_has_none():
    @pypto.jit(backend="sim")
    def double(x: pypto.Tensor[[8, 16], pypto.float32]):
        return x * 2

    x = torch.randn(8, 16)
    torch.testing.assert_close(double(x), x * 2)
    assert pypto.last_report() is double.last_report and pypto.last_report().cycles > 0
    torch.testing.assert_close(pypto.jit(double.fn, backend="reference")(x), x * 2)
    assert pypto.last_report() is None


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_a_tile_kernel_leaves_its_report(backend):
    x, w, b = torch.randn(16, 64), torch.randn(64), torch.randn(64)
    y = torch.empty_like(x)
    report = pt.kernel(layer_norm.layer_norm.fn, backend=backend)[(2,)](x, w, b, y, BR=8)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (64,), w, b, 1e-5), rtol=1e-4, atol=1e-4)
    assert report is not None and report.backend == backend
    assert pypto.last_report() is report and pt.last_report() is report
    assert (report.cycles is not None and report.cycles > 0) if backend == "sim" else report.wall_s > 0


def test_a_tile_reference_run_or_an_empty_grid_leaves_no_report():
    x, w, b = torch.randn(16, 64), torch.randn(64), torch.randn(64)
    y = torch.empty_like(x)
    kernel = pt.kernel(layer_norm.layer_norm.fn, backend="sim")
    assert kernel[(2,)](x, w, b, y, BR=8) is pypto.last_report() is not None
    assert kernel[(0,)](x, w, b, y, BR=8) is None and pypto.last_report() is None
    assert kernel[(2,)](x, w, b, y, BR=8) is pypto.last_report() is not None
    y2 = torch.empty_like(x)
    assert pt.kernel(layer_norm.layer_norm.fn, backend="reference")[(2,)](x, w, b, y2, BR=8) is None
    assert pypto.last_report() is None
    torch.testing.assert_close(y2, y, rtol=1e-4, atol=1e-4)
