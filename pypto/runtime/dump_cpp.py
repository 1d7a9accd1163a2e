"""The generated C++ of compiled kernels in their dump folder (``ir/dump.py``, stage ``cpp``): exactly the
sources the cpu backend compiles — ``pypto.codegen.generate_module`` over the kernels for their machine —
whichever backend runs them; the one writer for the three levels. Kernels the code generator refuses (a kernel
only the simulator runs) get ``NN_cpp.not_written.txt`` with the reason instead: a dump never stops a run."""
from __future__ import annotations

from ..codegen import generate_module
from ..machine import machine_spec


def write_cpp(dump, kernels, machine=None) -> str | None:
    """Write the C++ of ``kernels`` (a list, or a dict name -> Kernel); the reason it was not written, or None."""
    spec = machine_spec(machine)
    try:
        module = generate_module(kernels, spec)
    except Exception as e:       # noqa: BLE001  the dump says why; the run goes on
        reason = f"{type(e).__name__}: {e}"
        dump.write_failure("cpp", f"the C++ of these kernels was not generated: {reason}")
        return reason
    module.write(dump.folder("cpp"))
    return None
