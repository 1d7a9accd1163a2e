"""TilingKey: compile-time fields with allowed values; each combination is compiled as its own kernel.

    key = pl.TilingKey(TILE_N=(64, 128, 256), CAUSAL=(False, True))   # first value = default
    @pl.jit(tiling_key=key)
    def kernel(...):
        k = pl.get_tiling_key()
        tile = pl.TileType([64, k.TILE_N], ...)       # folded to a constant in this variant
    kernel[None, n, {"TILE_N": 128}](...)
"""
from __future__ import annotations

import itertools

from .errors import LaunchError


class TilingKeyValues:
    """One combination: field values as attributes (and items)."""

    def __init__(self, values: dict):
        self._values = dict(values)
        for k, v in values.items():
            setattr(self, k, v)

    def __getitem__(self, k):
        return self._values[k]

    def items(self):
        return self._values.items()

    def suffix(self) -> str:
        return "_" + "_".join(f"{k}{_ident(v)}" for k, v in self._values.items())

    def __repr__(self) -> str:
        return "TilingKey(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"


def _ident(v) -> str:
    return str(v).replace("-", "m").replace(".", "p") if not isinstance(v, bool) else str(int(v))


class TilingKey:
    def __init__(self, **fields):
        if not fields:
            raise LaunchError("a TilingKey has at least one field")
        self.fields = {}
        for name, allowed in fields.items():
            allowed = tuple(allowed) if isinstance(allowed, (list, tuple, range)) else (allowed,)
            if not allowed:
                raise LaunchError(f"TilingKey field {name} has no allowed values")
            self.fields[name] = allowed

    def resolve(self, given: dict) -> TilingKeyValues:
        unknown = set(given) - set(self.fields)
        if unknown:
            raise LaunchError(f"unknown TilingKey field(s) {', '.join(sorted(unknown))}; fields: "
                              + ", ".join(self.fields))
        values = {}
        for name, allowed in self.fields.items():
            v = given.get(name, allowed[0])
            if v not in allowed:
                raise LaunchError(f"TilingKey {name}={v!r} is not one of the allowed values {list(allowed)}")
            values[name] = v
        return TilingKeyValues(values)

    def combinations(self):
        names = list(self.fields)
        for combo in itertools.product(*self.fields.values()):
            yield TilingKeyValues(dict(zip(names, combo)))

    def __repr__(self) -> str:
        return "TilingKey(" + ", ".join(f"{k}={list(v)}" for k, v in self.fields.items()) + ")"
