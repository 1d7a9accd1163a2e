"""Builds one section's Block IR: tile declarations (one per slot and valid shape) and nested bodies."""
from __future__ import annotations

import re

from pypto.ir.block import CoreType, TileDecl

from .values import TileValue


def c_identifier(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return name if name and not name[0].isdigit() else f"t_{name}"


class SectionBuilder:
    """The program of one core type being parsed: declarations plus a stack of open statement lists."""

    def __init__(self, core: CoreType, kernel_name: str):
        self.core = core
        self.name = f"{kernel_name}_{core.value.lower()}"
        self.tiles: dict[str, TileDecl] = {}
        self.slot_of: dict[str, object] = {}          # decl name -> Slot
        self._decl_names: dict = {}                   # (slot uid, valid key) -> decl name
        self._buffer_of: dict = {}                    # slot uid -> the name of its first declaration
        self.body: list = []
        self.stack: list[list] = [self.body]
        self.used = False

    # ------------------------------------------------------------------ statements
    @property
    def current(self) -> list:
        return self.stack[-1]

    def emit(self, stmt) -> None:
        self.used = True
        self.current.append(stmt)

    def push(self) -> list:
        lst: list = []
        self.stack.append(lst)
        return lst

    def pop(self) -> list:
        return self.stack.pop()

    # ------------------------------------------------------------------ declarations
    def decl(self, tile: TileValue) -> str:
        """The name of the TileDecl for this slot seen with this valid shape (created on first use)."""
        slot = tile.slot
        valid = tile.valid
        if valid is not None and tuple(valid) == tuple(slot.ttype.shape):
            valid = None
        key = (slot.uid, None if valid is None else tuple(str(v) for v in valid))
        name = self._decl_names.get(key)
        if name is not None:
            return name
        base = c_identifier(slot.name)
        name = base if key[1] is None and base not in self.tiles else self._fresh(base + "_v")
        t = slot.ttype
        buffer = self._buffer_of.setdefault(slot.uid, name)        # every declaration of a slot is one buffer
        self.tiles[name] = TileDecl(name, t.target_memory.ir_space, t.dtype, t.shape, slot.addr,
                                    tuple(valid) if valid is not None else t.valid_shape, t.layout, buffer)
        self.slot_of[name] = slot
        self._decl_names[key] = name
        return name

    def forget(self, name: str) -> None:
        """Drop the declaration ``name`` (a pipelined loop's slot placeholder, once the pass replaced it)."""
        self.tiles.pop(name, None)
        self.slot_of.pop(name, None)
        self._decl_names = {k: v for k, v in self._decl_names.items() if v != name}
        self._buffer_of = {k: v for k, v in self._buffer_of.items() if v != name}

    def _fresh(self, base: str) -> str:
        i = 1
        while f"{base}{i}" in self.tiles:
            i += 1
        return f"{base}{i}"

    def snapshot(self):
        return (dict(self.tiles), dict(self.slot_of), dict(self._decl_names), self.used, dict(self._buffer_of))

    def restore(self, snap) -> None:
        self.tiles, self.slot_of, self._decl_names, self.used = (dict(snap[0]), dict(snap[1]), dict(snap[2]),
                                                                 snap[3])
        self._buffer_of = dict(snap[4])
