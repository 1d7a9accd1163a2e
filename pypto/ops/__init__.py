"""The op registry, one module per family. Importing a family module registers its ops."""
import importlib
import pkgutil

from .registry import REGISTRY, OpDef, get_op, register  # noqa: F401

_NOT_FAMILIES = {"registry", "shape_rules"}


def load_all() -> None:
    for m in pkgutil.iter_modules(__path__):
        if m.name not in _NOT_FAMILIES and not m.name.startswith("_"):
            importlib.import_module(f"{__name__}.{m.name}")


# Importing pypto.ops registers every op (the facade no longer imports it eagerly: pypto/__init__.py).
load_all()
