"""Writes whose box depends on tensor data (issue 16, CANN's GDN kernel): a varlen batch's chunks,
cu_seqlens a device tensor, the last chunk of each sequence a tail and the others full.

* ``out[ofs + i:ofs + i + L, h] = v`` on a side where ``v`` is a static [L, D]: the box pypto clamps to
  ``out`` is ``min(L, T - ofs - i)``, which the trace cannot size (that ``ofs + i + L <= T`` is a fact of
  the data); the write is of v's L rows, as torch writes it when it fits, and one that does not fit is
  a run-time error (torch: a shape mismatch), never fewer rows.
* ``y.reshape([L, 1, D], valid_shape=[n, 1, D])`` of a computed y with n a data scalar's tail, then an
  assemble under ``set_vec_tile_shapes(L, 64, D)``: the reshape is y's box with n rows of it valid (no GM
  buffer sized by the data scalar), and the hint is the assemble's tile clipped to the box it writes.
Each on sim and cpu against torch, with a sequence of length 0 (a trip count of zero), one shorter
than a chunk (the full-chunk side taken by no iteration) and one a multiple of the chunk.
"""
import pytest
import torch

import pypto
from pypto.errors import PyptoError

L, D, H = 16, 64, 2
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def varlen_chunks(backend, dtype):
    dt = pypto.dtypes.from_torch(dtype)

    @pypto.jit(backend=backend)
    def f(cu: pypto.Tensor[[pypto.DYNAMIC], pypto.int32], x: pypto.Tensor[[pypto.DYNAMIC, H, D], dt],
          out: pypto.Tensor[[pypto.DYNAMIC, H, D], dt]):
        for b in pypto.loop(cu.shape[0] - 1):
            s = cu[b + 1] - cu[b]
            ofs = cu[b]
            for h in pypto.loop(H):
                for i in pypto.loop(0, s, L):
                    n = (s - i).min(L)
                    xv = pypto.view(x, [L, 1, D], [ofs + i, h, 0], valid_shape=[n, 1, D])
                    x2 = pypto.reshape(xv, [L, D], valid_shape=[n, D])
                    if pypto.is_loop_end(i):
                        y = pypto.fillpad(x2, "constant", 0.0) * 2.0 + 1.0
                        pypto.set_vec_tile_shapes(L, 64, D)    # clipped to the [L, 1, D] box it writes
                        y3 = y.reshape([L, 1, D], valid_shape=[n, 1, D])
                        pypto.assemble(y3, [ofs + i, h, 0], out)
                    else:
                        out[ofs + i:ofs + i + L, h] = x2 * 3.0
    return f


def reference(cu, x):
    out = torch.full_like(x, -5.0)
    for b in range(len(cu) - 1):
        start, stop = int(cu[b]), int(cu[b + 1])
        for i in range(start, stop, L):
            if i + L >= stop:
                out[i:stop] = (x[i:stop].float() * 2 + 1).to(x.dtype)
            else:
                out[i:i + L] = (x[i:i + L].float() * 3).to(x.dtype)
    return out


@pytest.mark.parametrize("backend,dtype", [("sim", torch.float32), ("cpu", torch.float32),
                                           ("sim", torch.bfloat16)])
def test_a_write_sized_by_tensor_data_gives_torchs_answer(backend, dtype):
    f = varlen_chunks(backend, dtype)
    for lens in ([5, 0, 32, 37], [9]):        # tails, a length 0, a multiple of L; only tails
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
        total = int(cu[-1]) + 3                # rows past the last sequence keep their values
        x = torch.randn(total, H, D).to(dtype)
        out = torch.full((total, H, D), -5.0).to(dtype)
        f(cu, x, out)
        torch.testing.assert_close(out.float(), reference(cu, x).float(), rtol=TOL[dtype], atol=TOL[dtype])
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_a_write_the_data_puts_past_the_tensor_is_a_run_time_error(backend):
    """cu_seqlens says 40 rows, the tensors have 20: torch would raise a shape mismatch at the full
    chunk's write; pypto stops the run at a GM access outside the tensor (not a shorter write)."""
    f = varlen_chunks(backend, torch.float32)
    cu = torch.tensor([0, 40], dtype=torch.int32)
    with pytest.raises(PyptoError, match="outside its tensor"):
        f(cu, torch.randn(20, H, D), torch.zeros(20, H, D))


def tail_merges(backend):
    """A tail-sized value bound on both sides of is_loop_end (merged after the branch), and a captured
    tail-sized tensor assembled into on both sides: their shapes stay the run-time min(L, s - i)."""
    @pypto.jit(backend=backend)
    def f(cu: pypto.Tensor[[pypto.DYNAMIC], pypto.int32], x: pypto.Tensor[[pypto.DYNAMIC, D], pypto.float32],
          out: pypto.Tensor[[pypto.DYNAMIC, D], pypto.float32], out2: pypto.Tensor[[pypto.DYNAMIC, D], pypto.float32]):
        for b in pypto.loop(cu.shape[0] - 1):
            s = cu[b + 1] - cu[b]
            ofs = cu[b]
            for i in pypto.loop(0, s, L):
                v = pypto.view(x, [L, D], [ofs + i, 0], valid_shape=[pypto.min(L, s - i), D])
                acc = v * 1.0
                if pypto.is_loop_end(i):
                    y = v * 2.0
                    acc[:, :] = v + 1.0
                else:
                    y = v * 3.0
                    acc[:, :] = pypto.full([L, D], 4.0, pypto.float32) * v
                pypto.assemble(y, [ofs + i, 0], out)
                pypto.assemble(acc, [ofs + i, 0], out2)
    return f


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_tail_sized_values_merged_after_a_data_dependent_branch(backend):
    f = tail_merges(backend)
    cu = torch.tensor([0, 5, 5, 37, 70], dtype=torch.int32)     # a tail, a length 0, a multiple of L, tails
    x = torch.randn(72, D)
    out, out2 = torch.zeros(72, D), torch.zeros(72, D)
    f(cu, x, out, out2)
    ref, ref2 = torch.zeros(72, D), torch.zeros(72, D)
    for b in range(len(cu) - 1):
        start, stop = int(cu[b]), int(cu[b + 1])
        for i in range(start, stop, L):
            e = min(i + L, stop)
            last = i + L >= stop
            ref[i:e] = x[i:e] * (2 if last else 3)
            ref2[i:e] = x[i:e] + 1 if last else x[i:e] * 4
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(out2, ref2)
