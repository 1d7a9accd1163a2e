"""Codegen checks each instruction against the pto-isa constraints of its table entry (pypto/ir/isa.py:
``dtypes``, ``row_major``) and emits a scalar op on a ColMajor column through a RowMajor view of its
transpose (pypto/codegen/constraints.py, kernel.py). Hand-built one-instruction kernels
(pypto/testing/kernels.py: the instruction is at model.py:20)."""
from __future__ import annotations

import pytest
import torch

from pypto import dtypes
from pypto.codegen import generate_module
from pypto.errors import CompileError
from pypto.runtime import cpu, sim
from pypto.testing import kernels as ck

F32, I32 = dtypes.float32, dtypes.int32


def source(kernel) -> str:
    return "\n".join(generate_module([kernel]).files.values())


def refused(kernel, pattern):
    with pytest.raises(CompileError, match=pattern) as info:
        generate_module([kernel])
    assert (info.value.loc.file, info.value.loc.line) == ("model.py", 20), "the error names the instruction's line"
    return info.value


def test_float_only_instruction_on_int_tiles_is_refused():
    refused(ck.single_op_kernel("TEXP", [I32], I32, (8, 8)), r"TEXP takes floating-point tiles \(pto-isa\); "
                                                            r"tile 's0' is i32")


def test_int_only_instruction_on_float_tiles_is_refused():
    refused(ck.single_op_kernel("TAND", [F32, F32], F32, (8, 8)), r"TAND takes integer or bool tiles")


def test_row_major_operand_declared_col_major_is_refused():
    # [16, 4] f32: 16-byte columns, 64-byte rows -> ColMajor; pto-isa's TCOLEXPAND* want RowMajor tiles
    kernel = ck.single_op_kernel("TCOLEXPANDMUL", [F32, F32], F32, (16, 4), src_shapes=[(16, 4), (1, 4)])
    err = refused(kernel, r"TCOLEXPANDMUL needs its destination in BLayout::RowMajor \(pto-isa\), "
                          r"but tile 'd' .* is ColMajor")
    assert "32-byte" in err.hint


def test_scalar_op_on_a_col_major_column_with_a_row_major_source_is_refused():
    # d [8, 8] valid [3, 1] is ColMajor; s0 [3, 8] (12-byte columns) is RowMajor: no common view
    kernel = ck.single_op_kernel("TADDS", [F32], F32, (3, 8), valid=(3, 1), scalar=1.0, dst_shape=(8, 8))
    refused(kernel, r"TADDS needs its destination in BLayout::RowMajor")


def test_ext_instructions_have_no_pto_isa_constraints():
    generate_module([ck.single_op_kernel("TSIGMOID", [F32], F32, (8, 8))])
    source(ck.single_op_kernel("TCVT", [F32], I32, (8, 8), attrs={"round": "rint"}))


@pytest.mark.parametrize("op,fn", [("TMULS", lambda x: x * 2.5), ("TADDS", lambda x: x + 2.5),
                                   ("TRDIVS", lambda x: 2.5 / x)])
def test_scalar_op_on_a_column_runs_on_its_row_major_view(op, fn):
    """A [8, 8] tile with one valid column is ColMajor (what TROWEXPAND* read); pto-isa's TBinSOps take
    RowMajor tiles only, so the instruction is emitted on the RowMajor [8, 8] view of its transpose. On
    pypto's cpu header too the view aliases the column's elements (ColMajor storage as pto-isa's)."""
    kernel = ck.single_op_kernel(op, [F32], F32, (8, 8), valid=(8, 1), scalar=2.5)
    text = source(kernel)
    assert "Tile<TileType::Vec, float, 8, 8, BLayout::ColMajor, 8, 1>" in text
    assert "Tile<TileType::Vec, float, 8, 8, BLayout::RowMajor, 1, 8>" in text
    assert f"({'d_transposed, ' if op != 'TRDIVS' else 'd_transposed, 2.5f, '}s0_transposed" in text
    x = torch.rand(8, 8) + 0.5
    for backend in (cpu, sim):
        out = torch.full((8, 8), float("nan"))
        backend.run_kernel(kernel, {"in0": x, "out": out})
        torch.testing.assert_close(out[:, :1], fn(x[:, :1]), rtol=1e-6, atol=0, msg=lambda m: f"{backend}: {m}")
        assert out[:, 1:].isnan().all(), "only the valid column is stored"


def test_row_reduction_then_scalar_ops_on_its_column_with_a_dynamic_valid_shape():
    """rms_norm's column (TROWSUM -> TMULS -> TADDS -> TRSQRT -> TROWEXPANDMUL) over row tiles with a
    tail: the view's valid columns follow the tile's valid rows."""
    kernel = ck.rms_norm(F32)
    text = source(kernel)
    assert "ss_transposed.SetValidCol(pypto::min(8, M - r));" in text
    assert "TMULS(ss_transposed, ss_transposed, 0.00390625f)" in text
    assert "TROWEXPANDMUL(xt, xt, ss);" in text
    x, w = torch.randn(13, 256), torch.randn(256)
    y = torch.zeros(13, 256)
    cpu.run_kernel(kernel, {"x": x, "w": w, "y": y}, block_dim=2)
    torch.testing.assert_close(y, ck.ref_rms_norm(x, w), rtol=1e-5, atol=1e-5)
