"""pypto.last_report() is the report of the most recent run on any backend and from any front end
(Tensor level, Tile level, Professional mode): one record, in pypto/runtime/report.py."""
import sys
from pathlib import Path

import pytest
import torch

import pypto
import pypto.tile as pt
import pypto_pro.language as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "pro"))
import add  # noqa: E402  examples/pro/add.py


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
