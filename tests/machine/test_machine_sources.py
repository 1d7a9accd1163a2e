"""Every figure of every machine file names its public source (issue 20: a calibrated, sourced machine
model), and machine files load by name or by path."""
import re
from pathlib import Path

import pytest

import pypto.machine as machine_pkg
from pypto.errors import PyptoError
from pypto.machine import figure_sources, load_machine, references

MACHINES = sorted(p.stem for p in Path(machine_pkg.__file__).parent.glob("*.toml"))


@pytest.mark.parametrize("name", MACHINES)
def test_every_figure_cites_a_listed_reference(name):
    refs = references(name)
    assert refs, f"{name}.toml lists no references"
    figures = figure_sources(name)
    assert len(figures) > 30                        # the parse found the tables' figures, not a few lines
    cited = set()
    for key, value, comment in figures:
        numbers = {int(n) for n in re.findall(r"\[(\d+)\]", comment)}
        assert numbers, f"{name}.toml: {key} = {value} has no source comment ([n])"
        assert numbers <= set(refs), f"{name}.toml: {key} cites {sorted(numbers - set(refs))}, not listed"
        cited |= numbers
    assert cited == set(refs), f"{name}.toml lists references nothing cites: {sorted(set(refs) - cited)}"


@pytest.mark.parametrize("name", MACHINES)
def test_the_parse_sees_what_toml_sees(name):
    spec = load_machine(name)
    parsed = {key for key, _, _ in figure_sources(name)}
    loaded = {f"{t}.{k}" for t, v in spec.raw.items() if isinstance(v, dict) for k in v}
    loaded |= {k for k, v in spec.raw.items() if not isinstance(v, dict) and k not in ("name", "description")}
    assert parsed == loaded


def test_a_machine_file_loads_by_path(tmp_path):
    text = (Path(machine_pkg.__file__).parent / "a2a3.toml").read_text()
    edited = tmp_path / "edited.toml"
    edited.write_text(text.replace("drain_cycles = ", "drain_cycles = 1 + "))      # not TOML any more
    with pytest.raises(PyptoError, match="edited.toml"):
        load_machine(str(edited))
    edited.write_text(re.sub(r"drain_cycles = \d+", "drain_cycles = 123", text))
    spec = load_machine(str(edited))
    assert spec.launch["drain_cycles"] == 123 and spec.name == "a2a3"
    assert spec.without_launch().launch == {} and spec.without_launch().memory == spec.memory
    with pytest.raises(PyptoError, match="known machines: a2a3, a5"):
        load_machine("a9")
