"""Planted bugs in the compiled Block IR of the Professional and Tile examples, for the simulator's checks.

A ``Case`` is one example compiled once at small shapes, with launches on machines of one to three
clusters (every loop body, prologue and epilogue runs, each core several iterations; the launches differ
in sizes or core counts, so trip counts differ too), each with its inputs and a torch reference. ``sync_mutants`` plants, for every sync statement (set_flag / wait_flag / pipe_barrier /
cross-core set / wait), each of: drop it; drop it with its partner (the statement its flags pair with
most often in the unmutated run, so the program stays balanced and only the ordering is lost); give it
another event id (flag id). ``overlap_mutants`` moves one tile onto another tile of the same memory
space that is live at the same time. ``classify`` runs a mutant on the simulator with every check on:

* ``reported``  — a SimError that names an instruction (`text` (PIPE pipe, block ...));
* ``redundant`` — no error on any launch and every output equals torch: the race checker saw every pair
  of conflicting accesses ordered by another chain, so the planted sync was not needed (for an overlap:
  harmless, which a pair of live buffers never is);
* ``missed``    — no error and a wrong result (or an error that names no instruction).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import re
from collections import Counter
from functools import cached_property
from pathlib import Path

import torch

from pypto.errors import SimError
from pypto.ir.block import CrossCoreSetFlag, CrossCoreWaitFlag, For, If, PipeBarrier, SetFlag, WaitFlag, walk
from pypto.machine import load_machine
from pypto.runtime.sim import core as sim_core
from pypto.runtime.sim.program import INSTR, stmt_text

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SYNC = (SetFlag, WaitFlag, PipeBarrier, CrossCoreSetFlag, CrossCoreWaitFlag)
NAMES_AN_INSTRUCTION = re.compile(r"`[^`]+` \(\w+ pipe, block \w+")


def small_machine(clusters: int = 1, aiv: int | None = None):
    """a2a3 cut down to a few clusters (a cube and two vector cores each, or ``aiv`` vector cores)."""
    spec = load_machine("a2a3")
    return dataclasses.replace(spec, cores={**spec.cores, "aic": clusters, "aiv": aiv or 2 * clusters})


def _example(path: str):
    spec = importlib.util.spec_from_file_location(f"planted_{Path(path).stem}", EXAMPLES / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------- cases
@dataclasses.dataclass
class Run:
    """One launch configuration: ``launch(compiled, tensors)`` runs it; outputs are checked against torch."""
    launch: object
    inputs: dict
    outputs: dict              # name -> a tensor of the output's shape and dtype
    reference: dict
    tol: tuple

    def __call__(self, compiled) -> dict:
        outs = {n: torch.full_like(t, float("nan")) for n, t in self.outputs.items()}
        self.launch(compiled, {**self.inputs, **outs})
        return outs

    def error(self, outs: dict) -> float | None:
        """None when every output matches torch, else the largest absolute error."""
        rtol, atol = self.tol
        if all(torch.allclose(outs[n].float(), r.float(), rtol=rtol, atol=atol) for n, r in self.reference.items()):
            return None
        return max(float((outs[n].float() - r.float()).abs().nan_to_num(math.inf).max())
                   for n, r in self.reference.items())


class Case:
    """One compiled example and the launches a mutant must survive: several sizes (or core counts) with
    the same Block IR, so that a sync is called redundant only when no trip count needs it."""

    def __init__(self, name, compiled, runs: list):
        self.name, self.compiled, self.runs = name, compiled, runs

    @property
    def kernel(self):
        return self.compiled.kernel

    def with_kernel(self, kernel):
        return dataclasses.replace(self.compiled, kernel=kernel)

    @cached_property
    def observed(self) -> "Observed":
        return Observed(self)


def _pro_case(name, path, kernel_attr, launches, make_args, reference, tol, key=None):
    """``launches``: (size, block_dim) pairs, the sizes sharing one compilation; ``make_args(*size)`` gives
    the kernel's arguments, and the outputs are the params ``reference`` returns."""
    import pypto_pro.language as pl
    from pypto_pro.language.launch import run_compiled
    mod = _example(path)
    machine = small_machine(max(bd for _, bd in launches))
    k = getattr(mod, kernel_attr)
    jk = pl.jit(k.fn, name=k.name, pipeline=k.pipeline, tiling_key=k.tiling_key, machine=machine)
    names = list(jk.signature.parameters)
    compiled, runs = None, []
    for size, block_dim in launches:
        args = make_args(*size)
        c, _, env = jk._prepare(tuple(args[n] for n in names), {}, key)
        assert compiled is None or c.kernel is compiled.kernel, "the sizes must share one compilation"
        compiled = c
        ref = reference(mod, args)

        def launch(cc, tensors, env=env, block_dim=block_dim):
            run_compiled(cc, {n: tensors[n] for n in names}, env, block_dim, "sim", machine=machine)
        runs.append(Run(launch, {n: t for n, t in args.items() if n not in ref},
                        {n: args[n] for n in ref}, ref, tol))
    return Case(name, compiled, runs)


def _tile_case(name, path, kernel_attr, args, grid, kwargs, reference, tol, machines):
    """One compilation launched on machines with different core counts (different trip counts per core)."""
    import pypto.tile as pt
    from pypto.tile.run import launch as tile_launch
    mod = _example(path)
    compiled = pt.kernel(getattr(mod, kernel_attr).fn, machine=machines[0])[grid].compile(*args.values(), **kwargs)
    ref = reference(mod, args)
    runs = []
    for machine in machines:
        def launch(cc, tensors, machine=machine):
            tile_launch(cc, tensors, grid, "sim", machine, {}, None)
        runs.append(Run(launch, {n: t for n, t in args.items() if n not in ref}, {n: args[n] for n in ref}, ref, tol))
    return Case(name, compiled, runs)


def _randn(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed * 7919 + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def pro_add():
    return _pro_case("pro/add", "pro/add.py", "add_kernel", [((256, 512), 1), ((384, 384), 1)],
                     lambda r, c: {"x": _randn(r, c), "y": _randn(r, c, seed=1),
                                   "z": torch.empty(r, c, dtype=torch.float16)},
                     lambda m, a: {"z": a["x"] + a["y"]}, (0, 0))


def pro_matmul():
    return _pro_case("pro/matmul", "pro/matmul.py", "matmul_kernel", [((256, 512, 256), 1), ((384, 384, 128), 1)],
                     lambda m, k, n: {"a": _randn(m, k), "b": _randn(k, n, seed=1),
                                      "c": torch.empty(m, n, dtype=torch.float16)},
                     lambda mod, t: {"c": (t["a"].float() @ t["b"].float()).half()}, (2e-3, 2e-2))


def pro_softmax():
    return _pro_case("pro/softmax", "pro/softmax.py", "softmax_kernel", [((36, 128), 1), ((40, 128), 1)],
                     lambda r, c: {"x": _randn(r, c) * 3, "y": torch.empty(r, c, dtype=torch.float16)},
                     lambda m, t: {"y": torch.softmax(t["x"].float(), -1).half()}, (1e-3, 1e-3))


def pro_flash_attention(handoff="fp32", math_="fp32", block_k=128):
    key = {"HANDOFF": handoff, "MATH": math_, "BLOCK_K": block_k}
    label = "pro/flash_attention" + ("" if handoff == math_ == "fp32" and block_k == 128 else
                                     f"[{handoff},{math_},{block_k}]")
    return _pro_case(label, "pro/flash_attention.py", "flash_attention_pipelined", [((1, 512), 1), ((1, 512), 2)],
                     lambda bh, s: {**{n: _randn(bh, s, 128, seed=i) for i, n in enumerate("qkv")},
                                    "o": torch.zeros(bh, s, 128, dtype=torch.float16)},
                     lambda m, t: {"o": m.reference(t["q"], t["k"], t["v"])}, (2e-2, 2e-3), key=key)


def tile_layer_norm():
    x, w, b = _randn(72, 64), _randn(64, seed=1), _randn(64, seed=2)
    return _tile_case("tile/layer_norm", "tile/layer_norm.py", "layer_norm",
                      {"X": x, "W": w, "B": b, "Y": torch.empty_like(x)}, (5,), {"BR": 16},
                      lambda m, t: {"Y": torch.nn.functional.layer_norm(t["X"].float(), (64,), t["W"].float(),
                                                                        t["B"].float(), 1e-5).half()},
                      (1e-2, 1e-2), [small_machine(1, aiv=1), small_machine(1)])


def tile_matmul_gelu():
    a, b, bias = _randn(100, 160), _randn(160, 80, seed=1), _randn(80, seed=2)
    return _tile_case("tile/matmul_gelu", "tile/matmul_gelu.py", "matmul_bias_gelu",
                      {"A": a, "B": b, "bias": bias, "C": torch.empty(100, 80, dtype=torch.float16)}, (2, 2),
                      {"BM": 64, "BN": 64, "BK": 64},
                      lambda m, t: {"C": torch.nn.functional.gelu(t["A"].float() @ t["B"].float()
                                                                  + t["bias"].float()).half()},
                      (1e-2, 1e-2), [small_machine(1), small_machine(3)])


def tile_flash_attention():
    q, k, v = (_randn(1, 128, 64, seed=s) for s in range(3))

    def ref(m, t):
        o = torch.nn.functional.scaled_dot_product_attention(t["Q"].float(), t["K"].float(), t["V"].float(),
                                                             is_causal=True)
        return {"O": o.half()}
    # 16-row tiles: the last query tile sees 8 key tiles, so the skewed (3-stage) key loop runs
    return _tile_case("tile/flash_attention", "tile/flash_attention.py", "flash_attention",
                      {"Q": q, "K": k, "V": v, "O": torch.empty_like(q)}, (8, 1), {"BM": 16, "BN": 16},
                      ref, (2e-2, 2e-2), [small_machine(1), small_machine(3)])


CASES = {"pro/add": pro_add, "pro/matmul": pro_matmul, "pro/softmax": pro_softmax,
         "pro/flash_attention": pro_flash_attention, "tile/layer_norm": tile_layer_norm,
         "tile/matmul_gelu": tile_matmul_gelu, "tile/flash_attention": tile_flash_attention}


@functools.cache
def case(name: str) -> Case:
    """The compiled case (built once per process)."""
    return CASES[name]()


# ---------------------------------------------------------------------------------------- pairings
class Observed:
    """What the unmutated runs did: ``partners[(n, i)]`` counts the statements (block index, walk index)
    that the flags of sync statement i of block n paired with; ``executed`` holds every sync statement
    that ran at least once; ``accesses[n]`` is the (tiles read, tiles written) of every instruction of
    the first core that ran block n, in the order the simulator processed them."""

    def __init__(self, case: Case):
        kernel = case.kernel
        index = {id(s): (n, i) for n, b in enumerate(kernel.blocks) for i, s in enumerate(walk(b.body))}
        block_of = {b.name: n for n, b in enumerate(kernel.blocks)}
        self.partners: dict = {}
        self.executed: set = set()
        self.accesses: dict = {}
        first_run: dict = {}

        def note(setop, waitop):
            s, w = index[id(setop.stmt)], index[id(waitop.stmt)]
            self.partners.setdefault(w, Counter())[s] += 1
            self.partners.setdefault(s, Counter())[w] += 1

        def ran(cop):
            if cop.kind != INSTR:
                self.executed.add(index[id(cop.stmt)])

        CR = sim_core.CoreRun
        saved = {n: getattr(CR, n) for n in ("try_wait", "try_xwait", "set_flag", "cross_set", "process",
                                              "full_barrier", "race_check")}

        def race_check(run, cop):
            n = block_of[cop.block.name]
            if first_run.setdefault(n, id(run)) == id(run):
                names = run.cb.tile_list
                self.accesses.setdefault(n, []).append(({names[t].name for t in cop.reads},
                                                        {names[t].name for t in cop.writes}))
            return saved["race_check"](run, cop)

        def try_wait(run, cop, issue):
            dq = run.flags.get(cop.key)
            head = dq[0][2] if dq else None
            ok = saved["try_wait"](run, cop, issue)
            if ok:
                note(head, cop)
                ran(cop)
            return ok

        def try_xwait(run, cop, issue):
            q = run.xq[cop.flag]
            heads = q[0][2] if q else ()
            ok = saved["try_xwait"](run, cop, issue)
            if ok:
                for h in heads:
                    note(h, cop)
                ran(cop)
            return ok

        def plain(name):
            def wrapped(run, cop, *a):
                ran(cop)
                return saved[name](run, cop, *a)
            return wrapped

        patches = {"try_wait": try_wait, "try_xwait": try_xwait, "race_check": race_check,
                   **{n: plain(n) for n in ("set_flag", "cross_set", "process", "full_barrier")}}
        for n, f in patches.items():
            setattr(CR, n, f)
        try:
            for run in case.runs:
                err = run.error(run(case.compiled))
                assert err is None, f"{case.name}: the unmutated program does not match torch (max error {err:.3g})"
        finally:
            for n, f in saved.items():
                setattr(CR, n, f)


# ---------------------------------------------------------------------------------------- mutants
def sync_statements(kernel):
    """(block index, walk index, statement) of every sync statement."""
    for n, b in enumerate(kernel.blocks):
        for i, s in enumerate(walk(b.body)):
            if isinstance(s, SYNC):
                yield n, i, s


def edit(kernel, changes: dict):
    """A copy of ``kernel`` with the statements at (block index, walk index) replaced by ``changes[...]``
    (None: deleted). Only the edited blocks' statement lists, loops and branches are new objects; the
    other blocks, the instructions and the (immutable) sympy expressions are shared, so the simulator's
    compiled-block cache keeps serving the blocks a mutant leaves alone."""
    blocks = list(kernel.blocks)
    for n in {n for n, _ in changes}:
        counter = iter(range(1 << 30))
        blocks[n] = dataclasses.replace(blocks[n], body=_rebuild(blocks[n].body, n, changes, counter))
    return dataclasses.replace(kernel, blocks=blocks)


def _rebuild(stmts, n, changes, counter):
    out = []
    for s in stmts:
        i = next(counter)                  # walk order: a statement, then its nested bodies
        if isinstance(s, For):
            s = dataclasses.replace(s, body=_rebuild(s.body, n, changes, counter))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then_body=_rebuild(s.then_body, n, changes, counter),
                                    else_body=_rebuild(s.else_body, n, changes, counter))
        if (n, i) in changes:
            s = changes[(n, i)]
        if s is not None:
            out.append(s)
    return out


def _describe(kernel, n, i, s) -> str:
    return f"{kernel.blocks[n].name} #{i} `{stmt_text(s, kernel.blocks[n])}`"


def _other_id(kernel, s) -> int:
    """Another event id of the same pipe pair (a flag id of the same core) the program uses, else the next."""
    if isinstance(s, (SetFlag, WaitFlag)):
        used = sorted({x.event for _, _, x in sync_statements(kernel) if isinstance(x, (SetFlag, WaitFlag))
                       and (x.src, x.dst) == (s.src, s.dst)} - {s.event})
        return used[0] if used else (s.event + 1) % 8
    used = sorted({x.flag for _, _, x in sync_statements(kernel)
                   if isinstance(x, (CrossCoreSetFlag, CrossCoreWaitFlag))} - {s.flag})
    return used[0] if used else (s.flag + 1) % 16


def sync_mutants(case: Case, only=None):
    """(label, mutated kernel) for every sync statement (or the (block, walk index) in ``only``) and
    mutation: drop it; drop it with its most frequent partner; another event (flag) id."""
    kernel = case.kernel
    seen = case.observed
    for n, i, s in sync_statements(kernel):
        if only is not None and (n, i) not in only:
            continue
        what = _describe(kernel, n, i, s)
        yield f"drop {what}", edit(kernel, {(n, i): None})
        partner = seen.partners.get((n, i))
        if partner:
            (m, j), _ = partner.most_common(1)[0]
            yield f"drop pair {what} + #{j}", edit(kernel, {(n, i): None, (m, j): None})
        if not isinstance(s, PipeBarrier):
            new = _other_id(kernel, s)
            field = "event" if isinstance(s, (SetFlag, WaitFlag)) else "flag"
            yield f"id {what} -> {new}", edit(kernel, {(n, i): dataclasses.replace(s, **{field: new})})


def overlap_pairs(case: Case) -> list:
    """(block index, victim, intruder): tiles of one block and memory space, of different buffers with
    disjoint bytes, where the unmutated run writes the intruder while the victim's buffer holds a value
    that is read later (between a write and the last read before the next write); moving the intruder
    onto the victim must then be reported. One pair per (victim buffer, intruder buffer)."""
    out = []
    for n, block in enumerate(case.kernel.blocks):
        decl = {t.name: t for t in block.tiles}
        seq = [({decl[t].buffer_name for t in r}, {decl[t].buffer_name for t in w})
               for r, w in case.observed.accesses.get(n, [])]
        first_decl = {}
        for t in block.tiles:
            first_decl.setdefault(t.buffer_name, t)
        found = {}
        for pos, (_, writes) in enumerate(seq):
            for victim in writes:
                end = None                       # the last read of this value
                for p in range(pos + 1, len(seq)):
                    if victim in seq[p][0]:
                        end = p
                    if victim in seq[p][1]:
                        break
                for p in range(pos + 1, end or pos):
                    for intruder in seq[p][1] - {victim}:
                        a, b = first_decl[victim], first_decl[intruder]
                        if a.space == b.space and not (a.addr < b.addr + b.nbytes and b.addr < a.addr + a.nbytes):
                            found.setdefault((victim, intruder), (n, a.name, b.name))
        out.extend(found.values())
    return out


def move_onto(kernel, n, victim, intruder):
    """A copy of ``kernel`` whose tile ``intruder`` (with every declaration of its buffer) sits at the bytes
    of ``victim`` (its end, when the intruder is larger and the victim lies near the top of the space)."""
    block = kernel.blocks[n]
    decl = {t.name: t for t in block.tiles}
    a, b = decl[victim], decl[intruder]
    addr = a.addr
    cap = small_machine().capacity[a.space.capacity_key]
    if addr + b.nbytes > cap:
        addr = a.addr + a.nbytes - b.nbytes
    delta = addr - b.addr
    tiles = [dataclasses.replace(t, addr=t.addr + delta) if t.buffer_name == b.buffer_name else t
             for t in block.tiles]
    blocks = list(kernel.blocks)
    blocks[n] = dataclasses.replace(block, tiles=tiles)
    return dataclasses.replace(kernel, blocks=blocks)


def overlap_mutants(case: Case, limit: int | None = None):
    pairs = overlap_pairs(case)
    if limit is not None and len(pairs) > limit:
        step = len(pairs) / limit
        pairs = [pairs[int(k * step)] for k in range(limit)]
    for n, victim, intruder in pairs:
        yield f"{case.kernel.blocks[n].name}: {intruder} onto {victim}", move_onto(case.kernel, n, victim, intruder)


def classify(case: Case, kernel) -> tuple[str, str]:
    """('reported' | 'redundant' | 'missed', detail) of one mutant over the case's runs."""
    compiled = case.with_kernel(kernel)
    for run in case.runs:
        try:
            err = run.error(run(compiled))
        except SimError as e:
            msg = str(e)
            if NAMES_AN_INSTRUCTION.search(msg):
                return "reported", msg.splitlines()[0]
            return "missed", "a report that names no instruction: " + msg.splitlines()[0]
        if err is not None:
            return "missed", f"wrong answer, no report (max error {err:.3g})"
    return "redundant", ""


def sweep(case: Case, mutants) -> dict:
    """Classify every (label, kernel) of ``mutants``: {'reported' | 'redundant' | 'missed': [(label, detail)]}."""
    out = {"reported": [], "redundant": [], "missed": []}
    for label, kernel in mutants:
        kind, detail = classify(case, kernel)
        out[kind].append((label, detail))
    return out


def executed_sync(case: Case) -> set:
    """The (block index, walk index) of the sync statements the unmutated runs executed."""
    return {(n, i) for n, i, _ in sync_statements(case.kernel) if (n, i) in case.observed.executed}
