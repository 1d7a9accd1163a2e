"""Minimal cases the property tests found (each was a wrong answer or an avoidable compile failure)."""
import pytest
import torch

import pypto
from .passes_helpers import sim_vs_reference

BROADCAST_REDUCTIONS = {
    # an input broadcast (expand) along the reduced / scanned dim counts once per element; the reduction
    # used to see its single copy: sum(x.expand(3, n), 0) returned x, cumsum returned x everywhere
    "sum_expanded_rows": (lambda x: pypto.sum(pypto.expand(pypto.unsqueeze(x, 0), 3, 1), 0), (1,)),
    "sum_expanded_cols": (lambda x: pypto.sum(x.expand(6, 9) * 2 + 1, -1), (6, 1)),
    "sum_expanded_long": (lambda x: pypto.sum(pypto.expand(x, 5000, 5), 0), (1, 5)),
    "mean_expanded": (lambda x: pypto.mean(pypto.expand(x, 3, 7, 130), (0, 2)), (1, 7, 1)),
    "prod_expanded": (lambda x: pypto.prod(pypto.expand(x, 3, 4), 0), (1, 4)),
    "cumsum_expanded_cols": (lambda x: pypto.cumsum(x.expand(6, 9), -1), (6, 1)),
    "cumsum_expanded_rows": (lambda x: pypto.cumsum(x.expand(6, 9), 0), (1, 9)),
    "cumsum_expanded_wide": (lambda x: pypto.cumsum(x.expand(3, 5000), -1), (3, 1)),
}


@pytest.mark.parametrize("case", sorted(BROADCAST_REDUCTIONS))
def test_reduction_along_a_broadcast_dim(case):
    fn, shape = BROADCAST_REDUCTIONS[case]
    g = torch.Generator().manual_seed(1)
    sim_vs_reference(fn, torch.rand(shape, generator=g) + 0.5, tol=(1e-4, 1e-4))
