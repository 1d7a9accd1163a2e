"""Shape, view and data-movement ops vs torch eager: transpose permute unsqueeze squeeze flatten expand
concat stack split chunk tril triu arange pad fillpad gather index_select index_copy scatter masked_fill reshape views
and fills; dynamic sizes from one trace; fillpad on tail tiles in a loop; user errors."""
import math

import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto.errors import DTypeError, PyptoError, ShapeError, SymbolicError, TypeMismatchError

from .op_testing import T, Case, Inp, assert_close, case_params, check_error, dynamic_params, run_case

X = Inp((T, 24))
X3 = Inp((4, T, 6))
ANY = (torch.float32, torch.float16, torch.bfloat16)
ONE = (torch.float32,)
I64 = torch.int64


def _pad_rows(x, rows, value):
    return F.pad(x[:rows], (0, 0, 0, rows - min(rows, x.shape[0])), value=value)


def _write_box(m, x):
    y = m.zeros_like(x)
    y[:, 2:5] = x[:, :3]
    y[0] = 7.0
    return y


CASES = [
    Case("transpose", lambda m, x: m.transpose(x, 0, 1), [X]),
    Case("transpose_negative", lambda m, x: x.transpose(-1, -3), [X3]),
    Case("t", lambda m, x: x.t(), [X]),
    Case("T_property", lambda m, x: x.T, [X]),
    Case("mT_property", lambda m, x: x.mT, [X3]),
    Case("permute", lambda m, x: x.permute(2, 0, 1), [X3]),
    Case("permute_tuple_negative", lambda m, x: m.permute(x, (-1, 1, 0)), [X3]),
    Case("unsqueeze_last", lambda m, x: x.unsqueeze(-1), [X]),
    Case("unsqueeze_first", lambda m, x: m.unsqueeze(x, 0), [X]),
    Case("squeeze_dim", lambda m, x: x.squeeze(1), [Inp((T, 1, 6))]),
    Case("squeeze_all_static", lambda m, x: m.squeeze(x), [Inp((1, 5, 1))]),
    Case("flatten_from_1", lambda m, x: x.flatten(1), [X3]),
    Case("flatten_all", lambda m, x: m.flatten(x), [X3]),
    Case("reshape_minus_one", lambda m, x: x.reshape(-1, 6), [X]),
    Case("view_minus_one", lambda m, x: x.view(2, -1), [X]),
    Case("expand_new_dim", lambda m, x: x.expand(3, -1, 24), [Inp((T, 1))]),
    Case("expand_as", lambda m, x, y: x.expand_as(y), [Inp((1, 24)), X]),
    Case("broadcast_to", lambda m, x, y: m.broadcast_to(x, y.shape), [Inp((T, 1)), X3]),
    Case("cat_last", lambda m, x, y: m.cat([x, y], -1), [X, Inp((T, 4))]),
    Case("concat_first_promotes", lambda m, x, y: m.concat([x, y], 0) if m is pypto else torch.cat([x, y], 0),
         [X, Inp((3, 24), dtype=torch.float32)]),
    Case("stack", lambda m, x, y: m.stack([x, y], 1), [X, X]),
    Case("split_size", lambda m, x: x.split(8, -1), [Inp((T, 20))]),
    Case("split_sections", lambda m, x: m.split(x, [5, 15], 1), [Inp((T, 20))]),
    Case("chunk", lambda m, x: x.chunk(3, 1), [Inp((T, 20))]),
    Case("tril", lambda m, x: m.tril(x), [Inp((T, T))]),
    Case("tril_below", lambda m, x: x.tril(-1), [Inp((2, T, 8))]),
    Case("triu_above", lambda m, x: m.triu(x, 2), [Inp((T, T))]),
    Case("arange_dynamic_end", lambda m, x: m.arange(x.shape[0]), [X], dtypes=ONE),
    Case("arange_float_step", lambda m, x: m.arange(0.5, x.shape[0], 0.5), [X], dtypes=ONE),
    Case("arange_dtype", lambda m, x: m.arange(2, x.shape[0] + 5, 3, dtype=m.float16), [X], dtypes=ONE),
    Case("pad_last", lambda m, x: m.pad(x, (1, 2)) if m is pypto else F.pad(x, (1, 2)), [X]),
    Case("pad_two_dims_value", lambda m, x: m.pad(x, (0, 3, 2, 1), value=-2.5) if m is pypto
         else F.pad(x, (0, 3, 2, 1), value=-2.5), [X3]),
    Case("fillpad_view_tail", lambda m, x: m.fillpad(m.view(x, [16, 24], [0, 0], [m.min(16, x.shape[0]), 24]),
                                                     "constant", -math.inf) if m is pypto
         else _pad_rows(x, 16, -math.inf), [X]),
    Case("gather_last", lambda m, x, i: m.gather(x, 1, i), [X, Inp((T, 5), "index:24", I64)]),
    Case("gather_first_int32_index", lambda m, x, i: m.gather(x, 0, i) if m is pypto else x.gather(0, i.long()),
         [Inp((8, T)), Inp((5, T), "index:8", torch.int32)]),
    Case("scatter_value", lambda m, x, i: m.scatter(x, 1, i, 0.5), [X, Inp((T, 30), "index:24", I64)]),
    Case("scatter_add_int32_index", lambda m, x, i, s: x.scatter(1, i, s, reduce="add") if m is pypto
         else x.scatter_add(1, i.long(), s[:, :5]), [X, Inp((T, 5), "index:24", torch.int32), Inp((T, 8))], tol=2.0),
    Case("index_select_last", lambda m, x, i: m.index_select(x, -1, i), [X, Inp((7,), "index:24", I64)]),
    Case("index_select_dynamic_index", lambda m, x, i: x.index_select(0, i), [Inp((16, 6)), Inp((T,), "index:16", I64)]),
    Case("index_copy_rows", lambda m, x, i, s: m.index_copy(x, 0, i, s), [Inp((24, 6)), Inp((T,), "index:24", I64),
                                                                         Inp((T, 6))]),
    Case("index_copy_last", lambda m, x, i, s: m.index_copy(x, 1, i, s), [Inp((T, 9)), Inp((4,), "index:9", I64),
                                                                         Inp((T, 4))]),
    Case("masked_fill", lambda m, x, mask: x.masked_fill(mask, -1000.0), [X, Inp((T, 24), "bool")]),
    Case("masked_fill_broadcast", lambda m, x, mask: m.masked_fill(x, mask, 0.0), [X, Inp((1, 24), "bool")]),
    Case("getitem_box", lambda m, x: x[1:5, 2:-3], [X]),
    Case("getitem_int_none_ellipsis", lambda m, x: x[..., -1, None], [X3]),
    Case("zeros_ones_full_like", lambda m, x: (m.zeros_like(x), m.ones_like(x), m.full_like(x, 2.5)), [X]),
    Case("setitem_box", lambda m, x: _write_box(m, x), [X]),
    Case("captured_constant", lambda m, x: m.add(x, torch.arange(24.0)), [X]),
    Case("zeros_full_in_trace", lambda m, x: (m.zeros(3, 4), m.full((2, 5), 1.5)), [X], dtypes=ONE),
]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_shape_op_matches_torch(case, dtype):
    run_case(case, dtype)


@pytest.mark.parametrize("case", dynamic_params([c for c in CASES if c.name != "squeeze_all_static"]))
def test_shape_op_dynamic_sizes_one_trace(case):
    from .op_testing import run_dynamic
    run_dynamic(case)


def test_fillpad_on_tail_tiles_in_a_loop():
    """The CANN pattern: tiles of 16 rows, the last one partial and padded with -inf before a max."""
    @pypto.jit(backend="reference")
    def block_max(x: pypto.Tensor[[pypto.DYNAMIC, 24], pypto.float16], out: pypto.Tensor[[16, 24], pypto.float16]):
        n = x.shape[0]
        out[:] = pypto.full((16, 24), -math.inf, pypto.float16)
        for i in pypto.loop(pypto.ceildiv(n, 16)):
            tile = pypto.view(x, [16, 24], [i * 16, 0], valid_shape=[pypto.min(16, n - i * 16), 24])
            out[:] = pypto.maximum(out, pypto.fillpad(tile, "constant", -math.inf))

    for t in (1, 7, 64, 1000):
        x = torch.randn(t, 24, dtype=torch.float16)
        out = torch.empty(16, 24, dtype=torch.float16)
        block_max(x, out)
        rows = -(-t // 16) * 16
        ref = F.pad(x, (0, 0, 0, rows - t), value=-math.inf).reshape(-1, 16, 24).amax(0)
        assert_close(out, ref, torch.float16)
    assert block_max.trace_count == 1


def test_split_pieces_are_views_that_write_through():
    @pypto.jit(backend="reference")
    def f(x: pypto.Tensor[[4, 6], pypto.float32]):
        a, b = x.split(3, 1)
        b[:] = a * 2
    x = torch.randn(4, 6)
    want = x.clone()
    want[:, 3:] = want[:, :3] * 2
    f(x)
    assert torch.equal(x, want)


def test_shape_ops_have_vector_rules_of_their_own():
    from pypto.ops import REGISTRY
    from pypto.passes.vector_rules import SPECIAL_RULES
    for name in ("tril", "triu", "arange"):
        assert REGISTRY[name].pto is None and name in SPECIAL_RULES


ERRORS = [
    (lambda m, x: x.transpose(0, 2), [X], ShapeError, r"transpose: dim 2 is out of range"),
    (lambda m, x: x.permute(0, 0, 1), [X3], ShapeError, r"not a permutation"),
    (lambda m, x: x.permute(1, 0), [X3], ShapeError, r"permute: expected 3 dims"),
    (lambda m, x: x.unsqueeze(4), [X], ShapeError, r"unsqueeze: dim 4 is out of range .*-3 <= dim < 3"),
    (lambda m, x: x.squeeze(0), [X], SymbolicError, r"squeeze: dim 0 has the dynamic size T"),
    (lambda m, x: x.expand(4, 5, 24), [X], ShapeError, r"expand: dim 0 of \[T, 24\] has size T, which cannot expand to 5"),
    (lambda m, x: x.expand(24), [X], ShapeError, r"fewer dims than the tensor"),
    (lambda m, x, y: m.cat([x, y], 1), [X, Inp((5, 4))], ShapeError, r"concat along dim 1: tensor 1 \[5, 4\] differs"),
    (lambda m, x: m.cat(x, 0), [X], TypeMismatchError, r"concat: expected a list or tuple of tensors"),
    (lambda m, x: x.split(8, 0), [X], SymbolicError, r"split: dim 0 has the dynamic size T"),
    (lambda m, x: x.split([5, 5], 1), [X], ShapeError, r"sections \[5, 5\] add up to 10, but dim 1"),
    (lambda m, x: x.split([x.shape[0], 24], 1), [X], SymbolicError, r"section sizes must be static"),
    (lambda m, x: x.chunk(2, 0), [X], SymbolicError, r"chunk: dim 0 has the dynamic size T"),
    (lambda m, x: m.tril(x[0]), [X], ShapeError, r"tril: expected a tensor of rank >= 2"),
    (lambda m, x: m.arange(x), [X], TypeMismatchError, r"arange: end must be a number or a size, found a Tensor"),
    (lambda m, x: m.arange(5, 1), [X], ShapeError, r"arange: the range \[5, 1\) is empty"),
    (lambda m, x: m.pad(x, (1, 2, 3)), [X], ShapeError, r"pad: expected pairs"),
    (lambda m, x: m.pad(x, (1, 1), mode="reflect"), [X], PyptoError, r"only mode='constant'"),
    (lambda m, x: m.fillpad(x, shape=(4, 24)), [Inp((8, 24))], ShapeError, r"fillpad: the tensor \[8, 24\] does not fit"),
    (lambda m, x, i: m.gather(x, 1, i), [X, Inp((T, 5), "index:24", torch.float32)], DTypeError,
     r"gather: index must be int32 or int64, found float32"),
    (lambda m, x, i: m.gather(x, 1, i), [X, Inp((T,), "index:24", I64)], ShapeError, r"gather: index \[T\] and input"),
    (lambda m, x, i: m.index_select(x, 0, i), [X, Inp((2, 2), "index:4", I64)], ShapeError, r"index must be 1-D"),
    (lambda m, x, i, s: m.index_copy(x, 0, i, s), [X, Inp((3,), "index:4", I64), Inp((2, 24))], ShapeError,
     r"index_copy: source must have shape \[3, 24\]"),
    (lambda m, x, i, s: x.index_copy(0, i, s), [X, Inp((3,), "index:4", I64), Inp((3, 24), dtype=torch.float16)],
     DTypeError, r"index_copy: source \(float16\) must have the input's dtype"),
    (lambda m, x, i: x.masked_fill(i, 0.0), [X, Inp((T, 24), "index:2", I64)], DTypeError, r"condition must be bool"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_shape_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)


@pytest.mark.parametrize("backend", ["reference", "sim"])
def test_gather_index_out_of_range_fails_at_run_time(backend):
    f = pypto.jit(lambda x, i: pypto.gather(x, 1, i), backend=backend)
    with pytest.raises(pypto.IndexOutOfRangeError, match=r"holds index 9 at \[0, 0\], outside the dim of size 4"):
        f(torch.randn(3, 4), torch.full((3, 2), 9))
