"""MachineSpec: what the target machine has, as data (see the .toml files beside this module)."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
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
    cross_core: dict          # cube <-> vector flags of a cluster: flags, max_pending_sets
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

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e3)


def load_machine(name: str) -> MachineSpec:
    path = _DIR / f"{name}.toml"
    if not path.exists():
        known = sorted(p.stem for p in _DIR.glob("*.toml"))
        raise PyptoError(f"unknown machine '{name}'; known machines: {', '.join(known)}")
    data = tomllib.loads(path.read_text())
    return MachineSpec(name=data["name"], description=data["description"], clock_ghz=data["clock_ghz"],
                       alignment=data["alignment"], cores=data["cores"], capacity=data["capacity"],
                       cube=data["cube"], vector=data["vector"], memory=data["memory"],
                       dispatch=data["dispatch"], cross_core=data["cross_core"], raw=data)


_current = {"machine": None}


def set_machine(name_or_spec) -> MachineSpec:
    spec = name_or_spec if isinstance(name_or_spec, MachineSpec) else load_machine(name_or_spec)
    _current["machine"] = spec
    return spec


def get_machine() -> MachineSpec:
    if _current["machine"] is None:
        _current["machine"] = load_machine("a2a3")
    return _current["machine"]
