"""Containers: Sequential, ModuleList, ModuleDict (submodules registered under their index or key)."""
from __future__ import annotations

from ..errors import TypeMismatchError
from .module import Module


class Sequential(Module):
    def __init__(self, *modules: Module):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        first = next(iter(self._modules.values()), None)
        return first.default_dynamic_dims(arg, rank) if first is not None else super().default_dynamic_dims(arg, rank)

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, *args, **kwargs):
        raise TypeMismatchError("ModuleList has no forward: iterate over it inside a module's forward")


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        for k, m in dict(modules or {}).items():
            self.add_module(k, m)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def forward(self, *args, **kwargs):
        raise TypeMismatchError("ModuleDict has no forward: use its entries inside a module's forward")
