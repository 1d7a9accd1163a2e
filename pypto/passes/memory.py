"""On-chip memory (Block IR -> Block IR): an address for every tile, codegen's scratch tiles included.

Contract of ``plan_memory(block, machine, regions=None, *, strategy="first_fit", tile_loc=None,
max_pool=4)`` (Tensor mode, the Tile level):
  in:  a Block whose tiles have static shapes (addresses unset, or set by an earlier run: re-planned);
  out: the same Block with ``TileDecl.addr`` set for every tile, aligned and inside its space's capacity;
       no two tiles live at the same time (pypto/ir/liveness.py) share bytes, except an elementwise
       instruction writing in place over a source it reads for the last time (same address, shape,
       element size); every instruction whose PTO-ISA form takes a scratch tile (``InstrSpec.
       needs_scratch``) names its own scratch TileDecl in ``attrs["tmp"]`` (see *scratch* below);
       returns {space: bytes used}.
  errors: more bytes than a space holds: ``CompileError`` ("first_fit"; tile choice catches it and picks
       smaller tiles) or ``TilingError`` naming the user's line of the largest live tiles ("pools").

Contract of ``check_addresses(block, machine, *, tile_loc=None, groups=None, names=None)``
(Professional mode):
  in:  a Block whose tiles carry the user's addresses;
  out: the same Block, user addresses unchanged, scratch tiles added and placed as below; one for which
       no such bytes are free is left out (codegen then declares that scratch without an address, as it
       did for every scratch before this pass planned them);
  errors: ``MemoryPlanError`` naming the user's line when a tile is past its space's capacity or
       misaligned, or when an instruction writes a buffer whose bytes overlap another buffer that is
       still to be read (liveness by backward dataflow on the structured program, loop bodies to a fixed
       point; the declarations of one buffer, ``TileDecl.buffer``, are one; tiles of one ``groups`` key
       are the user's deliberate sharing).

Strategies of ``plan_memory``:
  first_fit  Tiles are grouped into regions (``regions``: tile name -> region key; one region when
             absent); the regions of a space are stacked, so tiles of different regions never share
             bytes (the two ping-pong copies of a loop body are two regions: that is what lets them be in
             flight together). Inside a region first fit assigns addresses by live range and reuses the
             bytes of dead tiles.
  pools      (Tile level) lowest-address reuse puts the next tile of a pipelined loop on the bytes the
             previous one just left, so the next load waits for the last reader and double buffering is
             lost. Here tiles of one size (and one load/store class) share a small pool of buffers taken
             *least recently freed* first (``max_pool``, then fewer, buffers per size as the capacity
             allows; if even two do not fit, first fit by liveness alone).

Scratch tiles: pto-isa's reductions, select, transpose and pow take a ``tmp`` tile. Each such
instruction gets a TileDecl ``tmp<N>`` of its own, shaped like its first source, named in
``attrs["tmp"]`` and live at that instruction only (ir/liveness.py counts it). It is placed after the
other tiles, at the first of: past all of them (bytes no other tile uses, so pipe sync adds no flag for
it); the lowest bytes that no tile live across the instruction holds and only vector-pipe instructions
touch (still no flag: one pipe runs in order); past the other tiles planned again in a space that much
smaller (when they still fit). Pipe sync counts an instruction's scratch among its resources all the
same. (Bytes of dead tiles that loads or stores touch would do too, ordered by flags, but cost the
overlap of loads and compute: kept off.) Codegen declares the scratch at its address; the simulator
checks its capacity like any operand's.
"""
from __future__ import annotations

from ..errors import CompileError, MemoryPlanError, TilingError
from ..ir.block import Block, For, If, Instr, TileDecl
from ..ir.isa import Pipe
from ..ir.liveness import live_ranges, positions

STRATEGIES = ("first_fit", "pools")
POOL_SIZES = (4, 3, 2)    # "pools": buffers per tile size before one is reused, tried in turn until the tiles fit
_INPLACE_KINDS = ("elementwise", "transcendental", "cast", "compare", "select")


def _align_up(n: int, align: int) -> int:
    return -(-n // align) * align


# ---------------------------------------------------------------------------------- entry points
def plan_memory(block: Block, machine, regions: dict | None = None, *, strategy: str = "first_fit",
                tile_loc: dict | None = None, max_pool: int = POOL_SIZES[0]) -> dict:
    """Assign ``TileDecl.addr`` for every tile of ``block`` (contract: module docstring); {space: bytes used}."""
    if strategy not in STRATEGIES:
        raise ValueError(f"memory strategy {strategy!r}: expected one of {STRATEGIES}")
    scratch = add_scratch_tiles(block)
    planned = [t for t in block.tiles if t.name not in scratch]

    def plan(reserve: dict) -> dict:
        used = {}
        for space, tiles in _by_space(planned).items():
            cap = machine.capacity[space.capacity_key] - reserve.get(space, 0)
            if strategy == "pools":
                used[space] = _plan_pools(block, tiles, machine, cap, tile_loc or {}, max_pool)
            else:
                used[space] = _plan_regions(block, tiles, machine, regions or {}, cap)
        return used
    used = plan({})
    left = _place_scratch(block, scratch, machine, used, (_PAST, _VECTOR_ONLY))
    if left:
        # room past the other tiles at the price of a tighter plan
        reserve = {}
        for _, t in left:
            reserve[t.space] = max(reserve.get(t.space, 0), _align_up(t.nbytes, machine.alignment))
        try:
            used = plan(reserve)
        except (CompileError, TilingError):
            used = plan({})
        left = _place_scratch(block, scratch, machine, used, (_PAST, _VECTOR_ONLY))
    if left:
        ins, t = left[0]
        cap = machine.capacity[t.space.capacity_key]
        raise (TilingError if strategy == "pools" else CompileError)(
            f"block {block.name}: {ins.op} needs a {t.nbytes}-byte scratch tile in {t.space} ({t.dtype}[{t.shape[0]}, "
            f"{t.shape[1]}]) and no {_align_up(t.nbytes, machine.alignment)} bytes of the {cap}-byte {t.space} are "
            f"free there", loc=ins.loc or block.loc, hint="smaller tiles leave room for it")
    return used


def check_addresses(block: Block, machine, *, tile_loc: dict | None = None, groups: dict | None = None,
                    names: dict | None = None) -> dict:
    """Check the user's tile addresses and place the scratch tiles (contract: module docstring).

    Keyed by buffer name (``TileDecl.buffer_name``): ``tile_loc`` the SourceLoc of its declaration (errors
    point there), ``groups`` the key of a tile group whose buffers may share bytes, ``names`` the name the
    user gave it. Returns {space: bytes used}."""
    tile_loc = tile_loc or {}
    names = names or {}
    scratch = add_scratch_tiles(block)
    used = {}
    for t in block.tiles:
        if t.name in scratch:
            continue
        problem = placement_problem(t.space, t.addr, t.nbytes, machine)
        if problem:
            raise MemoryPlanError(f"tile '{names.get(t.buffer_name, t.buffer_name)}' ({t.nbytes} bytes) {problem[1]}",
                                  loc=tile_loc.get(t.buffer_name))
        used[t.space] = max(used.get(t.space, 0), t.addr + t.nbytes)
    _check_live_overlaps(block, [t for t in block.tiles if t.name not in scratch], tile_loc, groups or {}, names)
    left = _place_scratch(block, scratch, machine, used, (_PAST, _VECTOR_ONLY))
    if left:
        _drop_scratch(block, {t.name for _, t in left})
    return used


def placement_problem(space, addr, nbytes: int, machine) -> tuple[str, str] | None:
    """Why ``nbytes`` at ``addr`` cannot be a tile of ``space``: ("address" | "capacity" | "alignment",
    the reason in words), or None when they can."""
    cap = machine.capacity[space.capacity_key]
    if not isinstance(addr, int) or isinstance(addr, bool) or addr < 0:
        return "address", f"address {addr!r} is not a compile-time int >= 0"
    if addr + nbytes > cap:
        return "capacity", (f"at {addr:#x} ends at {addr + nbytes:#x}, beyond {space} ({space.capacity_key}) "
                            f"capacity {cap:#x} ({cap // 1024} KiB)")
    if addr % machine.alignment:
        return "alignment", f"address {addr:#x} is not {machine.alignment}-byte aligned"
    return None


# ---------------------------------------------------------------------------------- scratch tiles
def add_scratch_tiles(block: Block) -> set[str]:
    """Give every instruction that takes a scratch tile its own TileDecl (named in ``attrs["tmp"]``);
    returns the names of the block's scratch tiles (those of an earlier run kept)."""
    tiles = {t.name: t for t in block.tiles}
    scratch = set()
    for ins in block.instructions():
        if not ins.spec.needs_scratch:
            continue
        name = ins.attrs.get("tmp")
        if name is None:
            ops = ins.tile_operands()
            like = tiles[ops[1] if len(ops) > 1 else ops[0]]
            k = len(scratch)
            while f"tmp{k}" in tiles:
                k += 1
            name = f"tmp{k}"
            tiles[name] = TileDecl(name, like.space, like.dtype, tuple(like.shape))
            block.tiles.append(tiles[name])
            ins.attrs["tmp"] = name
        scratch.add(name)
    return scratch


_PAST, _VECTOR_ONLY = "past", "vector only"     # where a scratch tile may go, in turn


def _place_scratch(block, scratch, machine, used, where) -> list:
    """Place each scratch tile at the first of ``where`` that has room: ``_PAST`` the space's other tiles
    (``used``: their end per space; updated), or the lowest bytes that no tile live across its
    instruction holds and only vector-pipe instructions touch (``_VECTOR_ONLY``). Returns
    [(instruction, scratch tile)] of those with no room (address None)."""
    if not scratch:
        return []
    align = machine.alignment
    tiles = {t.name: t for t in block.tiles}
    others = [t for t in block.tiles if t.name not in scratch]
    top = {t.space: _align_up(used.get(t.space, 0), align) for t in others}
    busy = off_vector = None
    left = []
    for ins in block.instructions():
        t = tiles.get(ins.attrs.get("tmp"))
        if t is None or t.name not in scratch:
            continue
        size, cap = _align_up(t.nbytes, align), machine.capacity[t.space.capacity_key]
        t.addr = None
        for w in where:
            if w == _PAST:
                addr = top.get(t.space, 0)
            else:
                if busy is None:
                    busy, off_vector = _live_across(block, others), _off_vector(block, others)
                taken = [tiles[n] for n in busy.get(id(ins), ())] + off_vector
                addr = _lowest_gap(sorted({(0, x.addr, _align_up(x.nbytes, align), x.name) for x in taken
                                           if x.space == t.space}), size)
            if addr + size <= cap:
                t.addr = addr
                used[t.space] = max(used.get(t.space, 0), addr + size)
                break
        if t.addr is None:
            left.append((ins, t))
    return left


def _off_vector(block, tiles) -> list:
    """The tiles that an instruction on another pipe than the vector pipe touches."""
    names = {n for ins in block.instructions() if ins.pipe != Pipe.V for n in ins.tile_operands()}
    return [t for t in tiles if t.name in names]


def _drop_scratch(block, names) -> None:
    block.tiles = [t for t in block.tiles if t.name not in names]
    for ins in block.instructions():
        if ins.attrs.get("tmp") in names:
            del ins.attrs["tmp"]


# ---------------------------------------------------------------------------------- helpers
def _by_space(tiles) -> dict:
    by_space: dict = {}
    for t in tiles:
        by_space.setdefault(t.space, []).append(t)
    return by_space


def _definitions(order) -> dict:
    """tile -> (position, instruction) of its first write."""
    defs = {}
    for pos, ins in enumerate(order):
        ops = ins.tile_operands()
        if ops and ins.spec.kind != "store":
            defs.setdefault(ops[0], (pos, ins))
    return defs


def _inplace_ok(ins: Instr, dst, src, block: Block) -> bool:
    spec = ins.spec
    if spec.kind not in _INPLACE_KINDS and not (spec.kind == "expand" and len(ins.operands) == 3):
        return False
    if spec.kind == "expand" and src != ins.operands[1]:
        return False
    a, b = block.tile(dst), block.tile(src)
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and a.space == b.space


# ---------------------------------------------------------------------------------- strategy: first fit
def _plan_regions(block, tiles, machine, regions, cap) -> int:
    align = machine.alignment
    order, _ = positions(block)
    rng, defs = live_ranges(block), _definitions(order)
    by_region: dict = {}
    for t in tiles:
        by_region.setdefault(regions.get(t.name, ""), []).append(t)
    base = 0
    for key in _region_order(by_region):
        size = _first_fit(by_region[key], rng, defs, block, align)
        for t in by_region[key]:
            t.addr += base
        base += _align_up(size, align)
    if base > cap:
        space = tiles[0].space
        raise CompileError(f"block {block.name}: tiles need {base} bytes of {space}, over its {cap} bytes",
                           loc=block.loc)
    return base


def _region_order(by_region):
    rank = {"setup": 0, "outer": 1, "outer0": 1, "outer1": 2, "inner0": 3, "inner1": 4, "": 5}
    return sorted(by_region, key=lambda k: (rank.get(k, 6), k))


def _first_fit(tiles, rng, defs, block, align) -> int:
    """Addresses (relative to the region) for tiles; returns the region's size."""
    never = [t for t in tiles if t.name not in rng]
    live = sorted((t for t in tiles if t.name in rng), key=lambda t: (rng[t.name][0], -t.nbytes))
    active = []          # (end, addr, size, name)
    top = 0
    for t in live:
        start, end = rng[t.name]
        size = _align_up(t.nbytes, align)
        placed = None
        d = defs.get(t.name)
        dying = {a[3] for a in active if a[0] == start}
        if d is not None and d[0] == start:
            for src in d[1].tile_operands()[1:]:
                if src in dying and _inplace_ok(d[1], t.name, src, block):
                    s = next(a for a in active if a[3] == src)
                    if s[2] >= size:
                        placed = s[1]
                        active.remove(s)
                        break
        active = [a for a in active if a[0] >= start]
        if placed is None:
            placed = _lowest_gap(active, size)
        t.addr = placed
        active.append((end, placed, size, t.name))
        top = max(top, placed + size)
    for t in never:
        t.addr = top
        top += _align_up(t.nbytes, align)
    return top


def _lowest_gap(active, size) -> int:
    addr = 0
    for _, a, s, _n in sorted(active, key=lambda x: x[1]):
        if addr + size <= a:
            return addr
        addr = max(addr, a + s)
    return addr


# ---------------------------------------------------------------------------------- strategy: pools
def _plan_pools(block, tiles, machine, cap, tile_loc, max_pool) -> int:
    order, _ = positions(block)
    rng, defs = live_ranges(block), _definitions(order)
    cls = _classes(order)
    err = None
    for pool in [p for p in POOL_SIZES if p <= max_pool] or [POOL_SIZES[-1]]:
        try:
            return _plan_space(block, tiles, rng, defs, machine.alignment, cap, tile_loc, pool, cls)
        except TilingError as e:
            err = e
    return _pools_fallback(block, tiles, machine, cap, rng, defs, err)


def _pools_fallback(block, tiles, machine, cap, rng, defs, err) -> int:
    """Pools waste bytes between sizes: pack by liveness alone (first fit) before giving up."""
    top = _first_fit(tiles, rng, defs, block, machine.alignment)
    if top > cap:
        raise err
    return top


def _classes(order) -> dict:
    """tile -> (filled by a GM load, drained by a GM store): tiles of different classes get different
    buffers, so a load never waits for a store that itself waits for the other core (a handoff)."""
    loaded, stored = set(), set()
    for ins in order:
        ops = ins.tile_operands()
        if ins.spec.kind == "load" and ops:
            loaded.add(ops[0])
        elif ins.spec.kind == "store" and ops:
            stored.add(ops[0])
    return {n: (n in loaded, n in stored) for ins in order for n in ins.tile_operands()}


def _plan_space(block, tiles, rng, defs, align, cap, tile_loc, min_pool: int, cls: dict) -> int:
    """Tiles of one size share a pool of buffers: a new tile takes the pool's buffer that was freed
    longest ago, and the pool grows while it has fewer than ``min_pool`` buffers or all are in use."""
    live = sorted((t for t in tiles if t.name in rng), key=lambda t: (rng[t.name][0], -t.nbytes))
    pools: dict = {}     # (size, class) -> list of buffers [addr, size, freed_at or None while in use]
    owner: dict = {}     # tile name -> buffer
    active = []          # (end, name)
    top = 0
    for t in live:
        start, end = rng[t.name]
        size = _align_up(t.nbytes, align)
        dying = {n for e, n in active if e == start}
        for e, n in [a for a in active if a[0] < start]:
            active.remove((e, n))
            owner[n][2] = e
        buf = None
        d = defs.get(t.name)
        if d is not None and d[0] == start:                 # in place over a source read for the last time
            for src in d[1].tile_operands()[1:]:
                if src in dying and _inplace_ok(d[1], t.name, src, block) and owner[src][1] >= size:
                    buf = owner[src]
                    active.remove(next(a for a in active if a[1] == src))
                    break
        if buf is None:
            pool = pools.setdefault((size, cls.get(t.name)), [])
            free = [b for b in pool if b[2] is not None]
            if (len(pool) < min_pool or not free) and top + size <= cap:
                buf = [top, size, None]
                top += size
                pool.append(buf)
            elif free:
                buf = min(free, key=lambda b: (b[2], b[0]))
            else:
                bigger = [b for p in pools.values() for b in p if b[2] is not None and b[1] >= size]
                if not bigger:
                    _over(block, tiles, rng, start, t, cap, align, tile_loc)
                buf = min(bigger, key=lambda b: (b[2], b[0]))
        buf[2] = None
        owner[t.name] = buf
        t.addr = buf[0]
        active.append((end, t.name))
    for t in tiles:
        if t.name not in rng:
            t.addr = 0
    return top


def _over(block, tiles, rng, pos, t, cap, align, tile_loc):
    space = t.space
    live = [x for x in tiles if x.name in rng and rng[x.name][0] <= pos <= rng[x.name][1]]
    need = sum(_align_up(x.nbytes, align) for x in live)
    big = sorted(live, key=lambda x: -x.nbytes)[:4]
    listing = ", ".join(f"{x.name} {x.dtype}[{x.shape[0]}, {x.shape[1]}] ({x.nbytes} B"
                        f"{', ' + str(tile_loc[x.name]) if tile_loc.get(x.name) else ''})" for x in big)
    loc = next((tile_loc[x.name] for x in [t] + big if tile_loc.get(x.name)), block.loc)
    raise TilingError(f"the {space} tiles of the {block.core} program need {need} bytes at once, over the "
                      f"{cap}-byte {space}; largest: {listing}", loc=loc,
                      hint="pick smaller tile shapes (loop tiles are unrolled into 2-3 copies)")


# ---------------------------------------------------------------------------------- user addresses
_READS_DST = {"TMATMUL_ACC"}


def _accesses(ins: Instr, buffer_of: dict):
    """(buffers read, buffers written) by one instruction."""
    tiles = ins.tile_operands()
    if ins.spec.kind == "store" or not tiles or not isinstance(ins.operands[0], str):
        return {buffer_of[t] for t in tiles}, set()
    reads = {buffer_of[t] for t in tiles[1:]}
    if ins.op in _READS_DST:
        reads.add(buffer_of[tiles[0]])
    return reads, {buffer_of[tiles[0]]}


def _check_live_overlaps(block, tiles, tile_loc, groups, names) -> None:
    buffer_of = {t.name: t.buffer_name for t in tiles}
    bufs = {}
    for t in tiles:
        bufs.setdefault(t.buffer_name, t)
    overlap: dict = {}
    items = sorted(bufs.values(), key=lambda t: (str(t.space), t.addr))
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if a.space != b.space or b.addr >= a.addr + a.nbytes:
                continue
            ga, gb = groups.get(a.buffer_name), groups.get(b.buffer_name)
            if ga is not None and ga == gb:
                continue
            overlap.setdefault(a.buffer_name, set()).add(b.buffer_name)
            overlap.setdefault(b.buffer_name, set()).add(a.buffer_name)
    if not overlap:
        return

    def on_instr(s, live_after, reads, writes):
        for w in writes:
            for o in overlap.get(w, ()):
                if o in live_after and o != w:
                    _overlap_error(bufs[w], bufs[o], s, tile_loc, names)
    _backward_liveness(block, buffer_of, on_instr)


def _backward_liveness(block, buffer_of: dict, on_instr) -> None:
    """Walk the body backwards with the set of buffers live (to be read again): ``on_instr(instr,
    live after it, buffers it reads, buffers it writes)`` for each instruction, loop bodies visited until
    the live set at their entry is stable (an instruction in a loop is reported more than once)."""
    def visit(stmts, live_out: set) -> set:
        live = set(live_out)
        for s in reversed(stmts):
            if isinstance(s, Instr):
                reads, writes = _accesses(s, buffer_of)
                on_instr(s, live, reads, writes)
                live = (live - writes) | reads
            elif isinstance(s, For):
                entry = set(live)
                for _ in range(3):
                    new = visit(s.body, entry | live)
                    if new <= entry:
                        break
                    entry |= new
                live = live | entry
            elif isinstance(s, If):
                live = visit(s.then_body, live) | visit(s.else_body, live)
        return live
    visit(block.body, set())


def _live_across(block, tiles) -> dict:
    """id(instruction) -> names of the ``tiles`` whose bytes must survive it: those it touches, those
    still to be read after it (backward dataflow) and those whose live range (ir.liveness) covers it;
    the union keeps both this pass's and the Block IR verifier's rule."""
    buffer_of = {t.name: t.buffer_name for t in tiles}
    members: dict = {}
    for t in tiles:
        members.setdefault(t.buffer_name, []).append(t.name)
    across: dict = {}

    def on_instr(s, live_after, reads, writes):
        across.setdefault(id(s), set()).update(live_after, reads, writes)
    _backward_liveness(block, buffer_of, on_instr)
    out = {k: {n for b in v for n in members[b]} for k, v in across.items()}
    order, _ = positions(block)
    rng = live_ranges(block)
    spans = [(n, lo, hi) for n, (lo, hi) in rng.items() if n in buffer_of]
    for pos, ins in enumerate(order):
        out.setdefault(id(ins), set()).update(n for n, lo, hi in spans if lo <= pos <= hi)
    return out


def _overlap_error(written, other, ins, tile_loc, names):
    def line(t):
        loc = tile_loc.get(t.buffer_name)
        return (loc.line, loc.col or 0) if loc else (0, 0)
    first, second = sorted((written, other), key=line)
    loc = tile_loc.get(second.buffer_name)
    first_line = line(first)[0] or "?"

    def where(t):
        return f"{t.space} {t.addr:#x}..{t.addr + t.nbytes:#x}"

    def name(t):
        return names.get(t.buffer_name, t.buffer_name)
    err = MemoryPlanError(
        f"tile '{name(second)}' ({where(second)}) overlaps tile '{name(first)}' ({where(first)}, line "
        f"{first_line}) while both are live: {ins.op} at line {ins.loc.line if ins.loc else '?'} writes "
        f"'{name(written)}' before '{name(other)}' is read again", loc=loc,
        hint="give the tiles disjoint addresses, or reuse the memory only after the other tile's last read")
    err.tiles = (first.buffer_name, second.buffer_name)
    raise err
