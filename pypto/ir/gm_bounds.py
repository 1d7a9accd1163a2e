"""The bounds rule of a GM access (TLOAD / TSTORE): one definition that every backend checks. (An indexed
row move, MGATHER / MSCATTER, checks its row offset and columns, and each index against the rows:
``row_index_text`` words a bad index; runtime/sim/indexed.py and kernel_support.hpp check it.)

An access moves a *box* of its GM tensor. The box's offsets are the ``GMRegion``'s, one per dim of
the tensor. Its extent is the tile's valid shape (rows, cols) over the tensor's last two dims —
(cols, rows) for a transposed TLOAD, whose GM rows become tile columns — and 1 in the leading dims.
A 1-D tensor of n elements is a [1, n] tensor here: its box takes the tile's valid cols, and the
valid rows must be 1.

THE RULE, in every dim d:   0 <= offset[d],   m <= extent[d],   offset[d] + extent[d] <= shape[d],
where m = 1 when the region is ``clipped`` (GMRegion) and m = 0 otherwise.

Tails are legal: a box at a tensor's edge lies inside when its valid shape is clipped to what is
left (``min(tile, size - offset)``; Professional mode clips every load and store whose valid shape
the user does not give, and marks the region ``clipped``). A clipped extent of 0 or less means the
tile starts at or past the tensor's end: an access outside the tensor, never an empty one (the load
would leave the tile as it was, the store would drop the tile). An unclipped region may be empty on
purpose (e.g. Tile mode's last sub-block of a tail tile: offset clamped to the end, extent 0).

Who checks it: ``sim`` on every run (``violation``; ``inside_source`` for its generated fast test);
``cpu`` in its checked mode (``pypto.runtime.cpu.run(..., checked=True)`` or PYPTO_CPU_CHECK=1,
built with -DPYPTO_CHECK_GM): ``pypto::detail::make_box`` in include/pypto/kernel_support.hpp checks
the same inequalities and reports the access's site (``access_sites``) and numbers, which this
module words the same way. Unchecked cpu builds check with m = 0 — only the guard against touching
memory outside the tensor, as cheap as before.
"""
from __future__ import annotations

from .block import Block, GMRegion, Instr
from .block_printer import _fmt_operand

# The rule for one dim, as Python source over an offset, an extent, a size and the least extent.
_DIM_RULE = "0 <= {o} and {m} <= {e} and {o} + {e} <= {d}"


def box(offsets, rows, cols, trans: bool = False) -> tuple[tuple, tuple, bool]:
    """(offsets, extents, one_d) of the box a tile of valid (rows, cols) moves at ``offsets``; a 1-D
    access is seen as a [1, n] one (leading offset 0, extent ``rows``; ``one_d`` says so)."""
    offsets = tuple(offsets)
    if trans:
        rows, cols = cols, rows
    if len(offsets) == 1:
        return (0,) + offsets, (rows, cols), True
    return offsets, (1,) * (len(offsets) - 2) + (rows, cols), False


def shape_view(shape, one_d: bool) -> tuple:
    """The tensor's shape as the rule sees it (a 1-D tensor as [1, n])."""
    return (1,) + tuple(shape) if one_d else tuple(shape)


def least_extent(region: GMRegion) -> int:
    return 1 if region.clipped else 0


def inside(offsets, extents, shape, least: int) -> bool:
    return all(0 <= o and least <= e and o + e <= d for o, e, d in zip(offsets, extents, shape))


def inside_source(offsets, extents, shape, least: int) -> str:
    """The rule as a Python boolean expression over the source texts of the offsets, extents and dims."""
    return " and ".join(_DIM_RULE.format(o=o, e=e, d=d, m=least)
                        for o, e, d in zip(offsets, extents, shape)) or "True"


def violation(offsets, extents, shape, least: int, one_d: bool = False) -> str | None:
    """Why the box breaks the rule (every dim that does), or None when it lies inside."""
    why = []
    for d, (o, e, n) in enumerate(zip(offsets, extents, shape)):
        if one_d and d == 0:
            if not least <= e <= 1:
                why.append(f"a 1-D tensor takes a tile with one valid row, the tile has {e}")
            continue
        dim = d - 1 if one_d else d
        if o < 0:
            why.append(f"dim {dim}: the offset {o} is negative")
        elif least and e < least:
            why.append(f"dim {dim}: the box starts at {o}, at or past the end of the dim (size {n}), so the "
                       f"tile's valid extent clipped to the tensor is {e}" if o >= n else
                       f"dim {dim}: the tile's valid extent clipped to the tensor is {e}")
        elif e < 0:
            why.append(f"dim {dim}: the extent {e} is negative")
        elif o + e > n:
            why.append(f"dim {dim}: the box ends at {o + e}, past the end of the dim (size {n})")
    return "; ".join(why) or None


def access_sites(block: Block) -> list[Instr]:
    """The GM accesses of a block, numbered in program order: generated code names an access by
    its core type and this number when its box breaks the rule."""
    return [i for i in block.instructions() if any(isinstance(o, GMRegion) for o in i.operands)]


def instr_text(ins: Instr) -> str:
    return f"{ins.op} " + ", ".join(_fmt_operand(o, None) for o in ins.operands)


def access_error_text(ins: Instr, block_name: str, offsets, extents, shape, one_d: bool = False) -> str:
    """The message of an access that breaks the rule, the same words on every backend (``offsets``,
    ``extents``, ``shape`` as ``box`` and ``shape_view`` give them)."""
    region = next(o for o in ins.operands if isinstance(o, GMRegion))
    reason = violation(offsets, extents, shape, least_extent(region), one_d)
    if one_d:
        offsets, extents, shape = offsets[1:], extents[1:], shape[1:]
    span = ", ".join(f"{o}:{o + e}" for o, e in zip(offsets, extents))
    verb = "writes" if ins.spec.kind == "store" else "reads"
    return (f"GM access outside its tensor: `{instr_text(ins)}` (block {block_name}) {verb} "
            f"{region.param}[{span}] (offsets {list(offsets)}, extent {list(extents)}), but {region.param} "
            f"has shape {list(shape)}: {reason}")


def row_index_text(ins, index: int, row: int, rows: int, param: str) -> str:
    """The message of an MGATHER / MSCATTER index outside the rows it picks from, the same on sim and cpu.
    No loc: the error is at the user's call of the compiled function, naming the line that traced the lookup."""
    where = f" traced at {ins.loc}" if ins.loc is not None else ""
    verb = "writes" if ins.op == "MSCATTER" else "reads"
    op = ins.attrs.get("_lookup", ins.op)
    return (f"{op} ({ins.op}){where} got index {index} at row {row} of its index tile, outside the dim of size {rows} "
            f"it {verb} ({param}; expected 0 <= index < {rows}); nothing was moved")


HINT = ("the tensors passed do not cover every box the kernel moves: check the argument shapes against "
        "the kernel's loops, or clip the tile's valid shape to what is left of the tensor (a tail)")
