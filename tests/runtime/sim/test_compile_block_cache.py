"""runtime/sim/program.compile_block caches a Block's compiled form by the Block's contents: an edit in place
is compiled again even when the new valid shape / operand lands at the address (id) of the one it replaced
(the cache compared id()s, which are reused once an object is freed); an unedited Block is compiled once."""
import sympy
import torch

from pypto.ir.block import CoreType, Instr, walk
from pypto.machine import get_machine, load_machine
from pypto.runtime import sim
from pypto.runtime.sim.program import compile_block
from pypto.testing import kernels as K


def _block():
    kernel = K.vector_add_kernel(64, 128, 16)
    return kernel, kernel.block(CoreType.AIV)


def test_an_unedited_block_is_compiled_once_per_machine():
    _, b = _block()
    spec = get_machine()
    cb = compile_block(b, spec)
    assert compile_block(b, spec) is cb
    other = load_machine("a5")
    assert compile_block(b, other) is not cb and compile_block(b, other).spec is other


def test_a_valid_shape_replaced_in_place_is_compiled_again():
    kernel, b = _block()
    spec = get_machine()
    cb = compile_block(b, spec)
    t = b.tiles[0]
    before = id(t.valid)
    t.valid = None                                  # the old pair freed: the new one may take its address
    t.valid = (sympy.Integer(8), sympy.Integer(128))
    reused = id(t.valid) == before                  # (CPython usually reuses it: the case the id cache missed)
    again = compile_block(b, spec)
    assert again is not cb and again.block.tiles[0].valid == (8, 128), reused


def test_an_operand_replaced_in_place_is_compiled_again_and_runs_the_new_program():
    kernel, b = _block()
    spec = get_machine()
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    z = torch.empty(64, 128)
    sim.run_kernel(kernel, {"x": x, "y": y, "z": z})
    torch.testing.assert_close(z, x + y)
    cb = compile_block(b, spec)
    adds = [s for s in walk(b.body) if isinstance(s, Instr) and s.op == "TADD"]     # one per buffer
    assert len(adds) == 2
    for add in adds:
        add.operands[2] = add.operands[1]           # z = x + x, the operand list edited in place
    assert compile_block(b, spec) is not cb
    sim.run_kernel(kernel, {"x": x, "y": y, "z": z})
    torch.testing.assert_close(z, x + x)
