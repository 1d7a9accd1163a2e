"""Fusion planning: which TensorGraph ops share one tile program (one AIV kernel, intermediates in UB).

Every vector op starts as its own group with the op's iteration space. Groups then merge along
producer -> consumer edges, in program order, when
  * the merged iteration space is one of the two spaces (the other maps into it, order kept),
    with the dims the shared values run along identified;
  * no other group sits on a path between them (the group graph stays acyclic);
  * a reduction kept inside a group covers its reduced dims with one tile ("whole": static and
    small enough), or else the group loops over that dim sequentially and the reduction's result
    leaves the group (two-level reduction: its consumers go to another group);
  * the smallest tiles of every value of the merged group still fit the vector buffer, double-buffered.
Matmuls form cube groups of their own; views (box, reshape, transpose...) never join a group — a
value read through one is materialised in GM.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from ..errors import CompileError
from .iterspace import node_space, op_class

MEMBER_CLASSES = ("ew", "reduce", "scan", "gen", "mask", "alias")
NO_SEQUENTIAL = ("argmax",)        # reductions whose partial results cannot be combined by a plain op


@dataclass
class Group:
    id: int
    kind: str                         # vector | matmul
    nodes: list
    dims: list                        # iteration Dims (roots), outer to inner
    whole: set = field(default_factory=set)
    seq: object = None                # the Dim looped sequentially (two-level reduction), or None
    seq_node: int | None = None       # the reduction that makes it sequential

    def roots(self):
        self.dims = [d.find() for d in self.dims]
        self.whole = {d.find() for d in self.whole}
        self.seq = self.seq.find() if self.seq is not None else None
        return self


@dataclass
class FusionPlan:
    groups: dict                      # group id -> Group
    group_of: dict                    # node id -> group id
    spaces: dict                      # node id -> NodeSpace
    order: list                       # ("group", id) | ("node", id), a valid program order


def _static(d) -> bool:
    return isinstance(d, int)


def plan_fusion(g, machine, *, enable: bool = True) -> FusionPlan:
    spaces, groups, group_of = {}, {}, {}
    ub = machine.capacity["UB"]
    for nid in g.nodes():
        cls = op_class(g, nid)
        if cls == "matmul":
            groups[nid] = Group(nid, "matmul", [nid], [])
            group_of[nid] = nid
        elif cls in MEMBER_CLASSES:
            sp = node_space(g, nid)
            spaces[nid] = sp
            grp = Group(nid, "vector", [nid], list(sp.dims), whole=set(sp.scans))
            if sp.reduces:
                if _fits_whole(g, nid, sp, ub, machine.alignment):
                    grp.whole |= set(sp.reduces)
                elif len(sp.reduces) == 1 and g.op(nid) not in NO_SEQUENTIAL:
                    grp.seq, grp.seq_node = sp.reduces[0], nid
                else:
                    raise CompileError(f"{g.op(nid)} over {len(sp.reduces)} dims of sizes "
                                       f"{[d.size for d in sp.reduces]} does not fit one tile and cannot be split",
                                       loc=g.node(nid)["loc"])
            for d in sp.scans:
                if not _static(d.size):
                    raise CompileError(f"{g.op(nid)} along a dynamic dim ({d.size}) is not supported: the scanned "
                                       "dim must be static and fit one tile", loc=g.node(nid)["loc"])
            groups[nid] = grp
            group_of[nid] = nid
    if enable:
        succ = _item_graph(g, group_of)
        for nid in g.nodes():
            if nid not in spaces:
                continue
            for src in g.node(nid)["inputs"]:
                gp, gc = group_of.get(src), group_of[nid]
                if gp is None or gp == gc or groups[gp].kind != "vector":
                    continue
                if _try_merge(g, groups, succ, spaces, groups[gp], groups[gc], ub):
                    merged = groups[gc]
                    for n in groups[gp].nodes:
                        group_of[n] = gc
                    merged.nodes = sorted(merged.nodes + groups[gp].nodes)
                    del groups[gp]
                    _merge_items(succ, gp, gc)
    order = _item_order(g, groups, group_of)
    return FusionPlan({k: grp.roots() for k, grp in groups.items()}, group_of, spaces, order)


def _fits_whole(g, nid, sp, ub, alignment=32) -> bool:
    elems = 1
    for d in sp.reduces + sp.scans:
        if not _static(d.size):
            return False
        elems *= d.size
    # (an arg-reduction's int64 indices are one value per reduced row: its input is the wide tile)
    sized = g.node(nid)["inputs"][0] if g.op(nid) in NO_SEQUENTIAL else nid
    itemsize = max(4, g.info(sized).dtype.itemsize)
    # along rows (the input's innermost dim kept), a tile is at least one aligned block of columns wide
    # (of the narrowest dtype a fused cast may bring: 2 bytes)
    inner = next((d for d in reversed(sp.in_maps[0]) if d is not None), None) if sp.in_maps else None
    if inner is not None and inner not in sp.reduces + sp.scans:
        elems *= min(alignment // 2, inner.size) if _static(inner.size) else alignment // 2
    return elems * itemsize * 3 * 2 <= ub


def _edge_pairs(g, spaces, gp: Group, gc: Group):
    """(producer Dim, consumer Dim) pairs from every value flowing from gp into gc, and those values."""
    pairs, values = [], []
    members = set(gp.nodes)
    for c in gc.nodes:
        for k, src in enumerate(g.node(c)["inputs"]):
            if src not in members:
                continue
            values.append(src)
            out_map = spaces[src].out_map
            in_map = spaces[c].in_maps[k]
            for a, b in zip(out_map, in_map):
                if a is not None and b is not None:
                    pairs.append((a.find(), b.find()))
                elif (a is None) != (b is None):
                    return None, None
    # a value both groups read from outside (x in softmax: amax(x) and x - max) runs along the same dims
    reads_p = {}
    for n in gp.nodes:
        for k, src in enumerate(g.node(n)["inputs"]):
            if src not in members:
                reads_p.setdefault(src, []).append(spaces[n].in_maps[k])
    gc_members = set(gc.nodes)
    for c in gc.nodes:
        for k, src in enumerate(g.node(c)["inputs"]):
            if src in gc_members or src not in reads_p or g.op(src) == "scalar":
                continue
            for pmap in reads_p[src]:
                for a, b in zip(pmap, spaces[c].in_maps[k]):
                    if a is not None and b is not None:
                        pairs.append((a.find(), b.find()))
    return pairs, values


def _try_merge(g, groups, succ, spaces, gp: Group, gc: Group, ub) -> bool:
    gp.roots(), gc.roots()
    pairs, values = _edge_pairs(g, spaces, gp, gc)
    if not pairs and not values:
        return False
    # sequential (two-level) reductions: their result must leave the group
    if gp.seq is not None and gp.seq_node in values:
        return False
    if gp.seq is not None and gc.seq is not None:
        return False
    fwd, back = {}, {}
    for a, b in pairs or []:
        if fwd.setdefault(a, b) is not b or back.setdefault(b, a) is not a:
            return False
    if all(d in fwd for d in gp.dims) and _ordered([fwd[d] for d in gp.dims], gc.dims):
        merged_dims, rename = gc.dims, fwd
    elif all(d in back for d in gc.dims) and _ordered([back[d] for d in gc.dims], gp.dims):
        merged_dims, rename = gp.dims, None
    else:
        return False
    if _creates_cycle(succ, gp.id, gc.id):
        return False
    # tentative: capacity of the merged group at its smallest tiles
    def ren(d):
        return rename.get(d, d) if rename else back.get(d, d)
    whole = {ren(d) for d in gp.whole} | {ren(d) for d in gc.whole}
    seq = ren(gp.seq) if gp.seq is not None else (ren(gc.seq) if gc.seq is not None else None)
    if seq is not None and seq in whole:
        return False
    if _min_footprint(g, spaces, gp.nodes + gc.nodes, whole, ren) * 2 > ub:
        return False
    merged = Group(gc.id, "vector", [], [ren(d) for d in merged_dims], whole, seq)
    if not _tileable(g, spaces, gp.nodes + gc.nodes, merged, ren):
        return False
    # commit: identify the paired dims
    for a, b in pairs:
        a, b = a.find(), b.find()
        if a is not b:
            if rename is not None:
                a.parent = b          # gp's dims take gc's identity
            else:
                b.parent = a
    gc.dims = [d.find() for d in merged_dims]
    gc.whole = {d.find() for d in gp.whole | gc.whole}
    if gp.seq is not None:
        gc.seq, gc.seq_node = gp.seq.find(), gp.seq_node
    return True


def _tileable(g, spaces, nodes, grp, ren) -> bool:
    """Whole dims must land on the tile's two axes once neighbouring dims collapse (checked on the
    tentative merge: ``ren`` maps each dim to the one it would become; nothing is committed)."""
    from .vector_tiling import canonical_axes

    def r(d):
        return ren(d.find())
    presences, pinned = [], set()
    for n in nodes:
        sp = spaces[n]
        presences.append({r(d) for d in sp.out_map if d is not None})
        for m in sp.in_maps:
            presences.append({r(d) for d in m if d is not None})
        pinned |= {r(d) for d in sp.scans}
        if g.op(n) in ("tril", "triu"):
            pinned |= {r(d) for d in sp.out_map[-2:] if d is not None}
    try:
        canonical_axes(grp, presences, [], pinned)
    except CompileError:
        return False
    return True


def _ordered(images, dims) -> bool:
    pos = {d: i for i, d in enumerate(dims)}
    idx = [pos.get(d) for d in images]
    return None not in idx and idx == sorted(idx) and len(set(idx)) == len(idx)


def _item_graph(g, group_of) -> dict:
    """Successor sets between items (a group id, or ("n", node) for a node in no group)."""
    succ = {}
    for src, dst in g.nx.edges:
        a, b = group_of.get(src, ("n", src)), group_of.get(dst, ("n", dst))
        if a != b:
            succ.setdefault(a, set()).add(b)
    return succ


def _merge_items(succ, gp, gc) -> None:
    succ[gc] = (succ.get(gc, set()) | succ.pop(gp, set())) - {gc, gp}
    for x, out in succ.items():
        if gp in out:
            out.discard(gp)
            if x != gc:
                out.add(gc)


def _creates_cycle(succ, gp, gc) -> bool:
    """True when gc reaches gp, or gp reaches gc through some third item."""
    def reach(start, target, skip_direct):
        stack = [s for s in succ.get(start, ()) if not (skip_direct and s == target)]
        seen = set(stack)
        while stack:
            x = stack.pop()
            if x == target:
                return True
            for y in succ.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False
    return reach(gp, gc, True) or reach(gc, gp, False)


def _min_footprint(g, spaces, nodes, whole, ren) -> int:
    """Peak bytes of the group's live values at their smallest tiles (whole dims full, the others one
    element, the innermost extent rounded up to 32 bytes): inputs from their first to last use,
    results to their last use in the group (to the end when stored for others)."""
    nodes = sorted(nodes)
    members = set(nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    first, last, size = {}, {}, {}
    end = len(nodes)
    for n in nodes:
        for k, src in enumerate(g.node(n)["inputs"]):
            if g.op(src) == "scalar" and src not in members:
                continue
            key = src
            if src not in members and key not in size:
                size[key] = _value_bytes(g.info(src).dtype.itemsize, spaces[n].in_maps[k], whole, ren)
                first[key] = pos[n]
            last[key] = pos[n]
        size[n] = _value_bytes(g.info(n).dtype.itemsize, spaces[n].out_map, whole, ren)
        first[n] = pos[n]
        last.setdefault(n, pos[n])
        if any(u not in members for u in g.users(n)) or not g.users(n):
            last[n] = end
    live = [0] * (end + 1)
    for key, nbytes in size.items():
        for i in range(first[key], last[key] + 1):
            live[i] += nbytes
    return max(live)


def _value_bytes(itemsize, amap, whole, ren) -> int:
    elems = 1
    for d in amap:
        if d is not None and ren(d.find()) in whole:
            elems *= d.size
    return max(elems * itemsize, 32)


def _item_order(g, groups, group_of) -> list:
    """Groups and the nodes outside any group, in an order that respects every data path."""
    def item(n):
        return ("group", group_of[n]) if n in group_of else ("node", n)
    dag = nx.DiGraph()
    first = {}
    for n in g.nodes():
        it = item(n)
        dag.add_node(it)
        first.setdefault(it, n)
    for src, dst in g.nx.edges:
        a, b = item(src), item(dst)
        if a != b:
            dag.add_edge(a, b)
    return list(nx.lexicographical_topological_sort(dag, key=lambda it: first[it]))
