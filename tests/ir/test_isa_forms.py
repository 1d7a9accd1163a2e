"""The instruction table's relations between entries (pypto/ir/isa.py: commutative, scalar_forms,
expand_forms), which the vector lowering trusts when it swaps sources or picks a tile-scalar or a
broadcast form: each is checked against the instructions' own semantics on random tiles."""
from __future__ import annotations

import pytest
import torch

from pypto.ir.isa import ISA

R, C = 4, 8


def _tiles(spec, seed):
    g = torch.Generator().manual_seed(seed)
    if spec.dtypes == "int":
        return [torch.randint(0, 16, (R, C), generator=g, dtype=torch.int32) for _ in range(2)]
    return [torch.rand(R, C, generator=g) + 0.5 for _ in range(2)]      # positive: TPOW's domain


def _run(name, srcs):
    dst = torch.empty(srcs[0].shape, dtype=srcs[0].dtype)
    ISA[name].semantics(dst, srcs, {})
    return dst


BINARY = [n for n, s in ISA.items() if s.form == "t,t,t" and s.kind in ("elementwise", "transcendental")]


def test_every_relation_names_an_entry_of_the_right_form():
    for name, spec in ISA.items():
        assert not spec.commutative or spec.form == "t,t,t", name
        assert len(spec.scalar_forms) in (0, 2) and len(spec.expand_forms) in (0, 2), name
        assert all(ISA[f].form == "t,t,s" for f in spec.scalar_forms), name
        assert [ISA[f].region for f in spec.expand_forms] in ([], ["rowexpand", "colexpand"]), name
    # what the lowering has used so far: every row/col-expand instruction is some binary's form
    expands = {f for s in ISA.values() for f in s.expand_forms}
    assert expands == {n for n, s in ISA.items() if s.region in ("rowexpand", "colexpand")}


@pytest.mark.parametrize("name", BINARY)
def test_commutative_is_what_the_semantics_say(name):
    spec = ISA[name]
    x, y = _tiles(spec, 1)
    assert torch.equal(_run(name, [x, y]), _run(name, [y, x])) == spec.commutative


@pytest.mark.parametrize("name", [n for n in BINARY if ISA[n].scalar_forms])
def test_scalar_forms_compute_the_binary_with_a_filled_tile(name):
    spec = ISA[name]
    x, _ = _tiles(spec, 2)
    s = 1.5
    filled = torch.full_like(x, s)
    tile_first, scalar_first = spec.scalar_forms
    torch.testing.assert_close(_run(tile_first, [x, s]), _run(name, [x, filled]), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(_run(scalar_first, [x, s]), _run(name, [filled, x]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", [n for n in BINARY if ISA[n].expand_forms])
def test_expand_forms_compute_the_binary_with_a_broadcast_operand(name):
    spec = ISA[name]
    x, y = _tiles(spec, 3)
    column, row = y[:, :1], y[:1, :]
    row_form, col_form = spec.expand_forms
    torch.testing.assert_close(_run(row_form, [x, column]), _run(name, [x, column.expand(R, C)]))
    torch.testing.assert_close(_run(col_form, [x, row]), _run(name, [x, row.expand(R, C)]))
