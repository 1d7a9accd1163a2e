"""Block IR verifier: the static rules every Block must keep before a backend sees it.

* tiles: unique names, static 2-D shapes, a memory space the core has, a planned address that is
  aligned and inside the space's capacity, static valid extents within the shape;
* instructions: known op, operand form of the ISA table, declared tiles and GM params, GM offsets
  of the tensor's rank, bound to the pipe the data path implies, matmul operands in L0C/L0A/L0B;
* memory: no two tiles that are live at the same time share bytes (except an instruction writing
  in place over a source it reads last, at the same address);
* synchronisation: event ids within the machine's limit; along every path each set_flag is
  consumed by exactly one wait_flag — no wait without a pending set (deadlock), no second set
  while one is pending, a loop body leaves the flags as it found them, both branches of an if
  agree, nothing pending at the end.
"""
from __future__ import annotations

from ..errors import CompileError
from .block import Block, CoreType, For, GMRegion, If, Instr, Kernel, SetFlag, WaitFlag
from .isa import ISA, MemSpace, pipe_of
from .liveness import live_ranges, positions

SPACES = {CoreType.AIV: {MemSpace.UB}, CoreType.AIC: {MemSpace.L1, MemSpace.L0A, MemSpace.L0B, MemSpace.L0C}}


def _err(block, msg, loc=None):
    return CompileError(f"block {block.name}: {msg}", loc=loc or block.loc)


def verify_block(block: Block, machine) -> None:
    names = [t.name for t in block.tiles]
    if len(set(names)) != len(names):
        raise _err(block, "tile names repeat")
    for t in block.tiles:
        if len(t.shape) != 2 or not all(isinstance(d, int) and d > 0 for d in t.shape):
            raise _err(block, f"tile {t.name} shape {t.shape} is not two positive ints")
        if t.space not in SPACES[block.core]:
            raise _err(block, f"tile {t.name} is in {t.space}, which a {block.core} core does not have")
        if t.addr is None:
            raise _err(block, f"tile {t.name} has no address")
        cap = machine.capacity[t.space.capacity_key]
        if t.addr % machine.alignment or t.addr < 0 or t.addr + t.nbytes > cap:
            raise _err(block, f"tile {t.name} at 0x{t.addr:x} ({t.nbytes} bytes) is misaligned or past the "
                              f"{cap}-byte {t.space}")
        for v, s in zip(t.valid_shape, t.shape):
            if isinstance(v, int) and not 0 <= v <= s:
                raise _err(block, f"tile {t.name} valid shape {t.valid_shape} exceeds its shape {t.shape}")
    gm = {g.name: g for g in block.gm_params}
    for ins in block.instructions():
        _check_instr(block, ins, gm)
    _check_overlaps(block)
    _check_flags(block, machine)


def _check_instr(block, ins: Instr, gm):
    spec = ISA.get(ins.op)
    if spec is None:
        raise _err(block, f"unknown instruction {ins.op}", ins.loc)
    form = spec.form.split(",")
    if len(form) != len(ins.operands):
        raise _err(block, f"{ins.op} takes ({spec.form}), found {len(ins.operands)} operands", ins.loc)
    spaces = []
    for f, o in zip(form, ins.operands):
        if f == "t":
            if not isinstance(o, str):
                raise _err(block, f"{ins.op}: expected a tile, found {o!r}", ins.loc)
            spaces.append(block.tile(o).space)
        elif f == "g":
            if not isinstance(o, GMRegion) or o.param not in gm:
                raise _err(block, f"{ins.op}: expected a region of a GM param, found {o!r}", ins.loc)
            if len(o.offsets) != len(gm[o.param].shape):
                raise _err(block, f"{ins.op}: {len(o.offsets)} offsets for the {len(gm[o.param].shape)}-d "
                                  f"param {o.param}", ins.loc)
        elif isinstance(o, (str, GMRegion)):
            raise _err(block, f"{ins.op}: expected a scalar, found {o!r}", ins.loc)
    if spec.kind == "load":
        want = pipe_of(ins.op, spaces[0], MemSpace.GM)
    elif spec.kind == "store":
        want = pipe_of(ins.op, MemSpace.GM, spaces[0])
    else:
        want = pipe_of(ins.op, spaces[0], spaces[1] if len(spaces) > 1 else None)
    if want != ins.pipe:
        raise _err(block, f"{ins.op} runs on {want}, bound to {ins.pipe}", ins.loc)
    if spec.kind == "matmul" and tuple(spaces) != (MemSpace.L0C, MemSpace.L0A, MemSpace.L0B):
        raise _err(block, f"{ins.op} needs l0c, l0a, l0b operands", ins.loc)


def _check_overlaps(block):
    rng = live_ranges(block)
    order, _ = positions(block)
    tiles = [t for t in block.tiles if t.name in rng]
    for i, a in enumerate(tiles):
        for b in tiles[i + 1:]:
            if a.space != b.space or not (a.addr < b.addr + b.nbytes and b.addr < a.addr + a.nbytes):
                continue
            (la, ha), (lb, hb) = rng[a.name], rng[b.name]
            if ha < lb or hb < la:
                continue
            # in place: one starts exactly where the other ends, at the same address, as operands of one
            # instruction (an instruction's scratch tile is never in place)
            if a.addr == b.addr and (ha == lb or hb == la):
                pos = lb if ha == lb else la
                ops = order[pos].tile_operands()
                if a.name in ops and b.name in ops:
                    continue
            raise _err(block, f"tiles {a.name} and {b.name} are live together and share {a.space} bytes")


def _check_flags(block, machine):
    limit = machine.memory.get("event_ids", 8)

    def walk(stmts, state):
        for s in stmts:
            if isinstance(s, (SetFlag, WaitFlag)):
                if not 0 <= s.event < limit:
                    raise _err(block, f"event id {s.event} outside 0..{limit - 1}", s.loc)
                key = (s.src, s.dst, s.event)
                if isinstance(s, SetFlag):
                    if state.get(key):
                        raise _err(block, f"set_flag {s.src}->{s.dst} ev{s.event} while an earlier set is pending")
                    state[key] = 1
                else:
                    if not state.get(key):
                        raise _err(block, f"wait_flag {s.src}->{s.dst} ev{s.event} with no pending set")
                    state[key] = 0
            elif isinstance(s, For):
                before = dict(state)
                walk(s.body, state)
                if {k: v for k, v in state.items() if v} != {k: v for k, v in before.items() if v}:
                    raise _err(block, "a loop body does not leave its flags as it found them", s.loc)
            elif isinstance(s, If):
                a, b = dict(state), dict(state)
                walk(s.then_body, a)
                walk(s.else_body, b)
                if {k: v for k, v in a.items() if v} != {k: v for k, v in b.items() if v}:
                    raise _err(block, "the branches of an if leave different flags pending", s.loc)
                state.clear()
                state.update(a)
        return state
    end = walk(block.body, {})
    pending = [k for k, v in end.items() if v]
    if pending:
        raise _err(block, f"flags set and never waited: {pending}")


def verify_kernel(kernel: Kernel, machine) -> None:
    cores = [b.core for b in kernel.blocks]
    if len(set(cores)) != len(cores):
        raise CompileError(f"kernel {kernel.name} has two blocks for one core type")
    for b in kernel.blocks:
        verify_block(b, machine)
