"""Professional mode and the GM bounds rule (pypto.ir.gm_bounds): examples/pro/add.py launched with a
y or a z smaller than x is refused, on the sim and on the cpu backend's checked build, with one
message at the line of the load or store; legal tails (valid shapes clipped at the tensor's edge) run
and match torch; argument shapes that contradict the kernel's declared shapes are refused before
anything runs."""
from __future__ import annotations

import importlib.util
import inspect
import re
import shutil

import pytest
import sympy
import torch

import add
import pypto_pro.language as pl
from pypto.errors import SimError

BACKENDS = ["sim", pytest.param("cpu", marks=pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++"))]


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _add_error(backend, x, y, z) -> SimError:
    kernel = pl.jit(add.add_kernel.fn, backend=backend)
    with pytest.raises(SimError) as info:
        kernel[None, 1](x, y, z)            # one core: both backends meet the same access first
    return info.value


@pytest.mark.parametrize("case", ["small_y", "small_z"])
def test_add_with_a_smaller_tensor_is_refused_alike_on_sim_and_cpu(case):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    x = torch.randn(256, 256, dtype=torch.float16)
    small = torch.randn(128, 128, dtype=torch.float16)
    y, z = (small, torch.empty_like(x)) if case == "small_y" else (torch.randn_like(x), small)
    errors = {b: _add_error(b, x, y, z) for b in ("sim", "cpu")}
    sim_e, cpu_e = errors["sim"], errors["cpu"]
    assert str(sim_e).splitlines()[0] == str(cpu_e).splitlines()[0]
    if case == "small_y":
        want = (r"`TLOAD b_db1_v1, y\[128\*i, 128\*j \+ 128\]` \(block add_kernel_aiv\) reads y\[0:128, 128:128\] "
                r".*but y has shape \[128, 128\]: dim 1: the box starts at 128, at or past the end of the dim "
                r"\(size 128\)")
        line = _line_of(add.add_kernel.fn, "pl.load_tile(tile_b, y")
    else:
        want = r"`TSTORE z\[128\*i, 128\*j \+ 128\], c_db1_v1` .* writes z\[0:128, 128:128\] .*shape \[128, 128\]"
        line = _line_of(add.add_kernel.fn, "pl.store_tile(z")
    for e in (sim_e, cpu_e):
        assert e.loc.file == add.__file__ and e.loc.line == line, (e is sim_e, e.loc)
        assert re.search(want, e.message), e.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_kernel_from_another_file_names_its_own_lines(backend, tmp_path):
    """Two files holding the same kernel text: the second's compilation (and, on cpu, its library,
    found by the digest of identical C++) must not report the first file's lines."""
    x = torch.randn(256, 256, dtype=torch.float16)
    small = torch.randn(128, 128, dtype=torch.float16)
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"copy{i}" / "add.py")
        paths[-1].parent.mkdir()
        paths[-1].write_text(open(add.__file__).read())
    for path in paths:
        spec = importlib.util.spec_from_file_location(f"add_copy_{path.parent.name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = pl.jit(module.add_kernel.fn, backend=backend)
        with pytest.raises(SimError) as info:
            kernel[None, 1](x, small, torch.empty_like(x))
        assert info.value.loc.file == str(path)
        assert info.value.loc.line == _line_of(module.add_kernel.fn, "pl.load_tile(tile_b, y")


@pl.jit
def add_tails(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP32],
              y: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP32],
              z: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP32]):
    tile = pl.TileType(shape=[32, 64], dtype=pl.DT_FP32, target_memory=pl.MemorySpace.Vec)
    a = pl.make_tile(tile, addr=0x0000)
    b = pl.make_tile(tile, addr=0x2000)
    c = pl.make_tile(tile, addr=0x4000)
    with pl.section_vector():
        for i in pl.range(pl.get_block_idx(), pl.ceil_div(x.shape[0], 32), pl.get_block_num()):
            for j in pl.range(0, pl.ceil_div(x.shape[1], 64), 1):
                pl.load_tile(a, x, [i, j])
                pl.load_tile(b, y, [i, j])
                pl.add(c, a, b)
                pl.store_tile(z, c, [i, j])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tails_clipped_at_the_edge_run_and_match_torch(backend):
    x, y = torch.randn(70, 136), torch.randn(70, 136)       # 70 = 2 x 32 + 6 rows, 136 = 2 x 64 + 8 cols
    z = torch.full_like(x, float("nan"))
    pl.jit(add_tails.fn, backend=backend)[None, 2](x, y, z)
    torch.testing.assert_close(z, x + y, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_shapes_that_contradict_the_arguments_are_refused_before_running(backend):
    n = sympy.Symbol("N", integer=True, positive=True)

    def copy_rows(x: pl.Tensor[[pl.DYNAMIC, 64], pl.DT_FP32], y: pl.Tensor[[n, 64], pl.DT_FP32],
                  z: pl.Tensor[[n, 64], pl.DT_FP32]):
        t = pl.make_tile(pl.TileType(shape=[8, 64], dtype=pl.DT_FP32, target_memory=pl.MemorySpace.Vec), addr=0)
        with pl.section_vector():
            pl.load_tile(t, y, [0, 0])
            pl.store_tile(z, t, [0, 0])

    kernel = pl.jit(copy_rows, backend=backend)
    here = inspect.currentframe().f_lineno
    with pytest.raises(pl.LaunchError, match=r"argument 'x' dim 1 must be 64, found shape \[8, 32\]") as info:
        kernel[None, 1](torch.zeros(8, 32), torch.zeros(8, 64), torch.zeros(8, 64))
    assert info.value.loc.line == here + 2
    with pytest.raises(pl.LaunchError, match=r"size N is 8 elsewhere but 16 in 'z'"):
        kernel[None, 1](torch.zeros(8, 64), torch.zeros(8, 64), torch.zeros(16, 64))
    z = torch.zeros(8, 64)
    y = torch.randn(8, 64)
    kernel[None, 1](torch.zeros(8, 64), y, z)
    torch.testing.assert_close(z, y, rtol=0, atol=0)
