"""Row gather / scatter by indexed DMA (MGATHER / MSCATTER, pypto/passes/row_moves.py): index_select along
dim 0 and a 1-D scatter without reduce against torch on sim and cpu; tails (row counts that are not a
multiple of the tile's), column chunks, dynamic sizes, duplicates, and indices outside the tensor (an
IndexOutOfRangeError at the call, nothing written outside)."""
from __future__ import annotations

import inspect

import pytest
import torch

import pypto
from pypto.passes.row_moves import tile_plan

DYN = pypto.DYNAMIC
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _select(backend, dt, cols):
    pdt = pypto.dtypes.from_torch(dt)

    @pypto.jit(backend=backend)
    def select(x: pypto.Tensor[[DYN, cols], pdt], idx: pypto.Tensor[[DYN], pypto.int32]):
        return pypto.index_select(x, 0, idx)
    return select


def _kernels(f) -> set:
    return {k for c in f.cache.values() for k in c.program.kernels}


def _table(n, cols, dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, cols, generator=g) * 3).to(dt)


@pytest.mark.parametrize("dt", DTYPES + [torch.int32], ids=str)
def test_gather_rows_sim(dt):
    """Tails: tile_plan(96, 4) gives 128 indices a tile, so 300 indices are 2 full tiles and a tail on 3
    cores; then 5 indices (one partial tile) on the same program (dynamic N), with duplicates."""
    f = _select("sim", dt, 96)
    assert tile_plan(96, 4)[0] == 128
    x = _table(50, 96, torch.float32).to(dt) if dt.is_floating_point else torch.randint(-9, 9, (50, 96),
                                                                                        dtype=dt)
    for n in (300, 5):
        idx = torch.randint(0, 50, (n,), dtype=torch.int32)
        idx[: min(n, 3)] = 7                                      # duplicates
        got = f(x, idx)
        assert got.dtype == dt and torch.equal(got, torch.index_select(x, 0, idx.long()))
    assert any(k.startswith("row_gather") for k in _kernels(f))   # the row form, not the one-hot compare


def test_gather_column_chunks_and_3d_sim():
    """Rows wider than one tile move in column chunks; a 3-D table gathers along dim 0 as [rows, h * w]."""
    cols = 20000
    rows, chunk = tile_plan(cols, 4)
    assert chunk < cols
    x = _table(9, cols, torch.float32)
    idx = torch.tensor([8, 0, 3, 3, 1], dtype=torch.int32)
    torch.testing.assert_close(_select("sim", torch.float32, cols)(x, idx), x[idx.long()], rtol=0, atol=0)

    @pypto.jit(backend="sim")
    def select3(x: pypto.Tensor[[DYN, 4, 24], pypto.float16], idx: pypto.Tensor[[DYN], pypto.int64]):
        return pypto.index_select(x, 0, idx)
    x3 = torch.randn(11, 4, 24).half()
    i3 = torch.tensor([10, 2, 2, 0], dtype=torch.int64)
    assert torch.equal(select3(x3, i3), x3[i3])


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_gather_rows_cpu(dt):
    f = _select("cpu", dt, 40)
    x = _table(33, 40, dt, seed=1)
    for n in (700, 3):                                            # tiles of tile_plan(40, .) rows and a tail
        idx = torch.randint(0, 33, (n,), dtype=torch.int32)
        assert torch.equal(f(x, idx), torch.index_select(x, 0, idx.long()))


def _shifted(x, idx):
    return pypto.index_select(x, 0, idx + 2)  # <- lookup


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_gather_index_out_of_range(backend):
    """A computed index past the end or negative: an IndexOutOfRangeError at the call naming the lookup's
    line; an argument index: the host check before the run."""
    f = pypto.jit(_shifted, backend=backend)
    x = _table(6, 16, torch.float32)
    lookup = inspect.getsourcelines(_shifted)[1] + 1
    assert torch.equal(f(x, torch.tensor([0, 3], dtype=torch.int32)), x[[2, 5]])
    for bad in (4, -3):
        with pytest.raises(pypto.IndexOutOfRangeError, match=r"expected 0 <= index < 6") as info:
            f(x, torch.tensor([1, bad, 0], dtype=torch.int32))
        assert f"test_row_gather.py:{lookup}" in str(info.value)
        assert info.value.loc is not None and info.value.loc.file == __file__
    g = _select(backend, torch.float32, 16)
    with pytest.raises(pypto.IndexOutOfRangeError, match="holds index 6"):
        g(x, torch.tensor([0, 6], dtype=torch.int32))


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_scatter_rows(backend):
    """x[idx[i]] = src[i] for a 1-D x (MoE's inverse permutation), int32 and fp32; dynamic sizes, a tail,
    src longer than the index (its leading part), duplicates inside one tile (the last one wins, as torch
    on CPU), and an index outside x (an error; x's buffer is not written past its end)."""
    @pypto.jit(backend=backend)
    def inverse(x: pypto.Tensor[[DYN], pypto.int32], idx: pypto.Tensor[[DYN], pypto.int32],
                src: pypto.Tensor[[DYN], pypto.int32]):
        return pypto.scatter(x, 0, idx, src)

    for n in (1500, 37):
        perm = torch.randperm(n).to(torch.int32)
        got = inverse(torch.full((n,), -1, dtype=torch.int32), perm, torch.arange(n, dtype=torch.int32))
        assert torch.equal(got, torch.argsort(perm).to(torch.int32))
    x = torch.zeros(10, dtype=torch.int32)
    idx = torch.tensor([3, 3, 9, 3], dtype=torch.int32)
    src = torch.tensor([1, 2, 3, 4, 5, 6], dtype=torch.int32)
    assert torch.equal(inverse(x, idx, src), x.scatter(0, idx.long(), src[:4]))

    @pypto.jit(backend=backend)
    def put(x: pypto.Tensor[[DYN], pypto.float32], idx: pypto.Tensor[[DYN], pypto.int32],
            src: pypto.Tensor[[DYN], pypto.float32]):
        return pypto.scatter(x * 2.0, 0, idx + 1, src)
    xf = torch.randn(20)
    i = torch.tensor([0, 5, 18], dtype=torch.int32)
    s = torch.randn(3)
    torch.testing.assert_close(put(xf, i, s), (xf * 2).scatter(0, i.long() + 1, s), rtol=0, atol=0)
    with pytest.raises(pypto.IndexOutOfRangeError, match=r"expected 0 <= index < 20"):
        put(xf, torch.tensor([0, 19], dtype=torch.int32), s[:2])
    assert any(k.startswith("row_scatter") for k in _kernels(put))


def test_row_gather_cost_is_linear():
    """Simulated time of the row form grows with the rows moved, not rows x table rows: gathering 512 rows
    from a table of 64 or of 8192 rows costs the same to 5%."""
    f = pypto.jit(lambda x, idx: pypto.index_select(x, 0, idx), backend="sim", timing_only=True)
    times = []
    for rows in (64, 8192):
        f(torch.empty(rows, 256, dtype=torch.bfloat16), torch.zeros(512, dtype=torch.int32))
        times.append(f.last_report.time_us)
    assert abs(times[1] - times[0]) <= 0.05 * times[0], times


@pytest.mark.parametrize("backend", ["sim", "cpu", "reference"])
def test_index_copy(backend):
    """index_copy along dim 0 (a row scatter of whole rows, 2-D and 3-D) and along dim 1 (the one-hot
    scatter), fp32 and bf16, vs torch; x[idx] as index_select; an index outside x is an error."""
    @pypto.jit(backend=backend)
    def put_rows(x, idx, src):
        return (x + 1.0).index_copy(0, idx, src)

    for dt in (torch.float32, torch.bfloat16):
        x, src = _table(300, 24, dt), _table(140, 24, dt, seed=4)
        idx = torch.randperm(300)[:140]
        assert torch.equal(put_rows(x, idx, src), (x + 1.0).index_copy(0, idx, src))
    x3, s3 = torch.randn(7, 2, 8), torch.randn(3, 2, 8)
    i3 = torch.tensor([6, 0, 2])
    assert torch.equal(put_rows(x3, i3, s3), (x3 + 1.0).index_copy(0, i3, s3))
    if backend != "reference":
        assert any(k.startswith("row_scatter") for k in _kernels(put_rows))

    @pypto.jit(backend=backend)
    def put_cols(x, idx, src):
        return pypto.index_copy(x, 1, idx, src)
    x, src = torch.randn(5, 9), torch.randn(5, 3)
    idx = torch.tensor([8, 1, 4])
    assert torch.equal(put_cols(x, idx, src), x.index_copy(1, idx, src))

    @pypto.jit(backend=backend)
    def gather_rows(x, idx):
        return x[idx + 1]
    x = torch.randn(6, 10)
    assert torch.equal(gather_rows(x, torch.tensor([4, 0, 0])), x[[5, 1, 1]])
    with pytest.raises(pypto.IndexOutOfRangeError, match=r"expected 0 <= index < 6"):
        gather_rows(x, torch.tensor([5]))
    with pytest.raises(pypto.IndexOutOfRangeError):
        put_rows(torch.randn(4, 24), torch.tensor([4]), torch.randn(1, 24))


def test_gather_inside_a_loop_checks_its_indices():
    """A row gather in a pypto.loop body (where no index count is emitted): right rows, and an index past
    the table an error at the call."""
    @pypto.jit(backend="sim")
    def per_step(x: pypto.Tensor[[DYN, 32], pypto.float32], idx: pypto.Tensor[[4, 8], pypto.int32]):
        out = pypto.zeros(4, 8, 32)
        for i in pypto.loop(4):
            out[i] = pypto.index_select(x, 0, pypto.reshape(idx[i], [8]) + 1)
        return out
    x = _table(20, 32, torch.float32)
    idx = torch.randint(0, 19, (4, 8), dtype=torch.int32)
    assert torch.equal(per_step(x, idx), x[(idx + 1).long()])
    idx[2, 3] = 19
    with pytest.raises(pypto.IndexOutOfRangeError, match=r"got index 20 .* expected 0 <= index < 20"):
        per_step(x, idx)
