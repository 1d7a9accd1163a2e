"""Sections, loops, stages and launch symbols: ``pl.section_vector()``, ``pl.range``, ``pl.get_block_idx()`` ..."""
from __future__ import annotations

from dataclasses import dataclass

from pypto import symbolic
from pypto.ir.block import BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, CoreType

from .dsl import dsl
from .parser import is_runtime, norm


@dataclass(frozen=True)
class SectionMarker:
    core: CoreType


@dataclass(frozen=True)
class StageMarker:
    index: int


@dsl("section_vector", "`with pl.section_vector():` — the body runs on the vector cores (AIV).")
def section_vector(parser, call):
    call.bind([], "with pl.section_vector():")
    return SectionMarker(CoreType.AIV)


@dsl("section_cube", "`with pl.section_cube():` — the body runs on the cube cores (AIC).")
def section_cube(parser, call):
    call.bind([], "with pl.section_cube():")
    return SectionMarker(CoreType.AIC)


@dsl("stage", "`with pl.stage(k):` marks stage k of a pl.range body for software pipelining.")
def stage(parser, call):
    b = call.bind(["index"], "with pl.stage(k):")
    k = b["index"]
    if not isinstance(k, int) or k < 0:
        raise call.error("pl.stage takes a compile-time int >= 0", at=0)
    return StageMarker(k)


@dsl("range", "`for i in pl.range([start,] stop[, step]):` — a loop with run-time bounds (Block IR For).")
def range_(parser, call):
    raise call.error("pl.range(...) is only valid as the iterable of a `for` statement",
                     hint="for i in pl.range(start, stop, step): ...")


def range_bounds(call):
    n = len(call.args)
    if call.kwargs:
        b = call.bind(["start", "stop", ("step", 1)], "pl.range([start,] stop[, step])")
        start, stop, step = b["start"], b["stop"], b["step"]
    elif n == 1:
        start, stop, step = 0, call.args[0], 1
    elif n in (2, 3):
        start, stop = call.args[0], call.args[1]
        step = call.args[2] if n == 3 else 1
    else:
        raise call.error(f"pl.range takes 1 to 3 arguments ([start,] stop[, step]), found {n}")
    start, stop, step = norm(start), norm(stop), norm(step)
    for v, at in ((start, 0), (stop, 1 if n > 1 else 0), (step, 2)):
        if not (isinstance(v, int) or is_runtime(v)) or isinstance(v, bool):
            raise call.error(f"pl.range bounds are integers, found {type(v).__name__}", at=at if at < n else None)
    if isinstance(step, int) and step <= 0:
        raise call.error(f"pl.range needs a positive step, found {step}", at=2 if n == 3 else None)
    return start, stop, step


@dsl("get_block_idx", "Index of this core's block (0 .. block_dim-1); a run-time scalar.")
def get_block_idx(parser, call):
    call.bind([], "pl.get_block_idx()")
    return BLOCK_IDX


@dsl("get_block_num", "Number of blocks of the launch (block_dim); a run-time scalar.")
def get_block_num(parser, call):
    call.bind([], "pl.get_block_num()")
    return BLOCK_NUM


@dsl("get_subblock_idx", "Index of this vector core within its cluster (0 or 1 on a2a3 mixed kernels).")
def get_subblock_idx(parser, call):
    call.bind([], "pl.get_subblock_idx()")
    if not parser.has_cube:
        return 0
    return SUBBLOCK_IDX


@dsl("get_subblock_num", "Vector cores per cluster: the machine's AIV:AIC ratio in mixed kernels, else 1.")
def get_subblock_num(parser, call):
    call.bind([], "pl.get_subblock_num()")
    return int(parser.machine.cores.get("aiv_per_aic", 2)) if parser.has_cube else 1


@dsl("get_tiling_key", "The TilingKey values this variant is compiled for (attributes per field).")
def get_tiling_key(parser, call):
    call.bind([], "pl.get_tiling_key()")
    if parser.tiling_key is None:
        raise call.error("this kernel has no TilingKey", hint="@pl.jit(tiling_key=pl.TilingKey(FIELD=(v1, v2)))")
    return parser.tiling_key


@dsl("ceil_div", "ceil(a / b) for sizes (run-time or compile-time).")
def ceil_div(parser, call):
    b = call.bind(["a", "b"], "pl.ceil_div(a, b)")
    return norm(symbolic.ceildiv(b["a"], b["b"]))


@dsl("min", "min of scalars (run-time or compile-time).")
def min_(parser, call):
    if not call.args or call.kwargs:
        raise call.error("pl.min takes scalars: pl.min(a, b, ...)")
    return norm(symbolic.smin(*[norm(a) for a in call.args]))


@dsl("max", "max of scalars (run-time or compile-time).")
def max_(parser, call):
    if not call.args or call.kwargs:
        raise call.error("pl.max takes scalars: pl.max(a, b, ...)")
    return norm(symbolic.smax(*[norm(a) for a in call.args]))
