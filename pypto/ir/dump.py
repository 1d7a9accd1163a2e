"""Dump folders: where ``PYPTO_DUMP=<dir>`` (or a ``dump=<dir>`` option) writes the stages of a
compilation, and how their files are named and headed. The same scheme for the three front ends:

    <dir>/<function>/<signature>/NN_<ir>[_<stage>].<ext>

- one folder per compiled function (its name made a safe folder name) and, inside it, one per
  specialisation (its signature: arguments' dtypes and shapes, constants), so several functions and
  specialisations in one process never overwrite each other's files: a folder another compilation of
  this process already took gets ``-2``, ``-3`` ... after its name;
- ``NN`` numbers the stages in the order they run; the name says which IR the file holds
  (``tensor_graph``, ``tile_program``, ``tile_graph``, ``block_ir``, ``execution_graph``, ``cpp``);
- every text file but JSON starts with a one-line header (a ``#`` comment; ``//`` in DOT) naming the
  stage, the IR, the function (the user's file:line) and the signature; JSON files hold the IR alone;
- ``NN_cpp/`` holds the generated C++ byte for byte as the cpu backend builds it (written by
  ``pypto.codegen.GeneratedModule.write``; its files carry their own comment header).

The stage tables (``TENSOR_STAGES`` ...) are the one list of file names; docs/architecture.md shows them.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from ..dtypes import SHORT_NAMES
from ..sanitize import path_component

ENV = "PYPTO_DUMP"

# stage -> (IR, file stem); numbers come from the order the stages are written in
TENSOR_STAGES = {
    "aten": ("ATen FX graph of a torch.compile partition", "aten_graph"),
    "traced": ("TensorGraph", "tensor_graph_traced"),
    "decompose": ("TensorGraph", "tensor_graph_decompose"),
    "canonicalize": ("TensorGraph", "tensor_graph_canonicalize"),
    "autocast": ("TensorGraph", "tensor_graph_autocast"),
    "tile": ("TileGraph", "tile_graph"),
    "blocks": ("Block IR", "block_ir"),
    "memory": ("Block IR with on-chip addresses", "block_ir_memory"),
    "sync": ("Block IR with set/wait flags", "block_ir_sync"),
    "final": ("ExecutionGraph", "execution_graph"),
    "cpp": ("PTO-ISA C++ (kernels and launchers)", "cpp"),
}
TILE_STAGES = {
    "traced": ("tile program (KernelProgram)", "tile_program"),
    "placed": ("TileGraph", "tile_graph"),
    "kernel": ("Block IR", "block_ir"),
    "cpp": ("PTO-ISA C++ (kernel and launchers)", "cpp"),
}
PRO_STAGES = {
    "pipeline": ("pipelined loops (Block IR marked for the software-pipelining pass)", "pipeline"),
    "kernel": ("Block IR", "block_ir"),
    "cpp": ("PTO-ISA C++ (kernel and launchers)", "cpp"),
    "build": ("build notes (signature, synchronisation, event ids)", "build"),
}

_claimed: set = set()           # folders a compilation of this process writes
_claimed_lock = threading.Lock()


def dump_root(option=None) -> Path | None:
    """The dump directory: the ``dump=`` option, else PYPTO_DUMP, else None (no dump). ``False``: no
    dump, whatever PYPTO_DUMP says (a caller that already decided, e.g. torch.compile's probes)."""
    if option is False:
        return None
    root = option or os.environ.get(ENV)
    return Path(root) if root else None


def signature_name(entries) -> str:
    """A readable folder name for a specialisation. ``entries``: (name, dtype name, dims) for each
    tensor argument (dims: ints or size names; None for a dynamic dim) and (name, value) for each
    constant, e.g. ``x-f16-dynx256_w-f16-256_BR-8`` (a name over 64 characters is cut and hashed by
    ``path_component``)."""
    parts = []
    for e in entries:
        if len(e) == 3:
            name, dtype, dims = e
            shape = "x".join("dyn" if d is None else str(d) for d in dims) or "scalar"
            parts.append(f"{name}-{SHORT_NAMES.get(dtype, dtype)}-{shape}")
        else:
            parts.append(f"{e[0]}-{e[1]}")
    return "_".join(parts) or "no_arguments"


class Dump:
    """The dump folder of one compilation; ``write`` numbers its stages in the order they come."""

    def __init__(self, folder: Path, stages: dict, function: str, level: str, loc=None, signature: str = ""):
        self.dir = Path(folder)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stages, self.function, self.level, self.loc, self.signature = stages, function, level, loc, signature
        self.written: dict = {}          # stage -> number (one compilation writes its dump, in order)

    @classmethod
    def open(cls, root, stages: dict, function: str, level: str, loc=None, signature: str = "") -> "Dump":
        """A fresh folder ``<root>/<function>/<signature>`` (``<root>/<function>`` without a signature;
        ``-2``, ``-3`` ... after its name when a compilation of this process took it)."""
        if signature:
            base, name = Path(root) / path_component(function), path_component(signature)
        else:
            base, name = Path(root), path_component(function)
        with _claimed_lock:
            folder, k = base / name, 1
            while str(folder.resolve()) in _claimed:
                k += 1
                folder = base / f"{name}-{k}"
            _claimed.add(str(folder.resolve()))
        return cls(folder, stages, function, level, loc, signature)

    def header(self, number: int, stage: str, comment: str = "#", ir: str | None = None) -> str:
        ir = ir or self.stages.get(stage, (stage, stage))[0]
        where = f" ({self.loc.full()})" if self.loc is not None and hasattr(self.loc, "full") else ""
        sig = f" | signature {self.signature}" if self.signature else ""
        return (f"{comment} pypto dump | stage {number:02d} {stage} | {ir} | {self.level} {self.function}{where}"
                f"{sig}")

    def _number(self, stage: str) -> int:
        if stage not in self.written:
            self.written[stage] = len(self.written) + 1
        return self.written[stage]

    def stem(self, stage: str) -> str:
        return f"{self._number(stage):02d}_{self.stages.get(stage, (stage, stage))[1]}"

    def write(self, stage: str, ir=None, *, text: str | None = None, ext: str = "txt") -> Path:
        """Stage ``stage``: ``text`` (or str(ir)) as ``NN_<stem>.<ext>`` with its header, and the IR's
        JSON and DOT beside it when it has them (``to_json`` / ``to_dot``). Returns the text file."""
        stem = self.stem(stage)
        number = self.written[stage]
        body = str(ir) if text is None else text
        path = self.dir / f"{stem}.{ext}"
        path.write_text(self.header(number, stage) + "\n" + body.rstrip("\n") + "\n")
        to_json = getattr(ir, "to_json", None)
        if to_json is not None:
            (self.dir / f"{stem}.json").write_text(json.dumps(to_json(), indent=1, default=str))
        to_dot = getattr(ir, "to_dot", None)
        if to_dot is not None:
            (self.dir / f"{stem}.dot").write_text(self.header(number, stage, "//") + "\n" + to_dot() + "\n")
        return path

    def write_kernels(self, stage: str, kernels: dict) -> Path:
        """Each kernel's Block IR as ``NN_<stem>_kernels/<kernel>.pto`` (beside the stage's own file)."""
        folder = self.dir / f"{self.stem(stage)}_kernels"
        folder.mkdir(exist_ok=True)
        number = self.written[stage]
        for name, k in kernels.items():
            (folder / f"{path_component(name)}.pto").write_text(
                self.header(number, stage, ir=f"Block IR of kernel {name}") + "\n" + str(k).rstrip("\n") + "\n")
        return folder

    def folder(self, stage: str) -> Path:
        """The folder ``NN_<stem>/`` of a stage that is several files (the C++: ``GeneratedModule.write``)."""
        folder = self.dir / self.stem(stage)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write_file(self, stage: str, name: str, text: str) -> Path:
        """``NN_<stem>/<name>``: a file that keeps its own name (a Python module), after a ``#`` header."""
        path = self.folder(stage) / name
        path.write_text(self.header(self.written[stage], stage) + "\n" + text)
        return path

    def write_failure(self, stage: str, why: str) -> Path:
        """A stage that could not be produced: ``NN_<stem>.not_written.txt`` says why."""
        path = self.dir / f"{self.stem(stage)}.not_written.txt"
        path.write_text(self.header(self.written[stage], stage) + "\n" + why.rstrip("\n") + "\n")
        return path


def open_tensor_dump(graph, option=None, loc=None, constants=(), level: str = "Tensor level") -> Dump | None:
    """The dump folder of compiling the TensorGraph ``graph`` (``option``: the ``dump=`` folder, else
    PYPTO_DUMP; None without), named after the graph, its inputs and ``constants`` ((name, value) of
    the non-tensor arguments). ``option`` may already be the compilation's Dump."""
    if isinstance(option, Dump):
        return option
    root = dump_root(option)
    if root is None:
        return None
    entries = []
    for nid in graph.inputs:
        info = graph.info(nid)
        entries.append((info.name, info.dtype.name, [d if isinstance(d, int) else None for d in info.shape]))
    return Dump.open(root, TENSOR_STAGES, graph.name, level, loc, signature_name(entries + list(constants)))
