"""User strings in generated C++ and in paths (pypto.sanitize): a hostile name can neither add code
to a generated source (issue 18, item 4) nor make a dump or build folder outside its root (item 5)."""
from __future__ import annotations

import ctypes
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
import torch

import pypto
import pypto_pro.language as pl
from pypto import dtypes
from pypto.codegen import generate_module
from pypto.errors import SourceLoc, TypeMismatchError
from pypto.ir.block import Block, CoreType, For, GMParam, GMRegion, Kernel, SetFlag, TileDecl, WaitFlag, instr
from pypto.ir.isa import MemSpace, Pipe
from pypto.runtime import cpu
from pypto.sanitize import cpp_comment, cpp_identifier, cpp_string, path_component
from pypto.symbolic import index_symbol, smin, symbol

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
F32 = dtypes.float32
INJECTED = "pypto_injected"      # every hostile string tries to declare this variable in the generated code
DECLARED = re.compile(rf"\bint\s+{INJECTED}\s*=")

HOSTILE = [
    f"evil\nint {INJECTED} = 42;\n//",
    f'x"); int {INJECTED} = 1; //',
    f"ends in a backslash \\\nint {INJECTED} = 2;",
    f"trigraph ??/\nint {INJECTED} = 3;",
    f"carriage\rint {INJECTED} = 4;",
    f"form\ffeed\vtab\x00nul\x1bescape",
    f"unicode \u2028 line sep \u00e9\U0001f600 */ /* \\x41\\0",
    "???",
    "",
]

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _code_only(text: str) -> str:
    """C++ source without its string literals and '//' comments (what the compiler runs)."""
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


# ---------------------------------------------------------------- the sanitisers, compiled
@needs_cxx
def test_comments_and_strings_compile_to_exactly_the_text(tmp_path):
    """Each hostile string as a comment line and as a string literal: g++ -Werror builds the file (a
    string that broke out would redefine the marker, a comment that swallowed the next line would
    leave it undefined), and each literal's bytes are the string's UTF-8 bytes."""
    lines = ["#include <cstddef>", f"static int {INJECTED} = 0;"]
    for i, text in enumerate(HOSTILE):
        lines += [f"// {cpp_comment(text)}", f'extern "C" const char* text{i}() {{ return {cpp_string(text)}; }}',
                  f"int marker{i} = {INJECTED};"]
    lines.append(f'extern "C" int markers() {{ return 0{"".join(f" + marker{i}" for i in range(len(HOSTILE)))}; }}')
    for text in HOSTILE:
        assert "\n" not in cpp_comment(text) and "\\" not in cpp_comment(text) and "??" not in cpp_comment(text)
    src = tmp_path / "strings.cpp"
    src.write_text("\n".join(lines) + "\n")
    lib = tmp_path / "strings.so"
    proc = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", str(src),
                           "-o", str(lib)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    so = ctypes.CDLL(str(lib))
    so.markers.restype = ctypes.c_int
    assert so.markers() == 0
    for i, text in enumerate(HOSTILE):
        fn = getattr(so, f"text{i}")
        fn.restype = ctypes.c_void_p
        expected = text.encode() + b"\0"
        assert ctypes.string_at(fn(), len(expected)) == expected


def test_identifiers_are_valid_and_deterministic():
    for text in HOSTILE + ["int", "__x", "_X", "9lives", "PIPE_V", "add_kernel"]:
        ident = cpp_identifier(text)
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident) and ident == cpp_identifier(text)
        assert not ident.startswith("__") and not re.match(r"_[A-Z]", ident)
    assert cpp_identifier("add_kernel") == "add_kernel"


# ---------------------------------------------------------------- a kernel named by an attacker
def _hostile_kernel(name: str, file: str) -> Kernel:
    """y = x + x over [M, 64] in tiles of 8 rows, every name (kernel, block, tiles, GM params, size,
    loop variable, loop attribute, source file) a hostile string."""
    loc = SourceLoc(file, 7, name)
    x, y, m, i = f"x{name}", f"y{name}", symbol(f"M{name}"), index_symbol(f"i{name}")
    tile = f"t{name}"
    tiles = {tile: TileDecl(tile, MemSpace.UB, F32, (8, 64), 0, (smin(8, m - i * 8), 64))}
    step = [WaitFlag(Pipe.MTE3, Pipe.MTE2, 0),
            instr("TLOAD", [tile, GMRegion(x, (i * 8, 0))], tiles, {}, loc),
            SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
            instr("TADD", [tile, tile, tile], tiles, {}, loc),
            SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
            instr("TSTORE", [GMRegion(y, (i * 8, 0)), tile], tiles, {}, loc),
            SetFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    body = [SetFlag(Pipe.MTE3, Pipe.MTE2, 0),
            For(i, 0, sympy.ceiling(m / 8), 1, step, {name: name}, loc=loc),
            WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    block = Block(f"b{name}", CoreType.AIV, [GMParam(x, F32, (m, 64)), GMParam(y, F32, (m, 64))], [],
                  list(tiles.values()), body, loc=loc)
    return Kernel(name, [block], loc=loc)


def test_hostile_names_stay_in_comments_and_strings():
    for text in HOSTILE[:5]:
        module = generate_module([_hostile_kernel(text, text + ".py")])
        for rel, source in module.files.items():
            assert not DECLARED.search(_code_only(source)), f"{rel} runs the user's text:\n{source}"


@needs_cxx
def test_hostile_names_build_and_compute(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path))
    x = torch.randn(20, 64)
    for text in HOSTILE[:2]:
        kernel = _hostile_kernel(text, text + ".py")
        outputs, _ = cpu.run_kernel(kernel, {f"x{text}": x, f"y{text}": torch.zeros_like(x)})
        torch.testing.assert_close(outputs[f"y{text}"], x + x, rtol=0, atol=0)


@needs_cxx
def test_pro_kernel_named_and_sourced_by_an_attacker(tmp_path, monkeypatch):
    """pl.jit(name=<C++>) with the kernel's source in a file whose name holds C++: the cpu build runs
    the kernel and nothing else (the result matches torch; no source holds the text outside a comment
    or a string)."""
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / f"add\nint {INJECTED} = 5;\n.py"
    src.write_text((EXAMPLES / "pro" / "add.py").read_text())
    spec = importlib.util.spec_from_file_location("hostile_add", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = pl.jit(module.add_kernel.fn, backend="cpu", name=HOSTILE[0], dump=str(tmp_path / "dump"))
    x = torch.randn(256, 256, dtype=torch.float16)
    y = torch.randn_like(x)
    z = torch.empty_like(x)
    kernel[None, 2](x, y, z)
    torch.testing.assert_close(z, x + y, rtol=0, atol=0)
    sources = list((tmp_path / "dump").rglob("*.cpp"))
    assert sources and any(f"Kernel '{cpp_comment(HOSTILE[0])}'" in p.read_text() for p in sources)
    for path in sources:
        assert not DECLARED.search(_code_only(path.read_text())), path


# ---------------------------------------------------------------- paths
ESCAPES = ["../../x", "/abs/olute", "..", ".", "", "a/b", "a_b", "x\\..\\y", "nul\0byte", "~", "-rf",
           ".hidden", "con", "z" * 300, "z" * 301, "\u00e9t\u00e9", "add_kernel"]


def test_path_components_stay_in_their_folder(tmp_path):
    seen = {}
    for name in ESCAPES:
        part = path_component(name)
        assert part == path_component(name) and len(part) <= 80
        assert re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*", part), part
        assert (tmp_path / part).resolve().parent == tmp_path.resolve()
        assert seen.setdefault(part, name) == name, f"{name!r} and {seen[part]!r} share {part}"
    assert path_component("add_kernel") == "add_kernel"


def _files_under(root: Path) -> set[Path]:
    return {p.resolve() for p in root.rglob("*")}


@pytest.mark.parametrize("name", ["../../escaped_pro", "<absolute>"])
def test_pro_build_dir_stays_in_dump(tmp_path, name):
    dump = tmp_path / "a" / "b" / "dump"
    name = str(tmp_path / "escaped_abs") if name == "<absolute>" else name
    kernel = pl.jit(_load_example("pro", "add").add_kernel.fn, name=name, dump=str(dump))
    x = torch.randn(128, 128, dtype=torch.float16)
    z = torch.empty_like(x)
    kernel[None, 1](x, x, z)
    torch.testing.assert_close(z, x + x)
    assert kernel.last_build_dir is not None and kernel.last_build_dir.resolve().is_relative_to(dump.resolve())
    assert (kernel.last_build_dir / "01_block_ir.txt").is_file()
    assert all(p.is_relative_to(dump.resolve()) for p in _files_under(tmp_path) if p.is_file())


def test_tensor_jit_dump_stays_in_dump(tmp_path, monkeypatch):
    dump = tmp_path / "a" / "dump"

    @pypto.jit(name="../../escaped_graph", dump=str(dump))
    def plus_one(a):
        return a + 1

    a = torch.randn(16, 32)
    torch.testing.assert_close(plus_one(a), a + 1)
    written = [p for p in _files_under(tmp_path) if p.is_file()]
    assert any(p.name == "01_tensor_graph_traced.txt" for p in written)
    assert all(p.is_relative_to(dump.resolve()) for p in written), written
    monkeypatch.setenv("PYPTO_DUMP", str(dump))           # the pass manager's stage dumps
    pypto.jit(plus_one.fn, name="/../escaped_env", backend="sim")(a)
    assert all(p.is_relative_to(dump.resolve()) for p in _files_under(tmp_path) if p.is_file())


def test_a_name_that_is_not_a_string_is_refused_at_the_users_line():
    line = sys._getframe().f_lineno + 2
    with pytest.raises(TypeMismatchError, match="name must be a non-empty str, found 42") as info:
        pl.jit(_load_example("pro", "add").add_kernel.fn, name=42)
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    with pytest.raises(TypeMismatchError, match="pypto.jit: name must be"):
        pypto.jit(lambda a: a, name=b"bytes")


def _load_example(kind: str, stem: str):
    spec = importlib.util.spec_from_file_location(f"example_{kind}_{stem}", EXAMPLES / kind / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
