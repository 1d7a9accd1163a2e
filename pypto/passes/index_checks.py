"""Range checks for the indices of index_select / gather / scatter that are computed inside the traced function.

canonicalize turns index_select and gather into a one-hot select, under which an index outside the dim
picks nothing (a row of zeros) where torch raises. Indices that are an argument of the compiled function
are checked on the host before each run (runtime/index_bounds.py). For the others, canonicalize also
emits the number of indices outside [0, n) (one compare and one sum over the indices) as an extra graph
output of kind ``index_check``; the backend reads it after the run and raises (backends.Compiled.run).
torch's index_select, gather and embedding all refuse negative indices, hence [0, n), not [-n, n).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes
from ..errors import SourceLoc
from ..frontend import api as P, hints
from ..ir.tensor_graph import OutputSpec


def _input_dim(shapes, attrs):
    return shapes[0][attrs["dim"]]


# op -> (the position of its index input, the size its indices pick from: (input shapes, attrs) -> size).
# one_hot / bincount / index_add are decomposed into scatters before canonicalize; listing them here
# checks their index arguments on the host (runtime/index_bounds.py) and on the reference backend.
INDEX_OPS = {"index_select": (1, _input_dim), "gather": (1, _input_dim), "scatter": (1, _input_dim),
             "index_copy": (1, _input_dim),
             "index_add": (1, _input_dim), "one_hot": (0, lambda shapes, attrs: attrs["num_classes"]),
             "bincount": (0, lambda shapes, attrs: attrs["minlength"])}
VALUE_PRESERVING = ("reshape", "transpose", "permute", "expand")
CHECK_KIND = "index_check"


@dataclass(frozen=True)
class IndexRangeCheck:
    """What an ``index_check`` output counts: the indices of ``op`` (traced at ``loc``) outside [0, bound)."""
    op: str
    bound: object              # the size of the dim they pick from (an int or a size expression)
    loc: SourceLoc | None


def index_source(g, nid) -> int:
    """The node whose values the indices of index_select / gather ``nid`` are (through value-keeping ops)."""
    src = g.node(nid)["inputs"][index_position(g.op(nid))]
    while g.op(src) in VALUE_PRESERVING:
        src = g.node(src)["inputs"][0]
    return src


def index_position(op: str) -> int:
    return INDEX_OPS[op][0]


def picked_bound(op: str, shapes: list, attrs: dict):
    """The size the indices of ``op`` pick from, given its inputs' shapes and its attrs."""
    return INDEX_OPS[op][1](shapes, attrs)


def picked_dim_size(g, nid):
    node = g.node(nid)
    return picked_bound(node["op"], [g.info(i).shape for i in node["inputs"]], node["attrs"])


def out_of_range_count(g, nid, idx):
    """For index op ``nid`` of ``g`` whose indices are computed (not an argument): a [1] float32 tensor,
    the number of values of ``idx`` (its rebuilt indices) outside [0, n), and what it checks; else None."""
    if g.op(index_source(g, nid)) == "input":
        return None
    n = picked_dim_size(g, nid)
    with hints.scoped():                  # the lookup's tile hints are for its own rank, not this 1-D count
        flat = idx if idx.ndim == 1 else P.reshape(idx, -1)
        bad = P.logical_or(P.lt(flat, 0), P.ge(flat, n))
        count = P.sum(P.cast(bad, dtypes.float32), 0, keepdim=True)   # exact: up to 2**24 indices per check
    return count, IndexRangeCheck(g.op(nid), n, g.node(nid)["loc"])


def add_check_outputs(g, checks) -> None:
    """Append ``checks`` ((count tensor, IndexRangeCheck) pairs built in ``g``) to g's outputs."""
    g.outputs += [OutputSpec(count._node, CHECK_KIND, k, check) for k, (count, check) in enumerate(checks)]
