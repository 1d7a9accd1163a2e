"""A built kernel library loaded with ctypes: launches kernels over torch tensors' memory."""
from __future__ import annotations

import ctypes
import warnings

import torch

from ...codegen.abi import KernelABI
from ...errors import DTypeError, ShapeError
from .errors import CpuKernelError, FlagWarning, LibraryLoadError
from .gm_check import bounds_error

_SPACES = ("UB", "L1", "L0A", "L0B", "L0C")
_MESSAGE_BYTES = 4096


class LaunchConfig(ctypes.Structure):
    """Mirror of pypto::rt::LaunchConfig (include/pypto/cpu_runtime.hpp)."""
    _fields_ = [("block_dim", ctypes.c_int64), ("threads", ctypes.c_int64), ("subblocks", ctypes.c_int64),
                ("capacity", ctypes.c_int64 * 5), ("alignment", ctypes.c_int64)]


class KernelLibrary:
    """``build_key``: the key the library must carry (compiler.build compiles it in); None for a
    library built some other way. LibraryLoadError for a library that cannot be loaded, carries
    another key or lacks a kernel's entry point."""

    def __init__(self, path, abis: dict[str, KernelABI], kernels: dict | None = None, build_key: str | None = None):
        self.path = str(path)
        self.abis = abis
        self.kernels = kernels or {}
        try:
            self._lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise LibraryLoadError(f"cannot load the kernel library {self.path}: {e}") from None
        if build_key is not None:
            self._check_key(build_key)
        self._entries = {}
        for name, abi in abis.items():
            try:
                fn = getattr(self._lib, abi.cpu_entry)
            except AttributeError:
                raise LibraryLoadError(f"the kernel library {self.path} has no entry point {abi.cpu_entry} "
                                       f"(kernel {name}): it was built from other sources") from None
            fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                           ctypes.POINTER(ctypes.c_double), ctypes.POINTER(LaunchConfig), ctypes.c_char_p,
                           ctypes.c_size_t]
            fn.restype = ctypes.c_int
            self._entries[name] = fn

    def _check_key(self, key: str) -> None:
        try:
            stamp = self._lib.pypto_build_key
        except AttributeError:
            raise LibraryLoadError(f"the kernel library {self.path} carries no build key: it was not built by "
                                   f"pypto's cpu compiler") from None
        stamp.argtypes, stamp.restype = [], ctypes.c_char_p
        found = stamp()
        if found != key.encode():
            raise LibraryLoadError(f"the kernel library {self.path} was built for key {found!r}, not {key}")

    def prepare(self, kernel: str, ints: dict[str, int], reals: dict[str, float], block_dim: int,
                machine, ir=None) -> "PreparedLaunch":
        """The launch of ``kernel`` with these scalars, marshalled once; call it with the GM tensors.
        ``ir``: the Block IR Kernel whose source lines errors name (default: the one it was built from)."""
        return PreparedLaunch(self, kernel, ints, reals, block_dim, machine, ir)

    def launch(self, kernel: str, gm: dict[str, torch.Tensor], ints: dict[str, int], reals: dict[str, float],
               block_dim: int, threads: int, machine) -> None:
        """Run ``kernel`` over ``block_dim`` cores. ``gm`` maps GM param names to contiguous CPU tensors."""
        self.prepare(kernel, ints, reals, block_dim, machine)(gm, threads)

    def check(self, rc: int, kernel: str, message, ir=None) -> None:
        text = message.value.decode(errors="replace")
        if rc == 1:
            k = ir if ir is not None else self.kernels.get(kernel)
            bounds = bounds_error(k, text)
            if bounds is not None:
                raise bounds
            raise CpuKernelError(f"kernel {kernel} failed on the cpu backend: {text}",
                                 loc=getattr(k, "loc", None))
        if rc == 2:
            warnings.warn(f"kernel {kernel}: {text}", FlagWarning, stacklevel=4)


class PreparedLaunch:
    """A kernel launch with its scalars and config already in ctypes form (a task run in a loop
    launches the same kernel with the same scalars every time)."""

    def __init__(self, lib: KernelLibrary, kernel: str, ints, reals, block_dim: int, machine, ir=None):
        abi = lib.abis[kernel]
        self.lib, self.kernel, self.fn, self.ir = lib, kernel, lib._entries[kernel], ir
        self.gm = [(g.name, g.dtype.torch_dtype, g.dtype) for g in abi.gm]
        self.ints = (ctypes.c_int64 * max(1, len(abi.ints)))(*[int(ints[a.name]) for a in abi.ints])
        self.reals = (ctypes.c_double * max(1, len(abi.reals)))(*[float(reals[a.name]) for a in abi.reals])
        self.block_dim = int(block_dim)
        self.subblocks = int(machine.cores.get("aiv_per_aic", 2))
        self.capacity = [int(machine.capacity[s]) for s in _SPACES]
        self.alignment = int(machine.alignment)
        self.configs: dict[int, LaunchConfig] = {}

    def config(self, threads: int) -> LaunchConfig:
        c = self.configs.get(threads)
        if c is None:
            c = self.configs[threads] = LaunchConfig(self.block_dim, int(threads), self.subblocks,
                                                     (ctypes.c_int64 * 5)(*self.capacity), self.alignment)
        return c

    def __call__(self, gm: dict[str, torch.Tensor], threads: int) -> None:
        ptrs = (ctypes.c_void_p * max(1, len(self.gm)))()
        for i, (name, torch_dtype, dtype) in enumerate(self.gm):
            t = gm[name]
            if t.dtype != torch_dtype:
                raise DTypeError(f"kernel {self.kernel}: GM param {name} is {dtype} but the tensor is {t.dtype}")
            if not t.is_contiguous() or t.device.type != "cpu":
                raise ShapeError(f"kernel {self.kernel}: GM param {name} needs a contiguous CPU tensor")
            ptrs[i] = t.data_ptr()
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        rc = self.fn(ptrs, self.ints, self.reals, ctypes.byref(self.config(threads)), message, _MESSAGE_BYTES)
        if rc:
            self.lib.check(rc, self.kernel, message, self.ir)
