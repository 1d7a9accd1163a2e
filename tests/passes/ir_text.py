"""Block IR text in, Block IR text out, for the IR-in / IR-out tests of the shared passes
(tests/passes/test_ir_text_*.py): parse the input, run the pass, compare the printed result with the
expected text. Runs of spaces are one space and blank lines are dropped in the comparison, so expected
text need not copy the printer's columns."""
from __future__ import annotations

import re
import textwrap

from pypto.ir.block import Block, Kernel
from pypto.ir.block_parser import parse_block, parse_kernel
from pypto.ir.block_printer import print_block, print_kernel


def block(text: str) -> Block:
    return parse_block(textwrap.dedent(text), file="input.pto")


def kernel(text: str) -> Kernel:
    return parse_kernel(textwrap.dedent(text), file="input.pto")


def _normal(text: str) -> str:
    lines = []
    for line in textwrap.dedent(text).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        lines.append(" " * indent + re.sub(r" {2,}", " ", line.strip()))
    return "\n".join(lines)


def assert_text(ir, expected: str) -> None:
    got = print_kernel(ir) if isinstance(ir, Kernel) else print_block(ir)
    assert _normal(got) == _normal(expected), "\n" + got
