"""Tiny random-weight transformers models through torch.compile(backend="pypto") (skipped with the
reason when transformers is not installed): one graph for three sequence lengths at batch 1 under
dynamic=True (issue 19 item 2), logits equal to eager (rtol/atol 1e-4 of their scale)."""
import pytest
import torch

import pypto.dynamo as pd
import hf_models
from dynamo_cases import backends

pytestmark = pytest.mark.skipif(hf_models.unavailable() is not None, reason=str(hf_models.unavailable()))


@pytest.mark.parametrize("backend", backends(slow=("sim", "cpu")), indirect=True)
def test_llama_batch1_dynamic_one_graph_for_three_lengths(backend):
    model = hf_models.build("llama")
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = torch.compile(model, backend="pypto", dynamic=True, options={"backend": backend})
    with torch.no_grad():
        for t in (7, 33, 64):
            inp = hf_models.inputs("llama", 1, t)
            got, want = compiled(**inp).logits, model(**inp).logits
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1
    assert pd.counters["graphs"] == 1 and not pd.failures
    assert pd.counters["runs"] == 3 * pd.counters["partitions"]


@pytest.mark.slow
def test_llama_explain_captures_nearly_everything():
    model = hf_models.build("llama")
    with torch.no_grad():
        e = pd.explain(model, **hf_models.inputs("llama", 2, 9), options={"backend": "reference"}, dynamic=True)
    assert not e.fallbacks and e.captured >= 0.97, str(e)
