"""A built kernel library loaded with ctypes: launches kernels over torch tensors' memory."""
from __future__ import annotations

import ctypes
import warnings

import torch

from ...codegen.abi import KernelABI
from ...errors import DTypeError, ShapeError
from .errors import CpuKernelError, FlagWarning

_SPACES = ("UB", "L1", "L0A", "L0B", "L0C")
_MESSAGE_BYTES = 4096


class LaunchConfig(ctypes.Structure):
    """Mirror of pypto::rt::LaunchConfig (include/pypto/cpu_runtime.hpp)."""
    _fields_ = [("block_dim", ctypes.c_int64), ("threads", ctypes.c_int64), ("subblocks", ctypes.c_int64),
                ("capacity", ctypes.c_int64 * 5), ("alignment", ctypes.c_int64)]


class KernelLibrary:
    def __init__(self, path, abis: dict[str, KernelABI], kernels: dict | None = None):
        self.path = str(path)
        self.abis = abis
        self.kernels = kernels or {}
        self._lib = ctypes.CDLL(self.path)
        self._entries = {}
        for name, abi in abis.items():
            fn = getattr(self._lib, abi.cpu_entry)
            fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                           ctypes.POINTER(ctypes.c_double), ctypes.POINTER(LaunchConfig), ctypes.c_char_p,
                           ctypes.c_size_t]
            fn.restype = ctypes.c_int
            self._entries[name] = fn

    def launch(self, kernel: str, gm: dict[str, torch.Tensor], ints: dict[str, int], reals: dict[str, float],
               block_dim: int, threads: int, machine) -> None:
        """Run ``kernel`` over ``block_dim`` cores. ``gm`` maps GM param names to contiguous CPU tensors."""
        abi = self.abis[kernel]
        ptrs = (ctypes.c_void_p * max(1, len(abi.gm)))()
        for i, g in enumerate(abi.gm):
            t = gm[g.name]
            if t.dtype != g.dtype.torch_dtype:
                raise DTypeError(f"kernel {kernel}: GM param {g.name} is {g.dtype} but the tensor is {t.dtype}")
            if not t.is_contiguous() or t.device.type != "cpu":
                raise ShapeError(f"kernel {kernel}: GM param {g.name} needs a contiguous CPU tensor")
            ptrs[i] = t.data_ptr()
        int_vals = (ctypes.c_int64 * max(1, len(abi.ints)))(*[int(ints[a.name]) for a in abi.ints])
        real_vals = (ctypes.c_double * max(1, len(abi.reals)))(*[float(reals[a.name]) for a in abi.reals])
        config = LaunchConfig(int(block_dim), int(threads), int(machine.cores.get("aiv_per_aic", 2)),
                              (ctypes.c_int64 * 5)(*[int(machine.capacity[s]) for s in _SPACES]),
                              int(machine.alignment))
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        rc = self._entries[kernel](ptrs, int_vals, real_vals, ctypes.byref(config), message, _MESSAGE_BYTES)
        text = message.value.decode(errors="replace")
        if rc == 1:
            k = self.kernels.get(kernel)
            raise CpuKernelError(f"kernel {kernel} failed on the cpu backend: {text}",
                                 loc=getattr(k, "loc", None))
        if rc == 2:
            warnings.warn(f"kernel {kernel}: {text}", FlagWarning, stacklevel=3)
