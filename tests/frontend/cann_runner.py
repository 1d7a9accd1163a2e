"""Runs one of CANN PyPTO's published example scripts against pypto (tests/frontend/test_cann_examples.py
starts it in a fresh process): ``python cann_runner.py SCRIPT [CASE ...]``.

The script is loaded unchanged; ``import pypto`` in it finds this pypto. Its example cases (the
module's ``test_*`` functions, in file order, or the named ones; a script with none runs its ``main``)
are called as CANN's own runner calls them in NPU run mode — the mode in which the examples compare
their results with their goldens (in SIM mode CANN's examples only print) — with no device id (or the device "cpu"), so
their tensors are on the CPU. This host has no NPU: ``torch.npu`` is a stand-in whose
``set_device`` / ``synchronize`` / ``current_device`` do nothing and ``Tensor.npu()`` is the tensor
itself. Each case starts from torch.manual_seed(0). One JSON line per case: {"case", "ok", "error", "cpu_s"}.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
import traceback
import types


def _npu_stand_in():
    import torch
    if hasattr(torch, "npu") and hasattr(torch.npu, "set_device"):
        return
    npu = types.ModuleType("torch.npu")
    npu.set_device = lambda *a, **k: None
    npu.synchronize = lambda *a, **k: None
    npu.current_device = lambda: 0
    npu.is_available = lambda: False
    torch.npu = npu
    torch.Tensor.npu = lambda self, *a, **k: self


def main(argv):
    script = os.path.abspath(argv[0])
    wanted = argv[1:]
    _npu_stand_in()
    sys.argv = [script, "--run_mode", "npu"]
    os.environ.pop("TILE_FWK_DEVICE_ID", None)
    sys.path.insert(0, os.path.dirname(script))
    spec = importlib.util.spec_from_file_location("cann_example", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cann_example"] = module
    spec.loader.exec_module(module)
    cases = [(n, f) for n, f in vars(module).items()
             if n.startswith("test_") and inspect.isfunction(f) and f.__module__ == "cann_example"]
    cases.sort(key=lambda nf: inspect.unwrap(nf[1]).__code__.co_firstlineno)
    if not cases:
        sys.argv = [script, "--run_mode", "sim"]
        cases = [("main", module.main)]
    if wanted:
        cases = [(n, f) for n, f in cases if n in wanted]
    import torch
    for name, fn in cases:
        # the examples draw unseeded inputs and some compare bf16 results within less than a bf16 ulp:
        # a fixed seed makes each run the same run
        torch.manual_seed(0)
        t0 = time.process_time()
        params = inspect.signature(fn).parameters
        try:
            if not params:
                fn()
            else:       # CANN's runners pass device_id (None: no NPU configured) or a device name
                fn("cpu" if next(iter(params)) == "device" else None)
            result = {"case": name, "ok": True, "error": None}
        except BaseException as e:          # noqa: BLE001 - every failure is reported, the next case runs
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                          if f.filename == script), "")
            result = {"case": name, "ok": False, "error": f"{type(e).__name__}: {str(e)[:400]} [{where}]"}
        result["cpu_s"] = round(time.process_time() - t0, 2)
        print("CANN_CASE " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
