"""The Tensor-level front end: tracing (``tensor.py``, ``api*.py``), ``jit.py``, loops, hints.

``pypto.frontend.jit`` is CANN PyPTO's spelling of the decorator (the module ``jit.py`` is callable);
the package's modules load on first use, so ``import pypto.frontend`` stays cheap."""
import importlib as _importlib


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return _importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'pypto.frontend' has no attribute '{name}'") from None
