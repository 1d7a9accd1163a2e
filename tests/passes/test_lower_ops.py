"""Every op of the registry lowers and runs on sim as the reference interpreter computes it
(shape ops, views as outputs, transposed/permuted reads, gather/index_select, integer and bool ops)."""
import pytest
import torch

import pypto
import pypto.nn.functional as F
from pypto.ops import REGISTRY
from .passes_helpers import rand, sim_vs_reference

X = rand((6, 40), seed=1)
Y = rand((6, 40), seed=2)
XI = (X * 10).to(torch.int32)
IDX = torch.tensor([3, 0, 5, 1], dtype=torch.int64)
GIDX = torch.randint(0, 40, (6, 7), generator=torch.Generator().manual_seed(3))

CASES = {
    "argsort": (lambda x: pypto.argsort(x, dim=-1), (X,)),
    "one_hot": (lambda i: F.one_hot(i, 8), (torch.tensor([[0, 3, 7], [5, 5, 1]]),)),
    "bincount": (lambda i: pypto.bincount(i, minlength=8), (torch.tensor([0, 3, 7, 5, 5, 1]),)),
    "histc": (lambda x: pypto.histc(x, bins=5, min=-1.0, max=1.0), (X,)),
    "index_add": (lambda x, s: pypto.index_add(x, 0, torch.tensor([1, 0, 1]), s), (X[:3], X[3:6])),
    "index_copy": (lambda x, s: pypto.index_copy(x, 0, torch.tensor([4, 0, 2], dtype=torch.int32), s), (X, X[3:6])),
    "index_copy_cols": (lambda x, s: pypto.index_copy(x, 1, torch.tensor([7, 1]), s), (X, X[:, :2])),
    "transpose": (lambda x: pypto.transpose(x, 0, 1) * 2, (X,)),
    "transpose_out": (lambda x: pypto.transpose(x, 0, 1), (X,)),
    "permute": (lambda x: x.reshape(2, 3, 40).permute(1, 0, 2) + 1, (X,)),
    "permute_reverse": (lambda x: x.reshape(2, 3, 40).permute(2, 1, 0) + 1, (X,)),
    "expand": (lambda x, y: x[:, :1].expand(6, 40) + y, (X, Y)),
    "expand_out": (lambda x: x[:, :1].expand(6, 40), (X,)),
    "arange": (lambda x: x + pypto.arange(0, 40, 1, dtype=pypto.float32), (X,)),
    "arange_step": (lambda x: x + pypto.arange(3, 83, 2, dtype=pypto.float32), (X,)),
    "fillpad": (lambda x: pypto.fillpad(x, value=1.5, shape=(8, 48)), (X,)),
    "pad": (lambda x: pypto.pad(x, (2, 1, 0, 3), value=-1.0), (X,)),
    "gather_last": (lambda x, i: pypto.gather(x, 1, i), (X, GIDX)),
    "gather_first": (lambda x, i: pypto.gather(x, 0, i), (X, GIDX[:, :5] % 6)),
    "index_select": (lambda x, i: pypto.index_select(x, 0, i), (X, IDX)),
    "scatter_value": (lambda x, i: pypto.scatter(x, 1, i, -3.0) * 2, (X, GIDX)),   # tests/ops/test_scatter.py
    "index_select_cols": (lambda x, i: pypto.index_select(x, 1, i), (X, IDX)),
    "remainder": (lambda x: x % 0.7, (X,)),
    "remainder_int": (lambda x: x % 3, (XI,)),
    "floor_divide": (lambda x: pypto.floor_divide(x, 0.7) + (x + 3.0) // 0.3, (X,)),
    "where_scalars": (lambda x: pypto.where(x > 0, 1.0, 0.0), (X,)),
    "masked_fill": (lambda x: x.masked_fill(x > 0.5, -1.0), (X,)),
    "argmin": (lambda x: x.argmin(-1), (X,)),
    "max_dim": (lambda x: x.max(-1)[0], (X,)),
    "split": (lambda x: pypto.split(x, 20, 1)[1] * 2, (X,)),
    "stack": (lambda x: pypto.stack([x, x * 2], 0), (X,)),
    "isfinite": (lambda x: (x / (x - x.round())).isfinite(), (X,)),
    "round_sign": (lambda x: (x * 3).round() + x.sign(), (X,)),
    "erf_log2": (lambda x: pypto.erf(x) * pypto.log2(x.abs() + 0.1), (X,)),
    "erfc_expm1_trunc": (lambda x: pypto.erfc(x) + pypto.expm1(x) * pypto.trunc(x * 4.0), (X,)),
    "pow": (lambda x, y: x.abs() ** 1.5 + 2 ** x + x.abs() ** y.abs(), (X, Y)),
    "logical": (lambda x, y: ~(x > 0) | (y > 0.2) & (x < 1), (X, Y)),
    "int_arith": (lambda x: (x + 3) * 2 - x, (XI,)),
    "full_out": (lambda x: pypto.full((3, 5), 2.5), (X,)),
    "sum_all": (lambda x: x.sum(), (X,)),
    "mean_all": (lambda x: x.mean() + x, (X,)),
    "casts": (lambda x: (x > 0).to(pypto.float32) + x.to(pypto.int32).to(pypto.float16), (X,)),
    "unsqueeze_flatten": (lambda x: (x.unsqueeze(1) * 2, x.flatten() + 1), (X,)),
    "reshape_of_view": (lambda x: x[:, 8:24].reshape(6, 2, 8) * 2, (X,)),
    "cumsum_f16": (lambda x: x.cumsum(0), (X.half(),)),
    "softmax_dim0": (lambda x: pypto.softmax(x, 0), (X,)),
    "bmm_mT": (lambda x: x.reshape(2, 3, 40) @ x.reshape(2, 3, 40).mT, (X,)),
    "matmul_vector": (lambda x, y: x @ y[0], (X, Y)),
    "constant": (lambda x: x * torch.arange(40, dtype=torch.float32), (X,)),
    "named_elementwise": (lambda x, y: (pypto.rsqrt(x.abs() + 1) + pypto.reciprocal(y.abs() + 1)
                                        + pypto.minimum(x, y), pypto.logical_not(pypto.gt(x, y)),
                                        pypto.logical_and(pypto.ne(x, y), pypto.le(x, 0.5)),
                                        pypto.logical_or(pypto.eq(x, y), pypto.ge(y, 0))), (X, Y)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_on_sim(name):
    fn, args = CASES[name]
    tol = (1e-5, 1e-4) if name in ("bmm_mT", "matmul_vector") else None
    sim_vs_reference(fn, *args, tol=tol)


def test_every_registered_op_is_covered():
    """Each registry op appears in some lowering test (this file or the others of tests/passes)."""
    import pathlib
    text = "".join(p.read_text() for p in pathlib.Path(__file__).parent.glob("test_*.py"))
    missing = [op for op in REGISTRY if op not in text and op not in ("scalar", "input")]
    assert not missing, missing
