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

INDEX_OPS = ("index_select", "gather", "scatter")
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
    src = g.node(nid)["inputs"][1]
    while g.op(src) in VALUE_PRESERVING:
        src = g.node(src)["inputs"][0]
    return src


def picked_dim_size(g, nid):
    node = g.node(nid)
    return g.info(node["inputs"][0]).shape[node["attrs"]["dim"]]


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
