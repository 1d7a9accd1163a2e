"""The cpu backend's side of the GM bounds rule (pypto.ir.gm_bounds): the checked mode, and the
wording of a bounds failure that generated code reports.

Checked mode (``run(..., checked=True)``, or PYPTO_CPU_CHECK=1 — the test suite sets it) builds the
kernels with -DPYPTO_CHECK_GM, which compiles the whole rule in before every TLOAD / TSTORE
(``pypto::check_gm_access``). Every build keeps the cheap guard against touching memory outside a
tensor. A failure names the access by its site, ``<core>:<number>`` (gm_bounds.access_sites), and
its numbers; ``bounds_error`` turns that into the message the sim gives for the same access.
"""
from __future__ import annotations

import os
import re

from ...ir import gm_bounds
from ...ir.block import CoreType
from . import compiler
from .errors import CpuKernelError

CHECK_FLAGS = ("-DPYPTO_CHECK_GM",)

_FAILURE = re.compile(r"GM access outside its tensor at site (AIC|AIV):(\d+): offsets \[([-\d, ]*)\], "
                      r"valid \[(-?\d+), (-?\d+)\], shape \[([-\d, ]*)\]")


def checked_mode(checked: bool | None) -> bool:
    """``checked`` when given, else whether PYPTO_CPU_CHECK is set (to anything but 0)."""
    if checked is not None:
        return bool(checked)
    return os.environ.get("PYPTO_CPU_CHECK", "") not in ("", "0")


def build_flags(checked: bool | None = None) -> tuple | None:
    """The compiler flags of a build in this mode (None: the compiler's defaults, unchecked)."""
    return compiler.cxx_flags() + CHECK_FLAGS if checked_mode(checked) else None


def _ints(text: str) -> tuple:
    return tuple(int(x) for x in text.split(",") if x.strip())


def bounds_error(kernel, text: str) -> CpuKernelError | None:
    """The error for a bounds failure ``text`` of ``kernel`` (a Block IR Kernel), or None when the
    text is no bounds failure or the kernel is not at hand."""
    m = _FAILURE.search(text)
    if m is None or kernel is None:
        return None
    block = kernel.block(CoreType(m.group(1)))
    sites = gm_bounds.access_sites(block) if block is not None else []
    n = int(m.group(2))
    if n >= len(sites):
        return None
    ins = sites[n]
    offsets, extents, one_d = gm_bounds.box(_ints(m.group(3)), int(m.group(4)), int(m.group(5)),
                                            bool(ins.attrs.get("trans", False)) and ins.op == "TLOAD")
    dims = gm_bounds.shape_view(_ints(m.group(6)), one_d)
    return CpuKernelError(gm_bounds.access_error_text(ins, block.name, offsets, extents, dims, one_d),
                          loc=ins.loc or kernel.loc, hint=gm_bounds.HINT)
