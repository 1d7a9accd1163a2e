"""Views alias their base like torch's: a write into the base after a view was taken is seen
through the view (slices, pypto.view, reshape, transpose, permute, expand), inside and across
pypto.loop bodies. Every case runs the same function eagerly on torch tensors as the reference."""
import pytest
import torch

import pypto
from pypto.errors import PyptoError


def later_write_slices(x):
    v = x[1:3]
    vv = v[:, 2:4]                    # a view of a view
    x[1:2] = x[1:2] * 0.0 + 7.0
    return v + 1.0, vv * 2.0


def later_write_shape_views(x):
    t = x.transpose(0, 1)
    p = x.reshape(4, 2, 6).permute(2, 0, 1)
    r = x.reshape(-1)
    e = x[0:1].expand(3, 12)
    x[0:2] = x[0:2] - 5.0
    return t * 1.0, p * 1.0, r * 1.0, e * 1.0


def write_through_view_then_read_sibling(x):
    a = x[0:2]
    b = x[1:3]                       # overlaps a
    a[1:2] = a[1:2] + 100.0          # writes x[1], seen by b
    return b * 1.0, x * 1.0


def loop_writes_base(x):
    v = x[0:2]
    for _ in pypto.loop(3):
        x[0:1] = x[0:1] + 1.0
    return v * 2.0


def loop_reads_view_of_written_base(x, acc):
    v = x[0:1]
    for _ in pypto.loop(4):
        x[0:1] = x[0:1] * 2.0
        acc[0:1] = acc[0:1] + v       # v sees this iteration's write
    return acc * 1.0


CASES = [
    (later_write_slices, [(4, 12)]),
    (later_write_shape_views, [(4, 12)]),
    (write_through_view_then_read_sibling, [(4, 12)]),
    (loop_writes_base, [(4, 128)]),
    (loop_reads_view_of_written_base, [(2, 128), (2, 128)]),
]


def torch_eager(fn, args):
    """The same function on torch tensors, pypto.loop replaced by range."""
    saved = pypto.loop
    try:
        pypto.loop = lambda n, *a, **k: range(n)
        return fn(*args)
    finally:
        pypto.loop = saved


def outputs(r):
    return list(r) if isinstance(r, tuple) else [r]


@pytest.mark.parametrize("backend", ["reference", "sim", "cpu"])
@pytest.mark.parametrize("fn,shapes", CASES, ids=[c[0].__name__ for c in CASES])
def test_view_sees_later_write(backend, fn, shapes):
    torch.manual_seed(0)
    args = [torch.randn(*s) for s in shapes]
    expected = outputs(torch_eager(fn, [a.clone() for a in args]))
    got = outputs(pypto.jit(fn, backend=backend)(*[a.clone() for a in args]))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make_view", [lambda x: x.transpose(0, 1), lambda x: x.permute(1, 0),
                                       lambda x: x[0:1].expand(4, 8), lambda x: x.reshape(32)],
                         ids=["transpose", "permute", "expand", "reshape"])
def test_write_into_a_non_slice_view_is_an_error(make_view):
    def body(x):
        y = make_view(x)
        y[0:1] = 1.0
        return x

    with pytest.raises(PyptoError, match="in-place write into a .* view is not supported") as e:
        pypto.jit(body, backend="reference")(torch.zeros(4, 8))
    assert "test_view_aliasing.py" in str(e.value)
