"""The generated sources of a set of kernels: kernels/<name>.cpp, launcher_cpu.cpp and
launcher_npu.cpp, with each kernel's calling convention; and writing them out for PYPTO_DUMP.

``units`` splits the cpu build: one translation unit per kernel (its source and its launcher entry in
one self-contained text, so that the text alone keys its compiled object), which the cpu backend
compiles in parallel and links (pypto/runtime/cpu/units.py). The units leave out the launcher's
``pypto_abi_version`` (each unit would define it; the link defines it once)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError
from ..ir.block import Kernel
from .abi import KernelABI
from .kernel import kernel_source
from .launcher import cpu_launcher, npu_launcher


@dataclass(frozen=True)
class CpuUnit:
    """One kernel's cpu translation unit: its text, and whether it has a cube program (the cpu
    build picks the optimisation level by it)."""
    text: str
    has_cube: bool


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
    units = {f"units/{a.ident}.cpp": CpuUnit(_cpu_unit(a, files[f"kernels/{a.ident}.cpp"]), a.has_cube)
             for a in ordered}
    return GeneratedModule(files, abis, units)


ABI_VERSION = 'extern "C" int pypto_abi_version() { return 1; }'


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
