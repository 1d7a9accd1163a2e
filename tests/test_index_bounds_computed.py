"""Issue 18: an index computed inside the traced function (``ids + 1``, an argmax) that falls outside the
dim index_select / gather / F.embedding pick from is an IndexOutOfRangeError on every backend, never the
row of zeros the lowered one-hot select would give (the run counts such indices: passes/index_checks.py);
in-range computed indices still give torch's values exactly. Lines that trace a lookup are marked
``# <- lookup``, the calls that must raise ``# <- error``."""
import inspect
import os

import pytest
import torch

import pypto
import pypto.nn.functional as F
from test_user_errors import marked_line

BACKENDS = ["reference", "sim", "cpu"]


def lookup_line(fn) -> int:
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, text in enumerate(lines) if text.rstrip().endswith("# <- lookup")]
    assert len(hits) == 1
    return hits[0]


def shifted_select(table, ids):
    return pypto.index_select(table, 0, ids + 1)  # <- lookup


def doubled_gather(x, idx):
    return pypto.gather(x, 1, idx * 2)  # <- lookup


def shifted_embedding(ids, w):
    return F.embedding(ids - 1, w)  # <- lookup


def best_row(scores, table):
    return pypto.index_select(table, 0, pypto.argmax(scores, -1))  # <- lookup


def out_of_range(case, fn, backend):
    """``case`` raises IndexOutOfRangeError: the lowered backends at the call (marked line of ``case``)
    naming the lookup's traced line, the reference interpreter at the lookup's line itself."""
    with pytest.raises(pypto.IndexOutOfRangeError) as info:
        case()
    e = info.value
    assert isinstance(e, IndexError)                       # as torch's index_select / embedding raise
    at = lookup_line(fn) if backend == "reference" else marked_line(case)
    assert e.loc is not None and (e.loc.file, e.loc.line) == (__file__, at), f"reported at {e.loc}: {e}"
    if backend != "reference":
        assert f"traced at {os.path.basename(__file__)}:{lookup_line(fn)}" in str(e), str(e)
    assert "expected 0 <= index <" in str(e), str(e)
    return e


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [5, -2])             # ids + 1 == 6 (one past the end) and -1
def test_computed_index_select_out_of_range(backend, bad):
    f = pypto.jit(shifted_select, backend=backend)
    table = torch.randn(6, 5)
    ids = torch.tensor([0, 3, 4])
    torch.testing.assert_close(f(table, ids), table[ids + 1], rtol=0, atol=0)

    def select():
        f(table, torch.tensor([0, bad, 4]))  # <- error
    e = out_of_range(select, shifted_select, backend)
    assert "index_select" in str(e) and "dim of size 6" in str(e)
    with pytest.raises(IndexError):
        torch.index_select(table, 0, torch.tensor([0, bad, 4]) + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_computed_gather_and_embedding_out_of_range(backend):
    g = pypto.jit(doubled_gather, backend=backend)
    x = torch.randn(3, 7)
    idx = torch.tensor([[0, 3], [1, 2], [3, 0]])
    torch.testing.assert_close(g(x, idx), torch.gather(x, 1, idx * 2), rtol=0, atol=0)

    def gather():
        g(x, torch.tensor([[0, 3], [4, 2], [3, 0]]))  # <- error
    assert "gather" in str(out_of_range(gather, doubled_gather, backend))

    emb = pypto.jit(shifted_embedding, backend=backend)
    w = torch.randn(10, 8)
    ids = torch.tensor([[1, 10], [5, 2]])
    torch.testing.assert_close(emb(ids, w), torch.nn.functional.embedding(ids - 1, w), rtol=0, atol=0)

    def embed():
        emb(torch.tensor([[1, 10], [0, 2]]), w)  # <- error
    out_of_range(embed, shifted_embedding, backend)


@pytest.mark.parametrize("backend", ["sim", "cpu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_computed_indices_in_range_match_torch_exactly(backend, dtype):
    torch.manual_seed(1)
    table = torch.randn(37, 19).to(dtype)                 # tail sizes: neither a multiple of a tile
    ids = torch.randint(0, 36, (13,))
    got = pypto.jit(shifted_select, backend=backend)(table, ids)
    assert got.dtype == dtype
    torch.testing.assert_close(got, torch.index_select(table, 0, ids + 1), rtol=0, atol=0)
    idx = torch.randint(0, 10, (37, 5))
    got = pypto.jit(doubled_gather, backend=backend)(table, idx)
    torch.testing.assert_close(got, torch.gather(table, 1, idx * 2), rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_argmax_derived_index(backend):
    torch.manual_seed(2)
    scores = torch.randn(9, 6)
    table = torch.randn(6, 11)
    f = pypto.jit(best_row, backend=backend)
    torch.testing.assert_close(f(scores, table), table[scores.argmax(-1)], rtol=0, atol=0)
    wide = torch.randn(9, 8)                             # argmax can reach 7, the table has 6 rows

    def pick():
        f(wide, table)  # <- error
    wide[0, 7] = 100.0
    out_of_range(pick, best_row, backend)


def test_argument_indices_keep_the_host_check_only():
    """Indices passed in are checked on the host; the run emits no count for them."""
    f = pypto.jit(lambda t, ids: pypto.index_select(t, 0, ids), backend="sim")
    table, ids = torch.randn(6, 5), torch.tensor([1, 2])
    torch.testing.assert_close(f(table, ids), table[ids], rtol=0, atol=0)
    compiled = next(iter(f.cache.values()))
    assert compiled.program.index_checks == [] and len(compiled.index_checks) == 1
    g = pypto.jit(doubled_gather, backend="sim")           # a one-hot lookup (index_select along dim 0 is a row
    g(table, ids.reshape(1, 2).expand(6, 2))               # move, which checks its indices itself: no count)
    compiled = next(iter(g.cache.values()))
    assert len(compiled.program.index_checks) == 1 and compiled.index_checks == []
    assert len(compiled.program.outputs) == 2                     # the result and the one count
