"""The ``npu`` backend: the same generated PTO-ISA C++ built by CANN's bisheng against the public
pto-isa headers and launched through torch_npu on an Ascend NPU.

Importing this module never needs CANN or torch_npu; ``run`` / ``run_kernel`` check for them and
raise BackendUnavailableError naming what is missing. Nothing here has run on a device yet: the
build and launch follow pto-isa's own torch_jit demos (bisheng -xcce --npu-arch=..., an
``extern "C"`` launcher calling ``kernel<<<block_dim, nullptr, stream>>>(...)``).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from ...errors import BackendUnavailableError, CompileError
from ..host import GMBuffers, Geometry, abi_scalars, bind_sizes, expand, one_task_graph
from ..report import Report, set_last_report

_ARCH = {"a2a3": "dav-2201", "a5": "dav-3510"}


def availability() -> tuple[bool, str]:
    """(available, reason): bisheng on PATH, PTO_ISA_ROOT (pto-isa headers) and torch_npu importable."""
    missing = []
    if shutil.which("bisheng") is None:
        missing.append("CANN's bisheng compiler (source the CANN set_env.sh)")
    root = os.environ.get("PTO_ISA_ROOT")
    if not root or not (Path(root) / "include" / "pto" / "pto-inst.hpp").exists():
        missing.append("the pto-isa headers (set PTO_ISA_ROOT to a checkout of hw-native-sys/pto-isa)")
    if importlib.util.find_spec("torch_npu") is None:
        missing.append("torch_npu (pip install torch_npu, or pypto[npu])")
    return (not missing), "; ".join(missing)


def _require():
    ok, reason = availability()
    if not ok:
        raise BackendUnavailableError(f"the npu backend is not available on this machine: missing {reason}",
                                      hint="use backend='sim' (default) or 'cpu'")


def build(kernels, machine=None) -> Path:
    """Compile the kernels and the NPU launcher with bisheng into a shared library (cached)."""
    _require()
    from ...codegen import generate_module
    from ...ir.isa import ISA
    from ...machine import machine_spec
    spec = machine_spec(machine)
    kernels = list(kernels.values()) if isinstance(kernels, dict) else list(kernels)
    for k in kernels:
        ext = sorted({i.op for b in k.blocks for i in b.instructions() if ISA[i.op].ext})
        if ext:
            raise CompileError(f"kernel {k.name} uses {', '.join(ext)}, which pypto implements only for the "
                               f"cpu and sim backends so far", loc=k.loc)
    module = generate_module(kernels, spec)
    root = Path(os.environ["PTO_ISA_ROOT"])
    support = Path(__file__).resolve().parents[1] / "cpu" / "include"
    flags = ["-fPIC", "-shared", "-xcce", f"--npu-arch={_ARCH.get(spec.name, 'dav-2201')}", "-O2", "-std=c++17",
             f"-I{root / 'include'}", f"-I{support}"]
    key = hashlib.sha256(("\0".join(flags) + "".join(module.files[k] for k in sorted(module.files))).encode())
    out = Path(os.environ.get("PYPTO_CACHE_DIR", Path.home() / ".cache" / "pypto")) / "npu" / key.hexdigest()[:24]
    lib = out / "lib.so"
    if not lib.exists():
        module.write(out)
        proc = subprocess.run(["bisheng", *flags, "launcher_npu.cpp", "-o", "lib.so"], cwd=out,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"bisheng failed (sources in {out}):\n{proc.stderr[-4000:]}")
    return lib


def run(graph, args: dict, env: dict, *, machine=None, **ignored):
    """Run ``graph`` on the NPU through torch_npu: arguments are copied to the device, tasks run in
    control-program order on the current stream, outputs come back on the arguments' device.
    Same signature and results as the other backends. Untested: no device was available.
    The host side (sizes, buffers, task instances) is runtime/host's, as for sim and cpu."""
    _require()
    import torch
    import torch_npu  # noqa: F401  (registers the npu device)

    from ...codegen import generate_module
    from ...machine import machine_spec

    spec = machine_spec(machine)
    lib = ctypes.CDLL(str(build(graph.kernels, spec)))
    abis = generate_module(graph.kernels, spec).abis
    args = dict(args)
    env = bind_sizes(graph, args, env)
    host = GMBuffers(graph, args, env, poison=False)
    instances, _ = expand(graph, env, Geometry(host))
    device = {name: host.tensors[name].to("npu") for name, b in graph.buffers.items() if b.view_of is None}
    stream = torch.npu.current_stream()._as_parameter_
    for inst in instances:
        abi = abis[inst.task.kernel]
        ints, reals = abi_scalars(abi, inst)
        fn = getattr(lib, abi.npu_entry)
        fn.restype = None
        ptrs = [ctypes.c_void_p(_device_ptr(device, host, inst.task.gm_args[g.name], inst.loop_env))
                for g in abi.gm]
        fn(ctypes.c_uint32(inst.block_dim), stream, *ptrs, *[ctypes.c_int64(ints[a.name]) for a in abi.ints],
           *[ctypes.c_double(reals[a.name]) for a in abi.reals])
    torch.npu.synchronize()
    outputs = {}
    for name in graph.outputs:
        base = host.base_of(name)
        host.tensors[base].copy_(device[base].cpu())
        ours = host.get(name, env)
        outputs[name] = args[name] if name in args else ours
        if name in args:
            args[name].copy_(ours)
    report = Report(backend="npu", machine=spec.name, notes=["launched through torch_npu", *graph.notes])
    set_last_report(report)
    return outputs, report


def _device_ptr(device, host, name, env) -> int:
    base, byte_offset = host.location(name, env)
    return device[base].data_ptr() + byte_offset


def run_kernel(kernel, args: dict, scalars: dict | None = None, block_dim: int = 1, **options):
    """One launch of ``kernel`` (see pypto.runtime.cpu.run_kernel for the argument conventions)."""
    _require()
    graph, tensors = one_task_graph(kernel, args, scalars, block_dim)
    return run(graph, tensors, {}, **options)
