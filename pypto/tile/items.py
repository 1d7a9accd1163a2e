"""One side's view of the traced program: per statement list, the items that side executes in order —
its ops, the handoffs it sends or receives (right after the handed-over tile is defined) and the loops
that hold any of those."""
from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Loop, Op, Value
from .placement import CUBE, VECTOR, Placement


@dataclass(eq=False)
class Item:
    kind: str                      # op | send | recv | loop | copyin
    op: Op | None = None
    loop: Loop | None = None
    value: Value | None = None     # send / recv: the handed-over tile
    channel: object = None
    body: list = field(default_factory=list)      # loop: the items of its body
    uses: set = field(default_factory=set)        # id(value) read
    defs: set = field(default_factory=set)        # id(value) written

    def __repr__(self) -> str:
        if self.kind == "op":
            return f"op {self.op!r}"
        if self.kind == "loop":
            return f"loop {self.loop.var}"
        return f"{self.kind} %{self.value.name} ch{self.channel.id}"


def _on(pl: Placement, op: Op, side: str) -> bool:
    s = pl.side.get(id(op))
    return s == side or (isinstance(s, set) and side in s)


def side_items(stmts, side: str, pl: Placement) -> list:
    out = []

    def handoff(v: Value):
        ch = pl.channels.get(id(v))
        if ch is None:
            return
        if ch.src == side:
            out.append(Item("send", value=v, channel=ch, uses={id(v)}))
        elif ch.dst == side:
            out.append(Item("recv", value=v, channel=ch, defs={id(v)}))

    for s in stmts:
        if isinstance(s, Loop):
            carries = [c for c in s.carried if _carry_side(pl, c) == side]
            body = []
            # handed-over carried tiles (read at iteration start) go first in the body
            for c in s.carried:
                ch = pl.channels.get(id(c.phi))
                if ch is not None and side in (ch.src, ch.dst):
                    kind = "send" if ch.src == side else "recv"
                    body.append(Item(kind, value=c.phi, channel=ch,
                                     uses={id(c.phi)} if kind == "send" else set(),
                                     defs={id(c.phi)} if kind == "recv" else set()))
            body += side_items(s.body, side, pl)
            if body or carries:
                it = Item("loop", loop=s, body=body)
                inner_defs = set().union(*(b.defs for b in _flat(body))) if body else set()
                inner_uses = set().union(*(b.uses for b in _flat(body))) if body else set()
                it.uses = (inner_uses - inner_defs) | {id(c.init) for c in carries}
                it.uses -= {id(c.phi) for c in carries}
                it.defs = {id(c.result) for c in carries}
                out.append(it)
            for c in s.carried:
                handoff(c.result)
            continue
        if _on(pl, s, side):
            uses = {id(a) for a in s.values()}
            defs = {id(s.out)} if s.out is not None else set()
            out.append(Item("op", op=s, uses=uses, defs=defs))
        if s.out is not None:
            handoff(s.out)
    return out


def _flat(items):
    for it in items:
        yield it
        if it.kind == "loop":
            yield from _flat(it.body)


def _carry_side(pl: Placement, c) -> str:
    return CUBE if id(c) in pl.cube_carries else VECTOR


def carry_side(pl: Placement, c) -> str:
    return _carry_side(pl, c)


def has_handoff(items) -> bool:
    return any(it.kind in ("send", "recv") for it in _flat(items))
