"""The calling convention of one generated kernel: which GM tensors, run-time sizes and scalar
parameters it takes, in which order. The code generator writes it; the CPU / NPU runtimes use
it to marshal torch tensors and Python numbers into the launch."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..dtypes import DataType
from ..errors import CompileError
from ..ir.block import BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, CoreType, Kernel
from ..sanitize import cpp_identifier
from .names import Namer

CORE_SYMBOLS = {BLOCK_IDX.name: "block_idx", BLOCK_NUM.name: "block_num", SUBBLOCK_IDX.name: "subblock_idx"}


@dataclass(frozen=True)
class GMArg:
    name: str          # the kernel's GM param name
    field: str         # its C++ field in Args
    dtype: DataType
    shape: tuple


@dataclass(frozen=True)
class ScalarArg:
    name: str          # symbol name
    field: str
    role: str          # "size" (from a GM shape) or "param" (a block scalar parameter)


@dataclass
class KernelABI:
    kernel: str
    ident: str                       # C++ identifier of the kernel (entry points, namespace)
    gm: list[GMArg]
    ints: list[ScalarArg]
    reals: list[ScalarArg]
    block_fns: dict[CoreType, str] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return f"{self.ident}_kernel"

    @property
    def cpu_entry(self) -> str:
        return f"pypto_launch_{self.ident}"

    @property
    def npu_entry(self) -> str:
        return f"pypto_npu_launch_{self.ident}"

    @property
    def has_cube(self) -> bool:
        return CoreType.AIC in self.block_fns

    @property
    def has_vector(self) -> bool:
        return CoreType.AIV in self.block_fns

    def size_sources(self) -> dict[str, tuple[str, int]]:
        """For each size symbol that is a whole GM dim: (GM param, dim index) it can be read from."""
        out: dict[str, tuple[str, int]] = {}
        for g in self.gm:
            for i, d in enumerate(g.shape):
                if isinstance(d, sympy.Symbol) and d.name not in out:
                    out[d.name] = (g.name, i)
        return out


def is_real_param(s: sympy.Symbol) -> bool:
    """A scalar parameter is passed as double when declared real and not integer; else as int64."""
    return s.is_integer is not True and s.is_real is True


def kernel_abi(kernel: Kernel) -> KernelABI:
    if not kernel.blocks:
        raise CompileError(f"kernel {kernel.name} has no blocks", loc=kernel.loc)
    cores = [b.core for b in kernel.blocks]
    if len(set(cores)) != len(cores):
        raise CompileError(f"kernel {kernel.name} has two blocks for one core type", loc=kernel.loc)
    fields = Namer(taken=("gm", "ints", "reals"))
    gm: dict[str, GMArg] = {}
    for b in kernel.blocks:
        for g in b.gm_params:
            if g.name in gm:
                if gm[g.name].dtype != g.dtype or len(gm[g.name].shape) != len(g.shape):
                    raise CompileError(f"kernel {kernel.name}: GM param {g.name} differs between blocks",
                                       loc=kernel.loc)
                continue
            gm[g.name] = GMArg(g.name, fields.name(("gm", g.name), g.name), g.dtype, tuple(g.shape))
    sizes: list[str] = []
    for g in gm.values():
        for d in g.shape:
            if isinstance(d, sympy.Basic):
                for s in sorted(d.free_symbols, key=lambda s: s.name):
                    if s.name not in sizes:
                        sizes.append(s.name)
    ints = [ScalarArg(n, fields.name(("sym", n), n), "size") for n in sizes]
    reals = []
    seen = set(sizes)
    for b in kernel.blocks:
        for p in b.scalar_params:
            if p.name in seen or p.name in CORE_SYMBOLS:
                continue
            seen.add(p.name)
            arg = ScalarArg(p.name, fields.name(("sym", p.name), p.name), "param")
            (reals if is_real_param(p) else ints).append(arg)
    abi = KernelABI(kernel.name, cpp_identifier(kernel.name), list(gm.values()), ints, reals)
    used = set()
    for b in kernel.blocks:
        fn = cpp_identifier(b.name)
        if fn in used or fn == abi.ident or fn == abi.namespace:
            fn = f"{fn}_{str(b.core).lower()}"
        used.add(fn)
        abi.block_fns[b.core] = fn
    return abi
