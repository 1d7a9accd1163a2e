"""pypto.machine.machine_spec: the one lookup of a ``machine=`` argument (a MachineSpec, a name or .toml
path, or None for the current machine) that the front ends, the pipeline, codegen and the backends call."""
from pathlib import Path

import pytest
import torch

import pypto
import pypto.tile as pt
from pypto.errors import PyptoError
from pypto.machine import MachineSpec, get_machine, load_machine, machine_spec

TOML = Path(pypto.machine.__file__).parent / "a5.toml"


def test_each_form_of_a_machine_argument():
    assert machine_spec() is get_machine() and machine_spec(None) is get_machine()
    a5 = load_machine("a5")
    assert machine_spec(a5) is a5
    assert machine_spec("a5") == a5 and machine_spec(str(TOML)) == a5 and machine_spec(TOML) == a5
    assert isinstance(machine_spec("a2a3"), MachineSpec) and machine_spec("a2a3").name == "a2a3"
    with pytest.raises(PyptoError, match="unknown machine 'a9'"):
        machine_spec("a9")
    with pytest.raises(PyptoError, match="machine= is a machine name .* found int"):
        machine_spec(3)


def _double(X, Y):
    i = pt.program_id(0)
    pt.store(Y.tile((16, 64))[i, 0], pt.load(X.tile((16, 64))[i, 0]) * 2.0)


@pytest.mark.parametrize("machine", ["a5", TOML, "spec"])
def test_a_kernel_runs_on_the_machine_it_names_in_any_form(machine):
    a5 = load_machine("a5")
    X, Y = torch.randn(32, 64), torch.empty(32, 64)
    k = pt.kernel(_double, backend="sim", machine=a5 if machine == "spec" else machine)
    k[(2,)](X, Y)
    torch.testing.assert_close(Y, X * 2)
    assert k.report().machine == a5.name
