"""What the random-program hunt (python -m tests.fuzz.hunt) found, shrunk to the shortest failing
program. Each stays xfail(strict=True) until fixed: a fix makes it pass and the marker must go."""
import importlib.util
import textwrap

import pytest
import torch

import pypto


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 4 - 2).to(dtype)


@pytest.mark.xfail(strict=True, reason="vector_tiling: CompileError 'internal: a strided box with a tile larger "
                                       "than one element' for a transposed box with a size-1 last dim "
                                       "(hunt seeds 1001852, 1001994)", raises=pypto.CompileError)
def test_transpose_of_a_view_with_a_size_one_last_dim():
    @pypto.jit(backend="sim")
    def program(x0: pypto.Tensor[[33, 130, 3], pypto.float16]):
        v1 = pypto.view(x0, [24, 95, 1], [2, 11, 2])
        return v1.transpose(0, 2)

    x = _rand(33, 130, 3, dtype=torch.float16)
    torch.testing.assert_close(program(x), x[2:26, 11:106, 2:3].transpose(0, 2), rtol=0, atol=0)


@pytest.mark.xfail(strict=True, reason="vector_tiling: the same internal CompileError for a view of a "
                                       "transposed 3-d tensor (hunt seed 1001852)", raises=pypto.CompileError)
def test_view_of_a_transposed_tensor():
    @pypto.jit(backend="sim")
    def program(v4: pypto.Tensor[[5, 2, 2], pypto.bfloat16]):
        v5 = v4.transpose(-3, 1)
        return pypto.view(v5, [2, 4, 1], [0, 1, 1])

    x = _rand(5, 2, 2, dtype=torch.bfloat16)
    torch.testing.assert_close(program(x), x.transpose(0, 1)[0:2, 1:5, 1:2], rtol=0, atol=0)


def test_matmul_of_an_expanded_view():
    @pypto.jit(backend="sim")
    def program(x0: pypto.Tensor[[7, 1], pypto.float32], x1: pypto.Tensor[[64, 7], pypto.float32]):
        return pypto.matmul(x0.expand(-1, 7), x1, b_trans=True)

    x, w = _rand(7, 1), _rand(64, 7, seed=1)
    torch.testing.assert_close(program(x, w), x.expand(-1, 7) @ w.t(), rtol=1e-5, atol=1e-5)


def test_jit_annotations_under_future_annotations(tmp_path):
    path = tmp_path / "future_user.py"
    path.write_text(textwrap.dedent("""
        from __future__ import annotations
        import pypto

        @pypto.jit(backend="reference")
        def double(x: pypto.Tensor[[pypto.DYNAMIC, 4], pypto.float32]):
            return x * 2
    """))
    spec = importlib.util.spec_from_file_location("future_user", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.double(torch.ones(3, 4))
    module.double(torch.ones(5, 4))
    assert module.double.trace_count == 1
    with pytest.raises(pypto.DTypeError):
        module.double(torch.ones(5, 4, dtype=torch.float16))


def test_cpu_result_does_not_depend_on_what_ran_before():
    """Program 150 was wrong on cpu after any other cpu program in the process (a register clobbered by
    glibc's TLS descriptor resolver; tests/runtime/cpu/test_cpu_run_order.py)."""
    from .programs import generate
    from .runner import check
    assert check([generate(1)], "cpu") == []
    failures = check([generate(150)], "cpu")
    assert failures == [], failures[0].report()
