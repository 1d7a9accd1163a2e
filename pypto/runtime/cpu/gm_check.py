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

from ...errors import IndexOutOfRangeError
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


_ROW_FAILURE = re.compile(r"row index outside its tensor at site (AIC|AIV):(\d+): index (-?\d+) at row (-?\d+), "
                          r"rows (-?\d+), columns (-?\d+):(-?\d+) of (-?\d+)")


def _site(kernel, m):
    """(block, instruction) of the access site a failure names (core type, site number), or (block, None)."""
    block = kernel.block(CoreType(m.group(1)))
    sites = gm_bounds.access_sites(block) if block is not None else []
    n = int(m.group(2))
    return block, (sites[n] if n < len(sites) else None)


def _row_error(kernel, m):
    """An MGATHER / MSCATTER index (or its columns) outside its tensor, worded as the sim words it."""
    block, ins = _site(kernel, m)
    if ins is None:
        return None
    index, row, rows, c0, c1, width = (int(m.group(k)) for k in range(3, 9))
    param = next(o.param for o in ins.operands if hasattr(o, "param"))
    verb = "writes" if ins.spec.kind == "store" else "reads"
    if row >= 0:
        return IndexOutOfRangeError(gm_bounds.row_index_text(ins, index, row, rows, param))
    return CpuKernelError(f"{ins.op}: columns {c0}:{c1} of {width}, or the index tile's valid rows, do not fit "
                          f"{param} ({verb}); `{gm_bounds.instr_text(ins)}` (block {block.name})",
                          loc=ins.loc or kernel.loc)


def bounds_error(kernel, text: str) -> CpuKernelError | None:
    """The error for a bounds failure ``text`` of ``kernel`` (a Block IR Kernel), or None when the
    text is no bounds failure or the kernel is not at hand."""
    rm = _ROW_FAILURE.search(text)
    if rm is not None and kernel is not None:
        return _row_error(kernel, rm)
    m = _FAILURE.search(text)
    if m is None or kernel is None:
        return None
    block, ins = _site(kernel, m)
    if ins is None:
        return None
    offsets, extents, one_d = gm_bounds.box(_ints(m.group(3)), int(m.group(4)), int(m.group(5)),
                                            bool(ins.attrs.get("trans", False)) and ins.op == "TLOAD")
    dims = gm_bounds.shape_view(_ints(m.group(6)), one_d)
    return CpuKernelError(gm_bounds.access_error_text(ins, block.name, offsets, extents, dims, one_d),
                          loc=ins.loc or kernel.loc, hint=gm_bounds.HINT)
