"""MachineSpec: what the target machine has, as data (see the .toml files beside this module).

Contract: one ``<name>.toml`` a machine; every figure in it carries a comment naming its public source
(numbered references ``[n]`` are listed at the top of the file; ``figure_sources`` reads them back, and
tests/machine checks that none is missing). ``load_machine`` takes a machine name or a path to a .toml
file of the same layout (an edited copy, for calibration experiments).
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import PyptoError

_DIR = Path(__file__).parent


@dataclass(frozen=True)
class MachineSpec:
    name: str
    description: str
    clock_ghz: float
    alignment: int
    cores: dict
    capacity: dict            # memory space name -> bytes per core
    cube: dict                # input dtype name -> FLOP / cycle / AIC
    vector: dict
    memory: dict
    dispatch: dict
    cross_core: dict          # cube <-> vector flags of a cluster: flags, max_pending_sets (+ the on-chip path)
    launch: dict = field(default_factory=dict)   # a whole launch: start_cycles, drain_cycles
    raw: dict = field(repr=False, default_factory=dict)

    @property
    def num_aic(self) -> int:
        return self.cores["aic"]

    @property
    def num_aiv(self) -> int:
        return self.cores["aiv"]

    @property
    def hbm_bytes_per_cycle(self) -> float:
        return self.memory["hbm_bytes_per_s"] / (self.clock_ghz * 1e9)

    def cube_flops_per_cycle(self, dtype_name: str) -> int:
        return self.cube.get(dtype_name, self.cube["float32"])

    def peak_cube_flops(self, dtype_name: str = "float16") -> float:
        return self.cube_flops_per_cycle(dtype_name) * self.num_aic * self.clock_ghz * 1e9

    def peak_vector_bytes(self) -> float:
        return self.vector["bytes_per_cycle"] * self.num_aiv * self.clock_ghz * 1e9

    @property
    def cross_core_flags(self) -> int:
        """Cross-core flag ids of a cluster (0 .. cross_core_flags - 1)."""
        return self.cross_core["flags"]

    @property
    def cross_core_max_pending(self) -> int:
        """Sets one cross-core flag's counter holds before a wait must take one."""
        return self.cross_core["max_pending_sets"]

    @property
    def on_chip_handoff(self) -> bool:
        """Cube and vector cores of a cluster exchange tiles on chip (TPUSH / TPOP into the consumer's
        buffer, [cross_core] on_chip; a5), not through a GM workspace (a2a3)."""
        return bool(self.cross_core.get("on_chip", False))

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e3)

    def without_launch(self) -> "MachineSpec":
        """The same machine with no launch start or drain ([launch]): the cores' own time, for comparing
        how work scales without the fixed cost of a launch."""
        return replace(self, launch={}, raw={**self.raw, "launch": {}})


def _path(name: str) -> Path:
    path = Path(name) if str(name).endswith(".toml") else _DIR / f"{name}.toml"
    if not path.exists():
        known = sorted(p.stem for p in _DIR.glob("*.toml"))
        raise PyptoError(f"unknown machine '{name}'; known machines: {', '.join(known)} (or a path to a .toml file)")
    return path


def load_machine(name: str) -> MachineSpec:
    """The machine ``name`` (a file of this folder) or the .toml file at path ``name``."""
    path = _path(name)
    try:
        data = tomllib.loads(path.read_text())
        return MachineSpec(name=data["name"], description=data["description"], clock_ghz=data["clock_ghz"],
                           alignment=data["alignment"], cores=data["cores"], capacity=data["capacity"],
                           cube=data["cube"], vector=data["vector"], memory=data["memory"],
                           dispatch=data["dispatch"], cross_core=data["cross_core"],
                           launch=data.get("launch", {}), raw=data)
    except (tomllib.TOMLDecodeError, KeyError) as e:
        raise PyptoError(f"machine file {path}: {type(e).__name__}: {e}") from None


_REF = re.compile(r"^#\s+\[(\d+)\]\s*(.*)$")
_TABLE = re.compile(r"^\[(\w+)\]")
_FIGURE = re.compile(r"^(\w+)\s*=\s*([^#]+?)\s*(?:#\s*(.*))?$")


def references(name: str) -> dict:
    """The numbered references ``[n]`` at the top of a machine file: {n: text}."""
    refs, last = {}, None
    for line in _path(name).read_text().splitlines():
        m = _REF.match(line)
        if m:
            last = int(m.group(1))
            refs[last] = m.group(2)
        elif last is not None and line.startswith("#      "):
            refs[last] += " " + line[1:].strip()
        elif not line.startswith("#"):
            last = None
    return refs


def figure_sources(name: str) -> list:
    """Every figure of a machine file as (``table.key``, value text, its comment — '' where it has none)."""
    out, table = [], ""
    for line in _path(name).read_text().splitlines():
        t = _TABLE.match(line)
        if t:
            table = t.group(1) + "."
            continue
        m = _FIGURE.match(line)
        if m and m.group(1) not in ("name", "description"):
            out.append((table + m.group(1), m.group(2), (m.group(3) or "").strip()))
    return out


_current = {"machine": None}


def set_machine(name_or_spec) -> MachineSpec:
    spec = name_or_spec if isinstance(name_or_spec, MachineSpec) else load_machine(name_or_spec)
    _current["machine"] = spec
    return spec


def get_machine() -> MachineSpec:
    if _current["machine"] is None:
        _current["machine"] = load_machine("a2a3")
    return _current["machine"]


def machine_spec(machine=None) -> MachineSpec:
    """The MachineSpec a ``machine=`` argument names: a MachineSpec as it is, a name or .toml path loaded
    (load_machine), None the current machine (get_machine). Every front end and backend resolves its
    ``machine`` argument here."""
    if machine is None:
        return get_machine()
    if isinstance(machine, MachineSpec):
        return machine
    if isinstance(machine, (str, os.PathLike)):
        return load_machine(str(machine))
    raise PyptoError(f"machine= is a machine name (e.g. 'a2a3'), a path to a .toml file or a MachineSpec, "
                     f"found {type(machine).__name__}")
