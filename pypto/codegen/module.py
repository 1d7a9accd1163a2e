"""The generated sources of a set of kernels: kernels/<name>.cpp, launcher_cpu.cpp and
launcher_npu.cpp, with each kernel's calling convention; and writing them out for PYPTO_DUMP."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError
from ..ir.block import Kernel
from .abi import KernelABI
from .kernel import kernel_source
from .launcher import cpu_launcher, npu_launcher


@dataclass
class GeneratedModule:
    files: dict[str, str]            # path relative to the module directory -> text
    abis: dict[str, KernelABI]       # kernel name -> calling convention

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
    return GeneratedModule(files, abis)


def write_kernel_sources(graph, directory, machine=None) -> list[Path]:
    """Write every kernel.cpp of an ExecutionGraph (or a list of Kernels) and the launchers."""
    kernels = graph.kernels if hasattr(graph, "kernels") else graph
    return generate_module(kernels, machine).write(directory)
