"""The generated sources of a set of kernels: kernels/<name>.cpp, launcher_cpu.cpp and
launcher_npu.cpp, with each kernel's calling convention; and writing them out for PYPTO_DUMP.

``units`` splits the cpu build: one translation unit per distinct kernel body (its source and its
launcher entry in one self-contained text, so that the text alone keys its compiled object), which
the cpu backend compiles in parallel and links (pypto/runtime/cpu/units.py). A body is named by its
content (``pypto_body_<hash>``: a hash of the unit's C++ with the kernel's own name and the comments
taken out), so kernels that differ only in their names or source lines (a model's repeated layers,
same-shaped Linears) are compiled once, in one module or across modules (the object cache). Each
kernel's own entry point (``pypto_launch_<ident>``, what the runtime looks up) is a thin forwarder
in ``CpuUnit.entries``, plain C++ that needs none of pypto's headers, compiled at the link with the
kernel's name for the launch's messages. The units leave out the launcher's ``pypto_abi_version``
(each unit would define it; the link defines it once)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError
from ..ir.block import CoreType, Kernel
from .abi import KernelABI
from .kernel import kernel_source
from ..sanitize import cpp_string
from .launcher import ABI_VERSION, INDENT, cpu_launcher, npu_launcher


@dataclass(frozen=True)
class CpuUnit:
    """One kernel body's cpu translation unit: its text, whether it has a cube program (the cpu
    build picks the optimisation level by it), the kernels (C++ names) it serves and their entry
    points (``entries``: C++ compiled at the link, without pypto's headers)."""
    text: str
    has_cube: bool
    kernels: tuple[str, ...] = ()
    entries: str = ""


@dataclass
class GeneratedModule:
    files: dict[str, str]            # path relative to the module directory -> text
    abis: dict[str, KernelABI]       # kernel name -> calling convention
    units: dict[str, CpuUnit] = field(default_factory=dict)   # units/<ident>.cpp -> one kernel's cpu build unit

    def write(self, directory) -> list[Path]:
        root = Path(directory)
        written = []
        for rel, text in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
        return written


def generate_module(kernels, machine=None) -> GeneratedModule:
    """Sources for ``kernels`` (a list of Kernel, or a dict name -> Kernel)."""
    kernels = list(kernels.values()) if isinstance(kernels, dict) else list(kernels)
    files: dict[str, str] = {}
    abis: dict[str, KernelABI] = {}
    idents: dict[str, str] = {}
    for k in kernels:
        if not isinstance(k, Kernel):
            raise CompileError(f"expected a Kernel, found {type(k).__name__}")
        text, abi = kernel_source(k, machine)
        if abi.ident in idents:
            raise CompileError(f"kernels '{idents[abi.ident]}' and '{k.name}' have the same C++ name {abi.ident}",
                               loc=k.loc)
        idents[abi.ident] = k.name
        files[f"kernels/{abi.ident}.cpp"] = text
        abis[k.name] = abi
    ordered = list(abis.values())
    files["launcher_cpu.cpp"] = cpu_launcher(ordered)
    files["launcher_npu.cpp"] = npu_launcher(ordered)
    return GeneratedModule(files, abis, cpu_units(ordered, files))


def cpu_units(abis: list[KernelABI], files: dict[str, str]) -> dict[str, CpuUnit]:
    """units/<body>.cpp -> the unit of each distinct kernel body, with the entries of every kernel
    whose unit is that body under another name."""
    served: dict[str, list[KernelABI]] = {}
    texts: dict[str, str] = {}
    for a in abis:
        body, text = _body(a, files[f"kernels/{a.ident}.cpp"])
        served.setdefault(body, []).append(a)
        texts[body] = text
    units: dict[str, CpuUnit] = {}
    for body, group in served.items():
        parts = _split_cores(group[0], texts[body])
        kernels, entries = tuple(a.ident for a in group), "".join(_entry(a, body) for a in group)
        if parts is None:
            units[f"units/{body}.cpp"] = CpuUnit(texts[body], group[0].has_cube, kernels, entries)
        else:
            units[f"units/{body}.cpp"] = CpuUnit(parts[0], True, kernels, entries)
            units[f"units/{body}{VECTOR_PART}.cpp"] = CpuUnit(parts[1], False)
    return units


VECTOR_PART = "_aiv"       # units/<body>_aiv.cpp: the vector program of a kernel with both kinds of core


def _split_cores(abi: KernelABI, unit: str) -> tuple[str, str] | None:
    """A kernel with a cube and a vector program as two translation units, compiled in parallel and
    (runtime/cpu/units.py): (its unit with the vector program declared
    only, the vector program's unit: the kernel's declarations and that function, without the
    entries). None for a kernel with one kind of core, or a text not of the form the split expects.
    A large kernel is then no longer one job that the other CPUs wait for: the d=256 block's flash
    attention made one of its two -O2 units 4.1 s of g++ CPU beside 2.5 s; split, they are 3.3 + 3.3."""
    spans = {}
    for core in (CoreType.AIC, CoreType.AIV):
        fn = abi.block_fns.get(core)
        if fn is None:
            return None
        head = f"AICORE inline void {fn}([[maybe_unused]] const Args& args, [[maybe_unused]] const pypto::CoreIndex& core)\n{{\n"
        start = unit.find(head)
        end = unit.find("\n}\n", start) + 3      # the body is indented: its closing brace is the first at column 0
        if start < 0 or unit.count(head) != 1 or end < 3 or not unit.startswith("#endif\n", end):
            return None
        spans[core] = (start, end, head)
    (cs, ce, _), (vs, ve, vhead) = spans[CoreType.AIC], spans[CoreType.AIV]
    entry = unit.find('extern "C" int pypto_launch_')
    close = unit.find("\n}\n", ve + len("#endif\n")) + 3      # the kernel's namespace
    if not ce <= vs or entry < ve or close < 3 or close > entry:
        return None
    declared = vhead.replace("AICORE inline void", "void").replace("\n{\n", ";\n").replace("[[maybe_unused]] ", "")
    cube = unit[:vs] + declared + unit[ve:]
    vector = (unit[:cs] + unit[ce:vs] + declared +      # declared as in the cube unit
              unit[vs:ve].replace("AICORE inline void", "AICORE void", 1) + unit[ve:close])
    return cube, vector


_BODY = "PYPTO_BODY"
_ENTRY_PARAMS = "const pypto::rt::LaunchConfig* config, char* message, size_t message_size"


def _body(abi: KernelABI, kernel_text: str) -> tuple[str, str]:
    """(the body's C++ name, its unit's text): the kernel's unit, its name replaced by one made of
    the rest of its text, the launch's kernel name a parameter of the body's entry."""
    unit = _cpu_unit(abi, kernel_text)
    launch = f"launch(*config, {cpp_string(abi.kernel)}, message"
    params = f"{INDENT}{_ENTRY_PARAMS})"
    if unit.count(launch) != 1 or unit.count(params) != 1:
        raise CompileError(f"kernel {abi.kernel}: the cpu launcher no longer has the form the build units "
                           f"expect ({launch!r} and {params!r} once each)")
    unit = unit.replace(launch, "launch(*config, kernel_name, message")
    unit = unit.replace(params, f"{INDENT}{_ENTRY_PARAMS}, const char* kernel_name)")
    # the kernel's own names only, as whole tokens: its namespace, its cpu entry, its device entry (a
    # kernel named f, T or min must leave float, TADD and pypto::min alone)
    names = {abi.namespace: f"{_BODY}_kernel", abi.cpu_entry: f"pypto_launch_{_BODY}"}
    unit = re.sub(rf"(?<![A-Za-z0-9_])(?:{'|'.join(map(re.escape, names))})(?![A-Za-z0-9_])",
                  lambda m: names[m.group(0)], unit)
    unit = unit.replace(f"AICORE void {abi.ident}(", f"AICORE void {_BODY}(")
    unit = _without_comments(unit)
    name = f"pypto_body_{hashlib.sha256(unit.encode()).hexdigest()[:20]}"
    return name, unit.replace(_BODY, name)


_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[ \t]*//[^\n]*')


def _without_comments(text: str) -> str:
    """``text`` without its // comments (string and character literals kept whole)."""
    return _COMMENT.sub(lambda m: "" if m.group(0).lstrip().startswith("//") else m.group(0), text)


def _entry(abi: KernelABI, body: str) -> str:
    """The C entry point of ``abi``: the body's entry with the kernel's own name."""
    return (f"#include <cstddef>\n#include <cstdint>\n"
            f"namespace pypto {{ namespace rt {{ struct LaunchConfig; }} }}\n"
            f'extern "C" int pypto_launch_{body}(void* const* gm, const int64_t* ints, const double* reals,\n'
            f"{INDENT}{_ENTRY_PARAMS}, const char* kernel_name);\n"
            f'extern "C" int {abi.cpu_entry}(void* const* gm, const int64_t* ints, const double* reals,\n'
            f"{INDENT}{_ENTRY_PARAMS})\n"
            f"{{\n{INDENT}return pypto_launch_{body}(gm, ints, reals, config, message, message_size, "
            f"{cpp_string(abi.kernel)});\n}}\n")


def _cpu_unit(abi: KernelABI, kernel_text: str) -> str:
    """The cpu launcher of ``abi`` alone, with the kernel's source in place of its #include."""
    launcher = cpu_launcher([abi])
    include = f'#include "kernels/{abi.ident}.cpp"'
    if include not in launcher or ABI_VERSION not in launcher:
        raise CompileError(f"kernel {abi.kernel}: the cpu launcher no longer has the form the build units "
                           f"expect ({include!r} and {ABI_VERSION!r})")
    return launcher.replace(include, kernel_text).replace(ABI_VERSION, "")


def write_kernel_sources(graph, directory, machine=None) -> list[Path]:
    """Write every kernel.cpp of an ExecutionGraph (or a list of Kernels) and the launchers."""
    kernels = graph.kernels if hasattr(graph, "kernels") else graph
    return generate_module(kernels, machine).write(directory)
