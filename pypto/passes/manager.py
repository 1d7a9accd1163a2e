"""The pass manager: runs named passes in order, times them, verifies between them (tests, or
``PYPTO_VERIFY=1``) and dumps every stage when asked (``dump=<dir>`` or ``PYPTO_DUMP=<dir>``):
TensorGraph and TileGraph as text + JSON + DOT, Block IR text per kernel, the ExecutionGraph."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..sanitize import path_component


@dataclass
class PassRecord:
    name: str
    seconds: float


@dataclass
class PassManager:
    name: str
    dump: str | None = None
    verify: bool = False
    records: list = field(default_factory=list)

    def __post_init__(self):
        root = self.dump or os.environ.get("PYPTO_DUMP")
        self.dir = Path(root) / path_component(self.name) if root else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.verify = self.verify or os.environ.get("PYPTO_VERIFY", "") not in ("", "0")
        self._k = 0

    def run(self, name: str, fn, ir, *args, verifier=None, **kwargs):
        t0 = time.perf_counter()
        out = fn(ir, *args, **kwargs)
        self.records.append(PassRecord(name, time.perf_counter() - t0))
        if self.verify and verifier is not None:
            verifier(out)
        self.write(name, out)
        return out

    def write(self, stage: str, ir) -> None:
        if self.dir is None:
            return
        self._k += 1
        base = self.dir / f"{self._k:02d}_{stage}"
        base.with_suffix(".txt").write_text(str(ir) + "\n")
        to_json = getattr(ir, "to_json", None)
        if to_json is not None:
            base.with_suffix(".json").write_text(json.dumps(to_json(), indent=1, default=str))
        to_dot = getattr(ir, "to_dot", None)
        if to_dot is not None:
            base.with_suffix(".dot").write_text(to_dot() + "\n")
        kernels = getattr(getattr(ir, "graph", ir), "kernels", None)
        if isinstance(kernels, dict) and stage == "final":
            kdir = self.dir / "kernels"
            kdir.mkdir(exist_ok=True)
            for kname, k in kernels.items():
                (kdir / f"{path_component(kname)}.pto").write_text(str(k) + "\n")

    def timings(self) -> dict:
        return {r.name: r.seconds for r in self.records}
