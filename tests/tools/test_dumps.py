"""PYPTO_DUMP / dump= tells the truth, the same way for the three front ends (pypto/ir/dump.py):
``<dir>/<function>/<signature>/NN_<ir>[_<stage>].<ext>``, stages numbered in the order they run, every
name saying its IR, every text file headed by the stage, the IR and the function at the user's
file:line, one folder per function and specialisation (nothing overwritten), and the generated C++
byte for byte as the cpu backend builds it — on the sim backend too."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

import pypto
import pypto.tile as pt
import pypto_pro.language as pl
from pypto.codegen import generate_module
from pypto.codegen.module import cpu_units
from pypto.runtime.cpu import compiler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HEADER = re.compile(r"^(#|//) pypto dump \| stage (\d\d) (\w+) \| ([^|]+) \| (.+?) \((.+):(\d+)\)( \| signature .+)?$")


def _example(kind, stem):
    spec = importlib.util.spec_from_file_location(f"dumps_{kind}_{stem}", EXAMPLES / kind / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _headed_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".txt", ".dot", ".pto", ".py"))


def _check_headers(folder: Path, function: str, file: str, line: int):
    """Every text file names its stage (its number is the file's), its IR and the function at file:line."""
    for p in _headed_files(folder):
        m = HEADER.match(p.read_text().splitlines()[0])
        assert m, (p, p.read_text().splitlines()[0])
        number = p.relative_to(folder).parts[0][:2]
        assert m[2] == number, p
        assert m[5].endswith(function) and m[6] == file and int(m[7]) == line, (p, m.groups())


def _sm(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], scale: float = 2.0):
    return x.softmax(-1) * scale


SM_LINE = _sm.__code__.co_firstlineno


def _plain(x, scale=2.0):
    return x.softmax(-1) * scale


def test_tensor_level_stages_are_numbered_named_by_ir_and_headed(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_DUMP", str(tmp_path))
    f = pypto.jit(_sm, backend="sim")
    x = torch.randn(8, 64)
    torch.testing.assert_close(f(x), x.softmax(-1) * 2.0)
    (d,) = (tmp_path / "_sm").iterdir()
    assert d.name == "x-f32-dynx64_scale-2.0"
    names = sorted(p.name for p in d.iterdir())
    assert names == ["01_tensor_graph_traced.dot", "01_tensor_graph_traced.json", "01_tensor_graph_traced.txt",
                     "02_tensor_graph_decompose.dot", "02_tensor_graph_decompose.json",
                     "02_tensor_graph_decompose.txt", "03_tensor_graph_canonicalize.dot",
                     "03_tensor_graph_canonicalize.json", "03_tensor_graph_canonicalize.txt",
                     "04_tensor_graph_autocast.dot", "04_tensor_graph_autocast.json", "04_tensor_graph_autocast.txt",
                     "05_tile_graph.dot", "05_tile_graph.json", "05_tile_graph.txt", "06_block_ir.txt",
                     "07_block_ir_memory.txt", "08_block_ir_sync.txt", "09_execution_graph.txt",
                     "09_execution_graph_kernels", "10_cpp"]
    _check_headers(d, "_sm", __file__, SM_LINE)
    head = (d / "05_tile_graph.txt").read_text().splitlines()
    assert "| TileGraph |" in head[0] and head[1].startswith("tile_graph _sm")
    head = (d / "09_execution_graph.txt").read_text().splitlines()
    assert "| ExecutionGraph |" in head[0] and head[1].startswith("execution_graph")
    assert "Block IR" in (d / "07_block_ir_memory.txt").read_text().splitlines()[0]


def test_sim_dump_has_the_cpp_the_cpu_backend_builds(tmp_path, monkeypatch):
    """The same program dumped on sim and built on cpu: the dump's C++ is the cpu build's input."""
    built = []
    real = compiler.build_and_load
    monkeypatch.setattr(compiler, "build_and_load", lambda files, *a, **k: (built.append(dict(files)),
                                                                             real(files, *a, **k))[1])

    def odd(x: pypto.Tensor[[pypto.DYNAMIC, 80], pypto.float32]):    # a program no other test builds
        return (x * 3.0 - 1.5).abs()

    x = torch.randn(9, 80)
    on_sim = pypto.jit(odd, backend="sim", dump=str(tmp_path / "sim"))
    torch.testing.assert_close(on_sim(x), (x * 3.0 - 1.5).abs())
    on_cpu = pypto.jit(odd, backend="cpu", dump=str(tmp_path / "cpu"))
    torch.testing.assert_close(on_cpu(x), (x * 3.0 - 1.5).abs())
    dumped = {}
    for backend in ("sim", "cpu"):
        (cpp,) = (tmp_path / backend).glob("odd/*/10_cpp")
        dumped[backend] = {str(p.relative_to(cpp)): p.read_text() for p in cpp.rglob("*") if p.is_file()}
    assert dumped["sim"] == dumped["cpu"]
    assert set(dumped["sim"]) >= {"launcher_cpu.cpp", "launcher_npu.cpp"}
    assert any(rel.startswith("kernels/") for rel in dumped["sim"])
    assert built, "the cpu backend built nothing"
    # what g++ got: the dump's files, or the build units codegen derives from the dumped kernels alone
    # (each kernel's C++ under its content-named body, codegen.module.cpu_units)
    program = on_cpu.cache[next(iter(on_cpu.cache))].program
    abis = list(generate_module(program.kernels, pypto.get_machine()).abis.values())
    units = {rel: u.text for rel, u in cpu_units(abis, dumped["cpu"]).items()}
    compiled = {rel: getattr(unit, "text", unit) for rel, unit in built[-1].items()}   # text, or a build unit's
    assert any(rel in units for rel in compiled), sorted(compiled)
    for rel, text in compiled.items():
        assert text == dumped["cpu"].get(rel, units.get(rel)), rel
    assert generate_module(program.kernels, pypto.get_machine()).files == dumped["cpu"]


def test_functions_and_specialisations_do_not_overwrite_each_other(tmp_path):
    outs = []
    for fn in (_plain, lambda x, scale=2.0: x.softmax(-1) * scale):    # two functions, one name
        f = pypto.jit(fn, backend="reference", dump=str(tmp_path), name="same_name")
        outs += [f(torch.randn(4, 64)), f(torch.randn(4, 64), 3.0), f(torch.randn(4, 32).half())]
    folders = sorted(p.name for p in (tmp_path / "same_name").iterdir())
    assert folders == ["x-f16-4x32_scale-2.0", "x-f16-4x32_scale-2.0-2", "x-f32-4x64_scale-2.0",
                       "x-f32-4x64_scale-2.0-2", "x-f32-4x64_scale-3.0", "x-f32-4x64_scale-3.0-2"]
    texts = [(tmp_path / "same_name" / f / "01_tensor_graph_traced.txt").read_text() for f in folders]
    assert all("signature " + f.removesuffix("-2") in t.splitlines()[0] for f, t in zip(folders, texts))
    assert len(outs) == 6


def test_tile_level_uses_the_same_scheme(tmp_path):
    ln = _example("tile", "layer_norm")
    k = pt.kernel(ln.layer_norm.fn, backend="sim", dump=str(tmp_path))
    x, w, b = torch.randn(16, 64), torch.randn(64), torch.randn(64)
    for br in (8, 16):
        y = torch.empty_like(x)
        k[(16 // br,)](x, w, b, y, BR=br)
        torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (64,), w, b, 1e-5), rtol=1e-4, atol=1e-4)
    folders = sorted((tmp_path / "layer_norm").iterdir())
    assert [f.name for f in folders] == ["X-f32-16x64_W-f32-64_B-f32-64_Y-f32-16x64_BR-16_eps-1e-05",
                                         "X-f32-16x64_W-f32-64_B-f32-64_Y-f32-16x64_BR-8_eps-1e-05"]
    for d in folders:
        assert sorted(p.name for p in d.iterdir()) == ["01_tile_program.txt", "02_tile_graph.dot",
                                                       "02_tile_graph.json", "02_tile_graph.txt",
                                                       "03_block_ir.txt", "04_cpp"]
        _check_headers(d, "layer_norm", str(EXAMPLES / "tile" / "layer_norm.py"),
                       ln.layer_norm.fn.__code__.co_firstlineno)
        kernel = k.cache[next(c for c in k.cache if ("BR", "const", int(d.name.split("BR-")[1].split("_")[0]))
                              in c[3])].kernel
        files = generate_module([kernel], pypto.get_machine()).files
        assert {str(p.relative_to(d / "04_cpp")): p.read_text() for p in (d / "04_cpp").rglob("*")
                if p.is_file()} == files


def test_professional_mode_uses_the_same_scheme(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_DUMP", str(tmp_path))
    add = _example("pro", "add")
    kernel = pl.jit(add.add_kernel.fn, backend="sim")
    x, y = torch.randn(128, 128, dtype=torch.float16), torch.randn(128, 128, dtype=torch.float16)
    z = torch.empty_like(x)
    kernel[None, 2](x, y, z)
    torch.testing.assert_close(z, x + y)
    d = kernel.last_build_dir
    assert d.parent == tmp_path / "add_kernel"           # no 'pro/' of its own, no hash
    assert sorted(p.name for p in d.iterdir()) == ["01_block_ir.txt", "02_cpp", "03_build.txt"]
    _check_headers(d, "add_kernel", str(EXAMPLES / "pro" / "add.py"), add.add_kernel.fn.__code__.co_firstlineno)
    assert "TADD" in (d / "01_block_ir.txt").read_text()
    assert (d / "02_cpp" / "launcher_cpu.cpp").is_file()


def test_block_ir_dumps_parse_back(tmp_path):
    """The header is a comment: a dumped Block IR file is still Block IR text."""
    from pypto.ir.block_parser import parse_kernel
    ln = _example("tile", "layer_norm")
    x = torch.randn(16, 64)
    k = pt.kernel(ln.layer_norm.fn, backend="sim", dump=str(tmp_path))
    k[(2,)](x, torch.randn(64), torch.randn(64), torch.empty_like(x), BR=8)
    (text,) = [p.read_text() for p in tmp_path.rglob("03_block_ir.txt")]
    compiled = next(iter(k.cache.values()))
    assert str(parse_kernel(text)) == str(compiled.kernel)


if __name__ == "__main__":      # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_torch_compile_dumps_its_partitions_and_not_its_probes(tmp_path, monkeypatch):
    import torch._dynamo
    monkeypatch.setenv("PYPTO_DUMP", str(tmp_path))
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sigmoid(x) * x + 1.0, backend="pypto", options={"backend": "sim"})
    x = torch.randn(4, 32)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), torch.sigmoid(x) * x + 1.0)
    torch._dynamo.reset()
    partitions = list(tmp_path.iterdir())
    assert partitions, "nothing dumped"
    for p in partitions:                                 # one folder per partition, none for the probes
        (d,) = p.iterdir()
        names = sorted(q.name for q in d.iterdir())
        assert names[0] == "01_aten_graph.py" and "02_tensor_graph_traced.txt" in names and "11_cpp" in names, names
