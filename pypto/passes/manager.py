"""The pass manager: runs named passes in order, times them, verifies between them (tests, or
``PYPTO_VERIFY=1``) and dumps every stage when asked (``dump=<dir>``, ``PYPTO_DUMP=<dir>``, or the
compilation's ``ir.dump.Dump``): TensorGraph and TileGraph as text + JSON + DOT, Block IR text, the
ExecutionGraph and each of its kernels' Block IR, numbered in the order the stages run and named by
their IR (ir/dump.py ``TENSOR_STAGES``)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..ir.dump import TENSOR_STAGES, Dump, dump_root


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
        if isinstance(self.dump, Dump):
            self.dumper = self.dump
        else:
            root = dump_root(self.dump)
            self.dumper = Dump.open(root, TENSOR_STAGES, self.name, "Tensor level") if root else None
        self.dir = self.dumper.dir if self.dumper is not None else None
        self.verify = self.verify or os.environ.get("PYPTO_VERIFY", "") not in ("", "0")

    def run(self, name: str, fn, ir, *args, verifier=None, **kwargs):
        t0 = time.perf_counter()
        out = fn(ir, *args, **kwargs)
        self.records.append(PassRecord(name, time.perf_counter() - t0))
        if self.verify and verifier is not None:
            verifier(out)
        self.write(name, out)
        return out

    def write(self, stage: str, ir) -> None:
        """Dump ``ir`` as stage ``stage`` (a stage the compilation's dump already holds is not written again:
        the front end writes the traced graph before lowering)."""
        if self.dumper is None or stage in self.dumper.written:
            return
        self.dumper.write(stage, ir)
        kernels = getattr(getattr(ir, "graph", ir), "kernels", None)
        if isinstance(kernels, dict) and stage == "final":
            self.dumper.write_kernels(stage, kernels)

    def timings(self) -> dict:
        return {r.name: r.seconds for r in self.records}
