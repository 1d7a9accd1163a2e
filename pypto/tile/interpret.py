"""The reference backend of tile kernels: the traced tile program run with torch, grid point by grid
point, with the same rules as the hardware — every op works on its destination's valid region, tile
padding is NaN (so reading it shows). An op that is one PTO instruction runs that instruction's
semantics (pypto/ir/isa.py, the functions the simulator runs); loads, stores and reshapes move data
here."""
from __future__ import annotations

import itertools

import sympy
import torch

from ..errors import PyptoError
from ..ir.isa import ISA
from ..ir.isa_semantics import REGIONS
from ..symbolic import evaluate
from .ir import KernelProgram, Loop, Value
from .optable import OPS



def _ev(x, env):
    if isinstance(x, sympy.Basic):
        return evaluate(x, env) if x.free_symbols or x.is_Integer else float(x)
    return x


class _Run:
    def __init__(self, program: KernelProgram, tensors: dict, env: dict):
        self.p, self.tensors, self.env = program, tensors, env
        self.vals: dict = {}

    def new(self, v: Value):
        dt = v.dtype.torch_dtype
        fill = float("nan") if dt.is_floating_point else 0
        t = torch.full(v.shape, fill, dtype=dt)
        self.vals[id(v)] = t
        return t

    def valid(self, v: Value):
        return tuple(max(0, _ev(x, self.env)) for x in v.valid)

    def box(self, view, env):
        t = self.tensors[view.tensor]
        offs = [_ev(o, env) for o in view.offsets]
        r, c = (max(0, _ev(x, env)) for x in view.valid)
        if view.trans:
            r, c = c, r
        if t.dim() == 1:
            return t[offs[0]:offs[0] + c].unsqueeze(0), (r, c)
        idx = tuple(offs[:-2]) + (slice(offs[-2], offs[-2] + r), slice(offs[-1], offs[-1] + c))
        if (r and c) and (any(o < 0 for o in offs) or offs[-2] + r > t.shape[-2] or offs[-1] + c > t.shape[-1]):
            raise PyptoError(f"tile view {view} reads outside {view.tensor}{list(t.shape)}")
        return t[idx], (r, c)

    def run(self, stmts):
        for s in stmts:
            if isinstance(s, Loop):
                self.loop(s)
            else:
                try:
                    self.op(s)
                except (RuntimeError, IndexError, TypeError, ValueError) as e:
                    raise PyptoError(f"{s.op}: {e}", loc=s.loc) from None

    def loop(self, s: Loop):
        start, stop = _ev(s.start, self.env), _ev(s.stop, self.env)
        for c in s.carried:
            self.vals[id(c.phi)] = self.vals[id(c.init)].clone()
        for j in range(start, stop, s.step):
            self.env[s.var.name] = j
            self.run(s.body)
            for c in s.carried:
                self.vals[id(c.phi)] = self.vals[id(c.next)].clone()
        for c in s.carried:
            self.vals[id(c.result)] = self.vals[id(c.phi)]

    def op(self, s):
        name, env = s.op, self.env
        if name == "store":
            view, v = s.args
            dst, (r, c) = self.box(view, env)
            src = self.vals[id(v)]
            vr, vc = self.valid(v)
            rr, cc = min(r, vr), min(c, vc)
            dst[:rr, :cc] = src[:rr, :cc].to(dst.dtype) if not view.trans else src[:cc, :rr].T.to(dst.dtype)
            return
        out = self.new(s.out)
        r, c = self.valid(s.out)
        if name == "load":
            src, (br, bc) = self.box(s.args[0], env)
            src = src.T if s.args[0].trans else src
            out[:r, :c] = src[:r, :c]
            return
        if name == "reshape":           # no instruction: the backends go through GM
            out[:r, :c] = self.vals[id(s.args[0])].reshape(r, c)
            return
        self.instruction(s, out)

    def instruction(self, s, out):
        """Run the op's PTO instruction (its entry in pypto/ir/isa.py): operands cut to the instruction's
        region, then the instruction's semantics function, as the simulator does."""
        op = OPS[s.op].pto
        if op is None:
            raise PyptoError(f"the reference backend has no rule for pt op {s.op}", loc=s.loc)
        tiles = [out] + [self.vals[id(a)] for a in s.args if isinstance(a, Value)]
        valid = [self.valid(s.out)] + [self.valid(a) for a in s.args if isinstance(a, Value)]
        scalars = [_ev(a, self.env) for a in s.args if not isinstance(a, Value)]
        if s.op == "matmul" and len(tiles) == 4:         # a @ b + acc: TMATMUL_ACC into a copy of acc
            r, c = valid[0]
            out[:r, :c] = tiles.pop()[:r, :c].to(out.dtype)
            valid.pop()
            op = "TMATMUL_ACC"
        spec = ISA[op]
        shapes = REGIONS[spec.region]([x for v in valid for x in v], len(tiles))
        operands = [t[:rr, :cc] for t, (rr, cc) in zip(tiles, shapes)] + scalars
        spec.semantics(operands[0], operands[1:], s.attrs)


def run_program(program: KernelProgram, tensors: dict, grid: tuple, env: dict) -> None:
    env = dict(env)
    for s, g in zip(program.grid_sizes, grid):
        env[s.name] = g
    for point in itertools.product(*(range(g) for g in grid)):
        for pid, x in zip(program.pids, point):
            env[pid.name] = x
        _Run(program, tensors, env).run(program.body)
