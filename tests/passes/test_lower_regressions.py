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


COMPILE_FAILURES = {
    # a reduction over the leading dim of a permuted input: its dims cannot collapse onto two tile axes
    # ("cannot tile: a reduced/scanned dim is neither of the last two iteration dims"): copied first
    "sum_permuted_leading": (lambda x: pypto.sum(x.permute(0, 2, 1), 0), (3, 5, 7)),
    "sum_permuted_210": (lambda x: pypto.sum(x.permute(2, 1, 0), 0), (3, 5, 7)),
    "cumsum_permuted_leading": (lambda x: pypto.cumsum(x.permute(0, 2, 1), 0), (3, 5, 7)),
    # a column vector concatenated along the last dim: its box is a column of the result
    # ("writing into a transposed view is not supported")
    "concat_columns": (lambda x: pypto.concat([x, x * 2], 1), (2, 1)),
    "concat_columns_sum": (lambda x: pypto.concat([x, x * 2], 1).sum(0), (70, 1)),
    # a reduction over the leading dim of an input expanded along a middle dim
    # reductions / scans / argmax along many rows of a narrow tensor: kept whole, a column block per row
    # was over the UB ("no tile of this fused group fits the 196608-byte UB"); now two-level / blockwise
    "sum_4160_rows": (lambda x: pypto.sum(x, 0), (4160, 17)),
    "argmax_2048_rows": (lambda x: pypto.argmax(x, 0), (2048, 17)),
    "argmax_260_rows": (lambda x: pypto.argmax(pypto.concat([x, x * 2], 0), 0), (130, 17)),
    "sum_rows_of_transposed_where": (lambda x: pypto.sum(pypto.where(x.t() > 0, x.t(), x.t() * 0.5), 0), (130, 130)),
    "cumsum_2000_rows": (lambda x: pypto.cumsum(x, 0), (2000, 17)),
    "cumsum_1024_rows_f16": (lambda x: pypto.cast(pypto.cumsum(pypto.cast(x, pypto.float16), 0), pypto.float32),
                             (1024, 17)),
    "sum_leading_of_expanded_middle": (lambda x: pypto.sum(pypto.expand(pypto.unsqueeze(x, 1), 2, 3, 2), 0), (2, 2)),
}


@pytest.mark.parametrize("case", sorted(COMPILE_FAILURES))
def test_programs_that_did_not_compile(case):
    fn, shape = COMPILE_FAILURES[case]
    g = torch.Generator().manual_seed(2)
    sim_vs_reference(fn, torch.rand(shape, generator=g) - 0.5, tol=(1e-4, 1e-4))


def test_loop_value_sized_by_the_loop_index_gets_a_bounded_workspace():
    # a tail block's value (rows Min(4, n - 4 i)) kept in GM for a matmul: its workspace was sized by the
    # loop index, which no launch binds (SymbolicError at run time); now the bounding [4, c] box
    def fn(x, y):
        n, c = x.shape
        acc = pypto.zeros(c, c)
        for i in pypto.loop(pypto.ceildiv(n, 4)):
            r = pypto.min(4, n - i * 4)
            xv = pypto.view(x, [4, c], [i * 4, 0], valid_shape=[r, c])
            yv = pypto.view(y, [4, c], [i * 4, 0], valid_shape=[r, c])
            acc[:, :] = acc + yv.transpose(0, 1) @ xv.tanh()
        return acc
    g = torch.Generator().manual_seed(3)
    for n in (5, 1):
        sim_vs_reference(fn, torch.rand(n, 17, generator=g), torch.rand(n, 17, generator=g), tol=(1e-5, 1e-5))
