"""A partition that compiled runs (issue 19 item 4): the failures that sent compiled partitions back to
eager at run time on the lowered backends, each against eager torch (exact for integers and bools,
rtol/atol 1e-5 for fp32), with no fallback and nothing left in eager."""
import logging

import pytest
import torch

import pypto.dynamo as pd
from dynamo_cases import backends

LOWERED = [b for b in backends(slow=()) if b.values[0] != "reference"]


def _compile(f, backend, **kw):
    return torch.compile(f, backend="pypto", options={"backend": backend}, **kw)


def _no_fallback():
    assert not pd.failures, list(pd.failures)
    assert pd.counters["run_fallbacks"] == 0 and pd.counters["fallbacks"] == 0
    assert pd.counters["runs"] >= 1


def count_positive(x):
    return (x > 0).sum(-1), (x > 0.5).sum(-1, keepdim=True).to(torch.int32) + x.amax(-1, keepdim=True).long()


@pytest.mark.parametrize("backend", LOWERED, indirect=True)
def test_integer_sum_of_a_comparison(backend):
    """(x > 0).sum(-1): the i64 accumulator was filled with 0.0 ("index expression 0.0 is not an
    integer" when the cpu backend generated its C++); dynamic lengths, one longer than a tile."""
    c = _compile(count_positive, backend, dynamic=True)
    for n in (5, 9, 4100):
        x = torch.randn(3, n) * 3
        for got, want in zip(c(x), count_positive(x)):
            assert got.dtype == want.dtype and torch.equal(got, want)
    _no_fallback()
    assert pd.counters["eager_ops"] == 0


def scalars_and_masks(x):
    """An HF-style additive mask: where(mask, 0, -inf) from two aten.scalar_tensor constants, and a lone
    0-d constant returned as it is."""
    mask = torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).tril()
    bias = torch.where(mask, torch.scalar_tensor(0.0), torch.scalar_tensor(float("-inf")))
    return (x[:, None, :] + bias).softmax(-1), torch.scalar_tensor(-2.5), torch.scalar_tensor(7, dtype=torch.int64)


@pytest.mark.parametrize("backend", LOWERED, indirect=True)
def test_scalar_tensor_constants_run_in_pypto(backend, caplog):
    x = torch.randn(4, 6)
    with caplog.at_level(logging.INFO, logger="pypto.dynamo"):
        got = _compile(scalars_and_masks, backend)(x)
    want = scalars_and_masks(x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == w.dtype and g.shape == () and torch.equal(g, w)
    _no_fallback()
    assert "no GM home" not in caplog.text and pd.counters["eager_ops"] == 0


@pytest.mark.parametrize("backend", LOWERED, indirect=True)
def test_run_time_fallback_is_a_counted_warning(backend, monkeypatch, caplog):
    """If a compiled partition still fails at run time, it is a warning naming the partition and the
    reason, counted in run_fallbacks and failures, and eager answers."""
    import pypto.backends

    def failing(self, inputs, env):
        raise RuntimeError("device lost")
    monkeypatch.setattr(pypto.backends.Compiled, "run", failing)
    x = torch.randn(3, 5)
    with caplog.at_level(logging.WARNING, logger="pypto.dynamo"):
        got = _compile(lambda a: (a * 2).exp(), backend)(x)
    torch.testing.assert_close(got, (x * 2).exp())
    assert pd.counters["run_fallbacks"] == 1 and pd.failures[-1][1] == "RuntimeError: device lost"
    assert any(r.levelno == logging.WARNING and "failed at run time" in r.message and "device lost" in r.message
               for r in caplog.records)
