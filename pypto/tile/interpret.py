"""The reference backend of tile kernels: the traced tile program run with torch, grid point by grid
point, with the same rules as the hardware — every op works on its destination's valid region, tile
padding is NaN (so reading it shows), elementwise math computes in fp32 and rounds to the result's dtype
once per op, reductions and matmuls accumulate in fp32."""
from __future__ import annotations

import itertools

import sympy
import torch

from ..errors import PyptoError
from ..symbolic import evaluate
from .ir import KernelProgram, Loop, Value
from .optable import OPS

F32 = torch.float32
_CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


def _ev(x, env):
    if isinstance(x, sympy.Basic):
        return evaluate(x, env) if x.free_symbols or x.is_Integer else float(x)
    return x


def _up(t):
    return t.to(F32) if t.dtype.is_floating_point or t.dtype == torch.bool else t.to(torch.int64)


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
                except (RuntimeError, IndexError) as e:
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
        args = [self.vals[id(a)] if isinstance(a, Value) else _ev(a, env) for a in s.args]
        d = OPS[name]
        fam = d.family
        if name == "matmul":
            a, b = args[0], args[1]
            k = self.valid(s.args[0])[1]
            prod = a[:r, :k].to(F32) @ b[:k, :c].to(F32) if a.dtype.is_floating_point else \
                a[:r, :k].to(torch.int64) @ b[:k, :c].to(torch.int64)
            if len(args) == 3:
                prod = prod + _up(args[2][:r, :c])
            res = prod
        elif fam in ("binary", "rowexp", "colexp"):
            a, b = args
            b = b[:r, :1] if fam == "rowexp" else b[:1, :c] if fam == "colexp" else b[:r, :c]
            res = d.ref(_up(a[:r, :c]), _up(b))
        elif fam == "scalar":
            res = d.ref(_up(args[0][:r, :c]), args[1])
        elif fam == "unary":
            res = d.ref(_up(args[0][:r, :c]))
        elif fam == "reduce":
            sr, sc = self.valid(s.args[0])
            res = d.ref(_up(args[0][:sr, :sc]))
        elif name in ("cast", "copy"):
            res = args[0][:r, :c]
            if name == "cast" and not out.dtype.is_floating_point and res.dtype.is_floating_point:
                res = torch.round(res.to(F32))
        elif name == "reshape":
            res = args[0].reshape(r, c)
        elif name == "transpose":
            res = args[0][:c, :r].T
        elif name == "full":
            res = torch.full((r, c), args[0])
        elif name == "iota":
            axis = s.attrs.get("axis", 1)
            res = (torch.arange(r).unsqueeze(1).expand(r, c) if axis == 0 else
                   torch.arange(c).unsqueeze(0).expand(r, c)).to(torch.float64) + args[0]
        elif name in ("tril", "triu"):
            rr, cc = torch.arange(r).unsqueeze(1), torch.arange(c).unsqueeze(0)
            res = (cc <= rr + args[0]) if name == "tril" else (cc >= rr + args[0])
        elif name in ("cmp", "cmps"):
            b = args[1][:r, :c] if name == "cmp" else args[1]
            res = _CMP[s.attrs["cmp"]](_up(args[0][:r, :c]), _up(b) if isinstance(b, torch.Tensor) else b)
        elif name == "select":
            m, a, b = args
            res = torch.where(m[:r, :c] != 0, _up(a[:r, :c]), _up(b[:r, :c]))
        elif name == "rowexpand":
            res = args[0][:r, :1].expand(r, c)
        elif name == "colexpand":
            res = args[0][:1, :c].expand(r, c)
        else:
            raise PyptoError(f"the reference backend has no rule for pt op {name}", loc=s.loc)
        out[:r, :c] = res.to(out.dtype) if res.dtype != out.dtype else res


def run_program(program: KernelProgram, tensors: dict, grid: tuple, env: dict) -> None:
    env = dict(env)
    for s, g in zip(program.grid_sizes, grid):
        env[s.name] = g
    for point in itertools.product(*(range(g) for g in grid)):
        for pid, x in zip(program.pids, point):
            env[pid.name] = x
        _Run(program, tensors, env).run(program.body)
