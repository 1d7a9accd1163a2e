"""Block IR -> PTO-ISA C++: one kernel file per Kernel, host launchers, calling conventions."""
from .abi import KernelABI, kernel_abi
from .kernel import kernel_source
from .module import GeneratedModule, generate_module, write_kernel_sources

__all__ = ["KernelABI", "kernel_abi", "kernel_source", "GeneratedModule", "generate_module",
           "write_kernel_sources"]
