"""The generated C++ of a lowered program in its dump folder (``ir/dump.py``, stage ``cpp``): exactly the
sources the cpu backend compiles — ``pypto.codegen.generate_module`` over the program's kernels for its
machine — whichever backend runs it. A program the code generator refuses (a kernel only the simulator
runs) gets ``NN_cpp.not_written.txt`` with the reason instead: a dump never stops a run."""
from __future__ import annotations

from ..codegen import generate_module
from ..machine import MachineSpec, get_machine, load_machine


def write_cpp(dump, program, machine=None) -> None:
    spec = machine if isinstance(machine, MachineSpec) else (load_machine(machine) if machine else get_machine())
    try:
        module = generate_module(program.kernels, spec)
    except Exception as e:       # noqa: BLE001  the dump says why; the run goes on
        dump.write_failure("cpp", f"the C++ of this program was not generated: {type(e).__name__}: {e}")
        return
    module.write(dump.folder("cpp"))
