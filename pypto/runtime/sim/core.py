"""A core of the machine, and one block instance running on it.

``Core`` owns the byte buffers of its memory spaces (capacity from the MachineSpec; they persist
from task to task like the hardware's, and are filled with 0xFF — NaN for floats — before each
task, so a read of never-written data shows). ``CoreRun`` is one block instance on a core:

* the scalar unit walks the program (the compiled generator) and issues each statement, one per
  ``scalar_issue_cycles``, into the in-order queue of its pipe; it never waits, except at a full
  barrier (``pipe_barrier`` on the S pipe = PIPE_ALL);
* an instruction starts when its pipe is free (and it was issued) and occupies it for its cost;
  ``set_flag(src, dst, ev)`` fires when src's earlier instructions have completed (it does not hold
  src); ``wait_flag`` holds dst until the matching set fired; ``pipe_barrier(p)`` holds p until
  p's earlier instructions completed;
* statements are *processed* in program order, except that a pipe blocked on a wait whose set has
  not been processed yet queues its later statements until the set arrives. That order respects
  every set/wait chain, so it is a valid order for the functional execution and for the checks.

Checks (``check=True``):
* races — vector clocks per pipe (a set carries its pipe's clock, a wait joins it); every tile access
  records (pipe, epoch); an access that conflicts with another pipe's access (write/read, read/write,
  write/write) over overlapping bytes that its clock does not cover is a race;
* clobbered live tiles — every byte range remembers which tile last wrote it; reading a tile whose
  bytes a tile of another buffer wrote since (partly or wholly) means two live buffers overlap (the
  declarations of one buffer, ``TileDecl.buffer``, read what each other wrote);
  (both checks keep their state per "atom": the byte ranges between tile boundaries, program.py)
* event ids — a set on an event whose previous set has not been waited yet is a reuse while live;
  a set left unwaited when the block ends is unbalanced; a wait that nothing sets is a deadlock.
"""
from __future__ import annotations

from collections import deque
from operator import gt

import torch

from ...errors import SimError
from ...ir import gm_bounds
from . import indexed
from .functional import TileViews, execute, gm_index, operand_shapes
from .program import BARRIER, INSTR, SET, WAIT, XSET, XWAIT
from .timing import NPIPES, PIPES, S_PIPE

POISON = 0xFF
GM_BUCKET_ROWS = 64


class Core:
    def __init__(self, kind, index: int, spec):
        self.kind, self.index = kind, index
        self.name = f"{kind}{index}"
        self.spec = spec
        self.buffers: dict = {}
        self._views: dict = {}
        self.busy = [0.0] * NPIPES
        self.task_busy = 0.0
        self.last_task = None

    def views(self, cb):
        hit = self._views.get(id(cb))
        if hit is None or hit[0] is not cb:
            for space in cb.spaces:
                if space not in self.buffers:
                    cap = self.spec.capacity[space.capacity_key]
                    self.buffers[space] = torch.full((cap,), POISON, dtype=torch.uint8)
            hit = (cb, TileViews(self.buffers, cb))
            self._views[id(cb)] = hit
        for space in cb.spaces:
            self.buffers[space].fill_(POISON)
        return hit[1]


class CoreRun:
    def __init__(self, state, core: Core, cb, env: dict, gm: dict, t0: float, functional: bool, check: bool,
                 slot: int = 0, n_slots: int = 1, gm_records=None):
        self.state, self.core, self.cb = state, core, cb
        self.free = [t0] * NPIPES
        self.done = [t0] * NPIPES
        self.issue = t0
        self.scalar_cycles = state.scalar_cycles
        self.pending = [None] * NPIPES
        self.npending = 0
        self.draining = [False] * NPIPES
        self.flags: dict = {}
        self.xq = [deque() for _ in range(state.spec.cross_core_flags)]
        self.max_xsets = state.spec.cross_core_max_pending      # sets a flag holds before a wait takes one
        self.xin = None          # on the cube core of a cluster: per flag, per vector sub-block
        self.partners: list = []
        self.sub = 0
        self.stalled = None
        self.finished = False
        self.walker = cb.walk(env)
        self.loaded = 0         # exact bytes this block instance's GM loads read (launch.KernelStats)
        self.gm = gm
        self.functional = functional
        self.check = check
        self.views = core.views(cb) if functional else None
        self.trace = state.trace_events
        self.busy = core.busy
        # vector clocks span every pipe of the instance's cores: actor of pipe p here = base + p
        self.base = base = slot * NPIPES
        self.width = width = n_slots * NPIPES
        self.gm_records = gm_records if gm_records is not None else {}
        self.declared = None            # (task instance, geometry) when the task declares its GM regions
        self._covered: dict = {}
        if check:
            n = len(cb.atom_span)                   # race / clobber state per atom (program.py)
            self.vc = [[1 if i == base + p else 0 for i in range(width)] for p in range(NPIPES)]
            self.w_pipe = [-1] * n
            self.w_clk = [0] * n
            self.w_op = [None] * n
            self.r_clk = [None] * n                 # per atom: the clock of each pipe's read since the write
            self.r_op = [None] * (n * NPIPES)       # (None: no read yet); the reads, atom-major
            self.owner = [None] * n                 # the tile whose write put the atom's bytes there
            self.atoms = cb.atoms
            self.buffer_of = cb.buffer_of
            self.last_wait = {}                     # event -> (the waiting pipe's clock after it, the wait)

    # ------------------------------------------------------------------ the scalar unit
    def step(self, budget: int) -> int:
        """Issue up to ``budget`` statements (stopping early when the scalar unit stalls); returns how many."""
        n = 0
        pending, instr, feed, sc = self.pending, self.instr, self.feed, self.scalar_cycles
        set_flag, try_wait = self.set_flag, self.try_wait
        flags, free, done = self.flags, self.free, self.done
        plain = not self.check and self.trace is None      # flags with nothing to record: inline below
        for cop, vals in self.walker:
            n += 1
            kind = cop.kind
            if pending[cop.pipe] is None:                  # the common cases, inline
                if kind == INSTR:
                    self.issue += sc
                    instr(cop, vals, self.issue)
                elif kind == SET:
                    self.issue = issue = self.issue + sc
                    dq = flags.get(cop.key)
                    if plain and dq is not None and not dq:     # set_flag, when the event is free
                        t = done[cop.pipe]
                        dq.append((t if t > issue else issue, None, cop))
                        if pending[cop.other] is not None:
                            self.drain(cop.other)
                    else:
                        set_flag(cop, issue)
                elif kind == WAIT:
                    self.issue = issue = self.issue + sc
                    dq = flags.get(cop.key)
                    if plain and dq is not None and len(dq) == 1:   # try_wait, when one set is there
                        t_set = dq.popleft()[0]
                        p = cop.pipe
                        t = free[p]
                        if issue > t:
                            t = issue
                        if t_set > t:
                            t = t_set
                        free[p] = t
                        if t > done[p]:
                            done[p] = t
                    elif not try_wait(cop, issue):
                        pending[cop.pipe] = deque([(cop, vals, issue)])
                        self.npending += 1
                else:
                    feed(cop, vals)
                    if self.stalled is not None:
                        return n
            else:
                feed(cop, vals)
                if self.stalled is not None:
                    return n
            if n >= budget:
                return n
        self.finished = True
        return n

    def time(self) -> float:
        """How far this core's pipes have committed (the scheduler steps the laggard first)."""
        return max(self.free)

    def feed(self, cop, vals):
        self.issue += self.scalar_cycles
        p = cop.pipe
        kind = cop.kind
        if kind == INSTR:
            if self.pending[p] is None:
                self.instr(cop, vals, self.issue)
            else:
                self.pending[p].append((cop, vals, self.issue))
                self.npending += 1
            return
        if kind == BARRIER and p == S_PIPE:
            if self.npending:
                self.stalled = (cop, vals, self.issue)
            else:
                self.full_barrier(cop)
            return
        if self.pending[p] is not None:
            self.pending[p].append((cop, vals, self.issue))
            self.npending += 1
            return
        if kind == WAIT:
            if not self.try_wait(cop, self.issue):
                self.pending[p] = deque([(cop, vals, self.issue)])
                self.npending += 1
        elif kind == XWAIT:
            if not self.try_xwait(cop, self.issue):
                self.pending[p] = deque([(cop, vals, self.issue)])
                self.npending += 1
        else:
            self.process(cop, vals, self.issue)

    def process(self, cop, vals, issue):
        kind = cop.kind
        if kind == INSTR:
            self.instr(cop, vals, issue)
        elif kind == SET:
            self.set_flag(cop, issue)
        elif kind == BARRIER:
            p = cop.pipe
            t = max(self.done[p], self.free[p], issue)
            self.free[p] = self.done[p] = t
        elif kind == XSET:
            self.cross_set(cop, issue)
        else:
            raise AssertionError(cop.text)

    def drain(self, q: int):
        """Process the queued statements of pipe q until it blocks again."""
        if self.draining[q]:
            return
        self.draining[q] = True
        try:
            pend = self.pending[q]
            while pend:
                cop, vals, issue = pend[0]
                if cop.kind == WAIT:
                    if not self.try_wait(cop, issue):
                        return
                elif cop.kind == XWAIT:
                    if not self.try_xwait(cop, issue):
                        return
                    pend.popleft()
                    self.npending -= 1
                    continue
                else:
                    pend.popleft()
                    self.npending -= 1
                    self.process(cop, vals, issue)
                    continue
                pend.popleft()
                self.npending -= 1
            self.pending[q] = None
        finally:
            self.draining[q] = False
        if self.stalled is not None and not self.npending:
            cop, vals, issue = self.stalled
            self.stalled = None
            self.full_barrier(cop)

    # ------------------------------------------------------------------ instructions
    def instr(self, cop, vals, issue):
        p = cop.pipe
        free = self.free
        start = free[p]
        if issue > start:
            start = issue
        if cop.gm_fits is not None:                 # the GM bounds rule first: a box past the end clips to <= 0
            g = self.gm[cop.gm_param]
            shape = g if type(g) is tuple else g.shape
            if not cop.gm_fits(vals, shape):
                gm_index(cop, vals, shape)          # raises, explaining the box
        m = cop.static
        if m is None:                               # valid shapes known only now (tails)
            key = vals[:cop.nvalid]
            m = cop.mcache.get(key)
            if m is None:
                if not cop.fits(vals):
                    operand_shapes(cop, vals)       # raises, explaining which tile
                m = cop.measure(vals)
                if len(cop.mcache) < 1024:
                    cop.mcache[key] = m
        occ, nbytes, port, flops, vec, elems = m
        st = self.state
        if nbytes:                                  # a GM instruction (shape set above)
            gmm = st.gmem
            end = gmm.move(start + occ, nbytes, port, self.gm_names[cop.gm_param], shape, cop.gm_itemsize,
                           cop.trans, vals, cop.n_tiles, cop.is_store)
            done = end + (st.gm_write_latency if cop.is_store else st.gm_latency)
            st.gm_bytes += nbytes
            self.loaded += elems                    # a load's exact bytes (0 for a store), for its kernel
        else:
            end = start + occ
            done = end + cop.latency
        free[p] = end
        if done > self.done[p]:
            self.done[p] = done
        self.busy[p] += end - start
        st.n_instr += 1
        if flops:
            st.cube_flops += flops
            st.cube_cycles += vec
        elif vec:
            st.vec_cycles += vec
            st.vec_ops += elems
        if self.check:
            self.race_check(cop)
            if (nbytes or cop.on_chip) and cop.region not in indexed.REGIONS:   # indexed rows: data (indexed.py)
                self.gm_check(cop, vals)
        if self.functional:
            execute(self.views, self.gm, cop, vals, self.state.gm_arrays)
        if self.trace is not None:
            self.trace.append((self.core.name, p, start, end, cop))

    # ------------------------------------------------------------------ flags
    def set_flag(self, cop, issue):
        src = cop.pipe
        t = self.done[src]
        if issue > t:
            t = issue
        key = cop.key
        dq = self.flags.get(key)
        if dq is None:
            dq = self.flags[key] = deque()
        elif dq and self.pending[cop.other] is None:
            prev = dq[0][2]
            raise SimError(f"event reused while live: {cop.where()} sets {_ev(key)} again, but the set by "
                           f"{prev.where()} has not been waited yet", loc=cop.loc,
                           hint="use another event id, or wait_flag before setting it again")
        if self.check:
            if not dq:
                self.check_set_after_wait(cop)
            vc = self.vc[src]
            dq.append((t, tuple(vc), cop))
            vc[self.base + src] += 1
        else:
            dq.append((t, None, cop))
        dst = cop.other
        if self.pending[dst] is not None:
            self.drain(dst)

    def try_wait(self, cop, issue) -> bool:
        dq = self.flags.get(cop.key)
        if not dq:
            return False
        t_set, snap, setop = dq.popleft()
        p = cop.pipe
        t = self.free[p]
        if issue > t:
            t = issue
        if t_set > t:
            if self.trace is not None:
                self.trace.append((self.core.name, p, t, t_set, cop))     # the pipe stalls on the flag
            t = t_set
        if dq and dq[0][0] < t:
            later = dq[0][2]
            raise SimError(f"event reused while live: {later.where()} set {_ev(cop.key)} at cycle "
                           f"{dq[0][0]:.0f}, before {cop.where()} consumed the earlier set by "
                           f"{setop.where()} (cycle {t:.0f})", loc=later.loc)
        self.free[p] = t
        if t > self.done[p]:
            self.done[p] = t
        if self.check:
            vc = self.vc[p]
            vc[:] = map(max, vc, snap)                  # the wait joins the set's clock
            vc[self.base + p] += 1
            self.last_wait[cop.key] = (vc[self.base + p], cop)
        return True

    def check_set_after_wait(self, cop):
        """A set of an event whose previous set was consumed must come after that wait on every timing:
        the setting pipe's clock covers the wait. Else the simulated order is luck, and on the device the
        set may arrive first (an event set twice while live)."""
        seen = self.last_wait.get(cop.key)
        if seen is not None and self.vc[cop.pipe][self.base + cop.other] < seen[0]:
            raise SimError(f"event reused while live: {cop.where()} sets {_ev(cop.key)} again, and nothing orders "
                           f"it after {seen[1].where()}, which waited the previous set: on another timing the set "
                           f"comes first", loc=cop.loc,
                           hint="use another event id, or order the set after that wait (a set/wait pair)")

    def full_barrier(self, cop):
        t = max(max(self.done), max(self.free), self.issue)
        self.free[:] = self.done[:] = [t] * NPIPES          # in place: step() holds the lists
        self.issue = t
        if self.check:
            joined = [max(col) for col in zip(*self.vc)]
            self.vc = [list(joined) for _ in range(NPIPES)]
            for p in range(NPIPES):
                self.vc[p][self.base + p] += 1

    # cross-core flags (Ascend mode 2): the cube's set reaches every vector sub-block of its cluster;
    # the cube's counter rises once every vector sub-block has set. A posted flag is (cycle, clock,
    # the set statements behind it) — the statements name the culprit when nobody waits for it.
    def cross_set(self, cop, issue):
        t = self.done[cop.pipe]
        if issue > t:
            t = issue
        if not self.partners:
            raise SimError(f"{cop.where()} signals the partner core, but this kernel runs no partner "
                           f"({self.core.kind} only)", loc=cop.loc)
        f = cop.flag
        snap = None
        if self.check:
            snap = tuple(self.vc[cop.pipe])
            self.vc[cop.pipe][self.base + cop.pipe] += 1
        if self.xin is None:                       # a vector sub-block: towards the cube
            cube = self.partners[0]
            cube.xin[f][self.sub].append((t, snap, cop))
            if all(cube.xin[f]):
                got = [d.popleft() for d in cube.xin[f]]
                joined = None
                if self.check:
                    joined = list(got[0][1])
                    for g in got[1:]:
                        _join(joined, g[1])
                cube.post_cross(f, max(g[0] for g in got), joined, tuple(g[2] for g in got))
        else:
            for v in self.partners:
                v.post_cross(f, t, snap, (cop,))

    def post_cross(self, f, t, snap, setops):
        q = self.xq[f]
        if len(q) >= self.max_xsets:
            raise SimError(f"cross-core flag {f} of {self.core.name} set more than {self.max_xsets} times "
                           f"without a wait\n  by {setops[-1].where()}\n  first unwaited set by "
                           f"{q[0][2][-1].where()}", loc=setops[-1].loc)
        q.append((t, snap, setops))
        for p in range(NPIPES):
            pend = self.pending[p]
            if pend and pend[0][0].kind == XWAIT and pend[0][0].flag == f:
                self.drain(p)

    def try_xwait(self, cop, issue) -> bool:
        q = self.xq[cop.flag]
        if not q:
            return False
        t_set, snap, _ = q.popleft()
        p = cop.pipe
        t = max(self.free[p], issue)
        if t_set > t:
            if self.trace is not None:
                self.trace.append((self.core.name, p, t, t_set, cop))     # the pipe stalls on the flag
            t = t_set
        self.free[p] = t
        if t > self.done[p]:
            self.done[p] = t
        if self.check:
            _join(self.vc[p], snap)
        return True

    # ------------------------------------------------------------------ end of the block
    def end_time(self) -> float:
        return max(max(self.done), max(self.free), self.issue)

    def finish_checks(self):
        for key, dq in self.flags.items():
            if dq:
                setop = dq[0][2]
                raise SimError(f"unbalanced set_flag: {setop.where()} sets {_ev(key)}, which no wait_flag "
                               f"consumes before the block ends", loc=setop.loc,
                               hint="every set_flag needs its wait_flag, or the event stays set for the next task")
        for f, q in enumerate(self.xq):
            if q:
                setops = q[0][2]
                by = "\n  ".join(op.where() for op in dict.fromkeys(setops))
                raise SimError(f"cross-core flag {f} of {self.core.name} was set and never waited: no "
                               f"cross_core_wait_flag flag{f} of block {self.cb.block.name} consumes the set by\n  "
                               f"{by}", loc=setops[0].loc,
                               hint=f"every cross_core_set_flag needs a cross_core_wait_flag on the partner core")
        for f, subs in enumerate(self.xin or ()):
            for sub, d in enumerate(subs):
                if d:
                    setop = d[0][2]
                    missing = ", ".join(str(s) for s, other in enumerate(subs) if not other)
                    raise SimError(f"cross-core flag {f} towards {self.core.name}: vector sub-block {sub} set it "
                                   f"at {setop.where()}, but sub-block(s) {missing} never did, so the cube "
                                   f"never sees it", loc=setop.loc,
                                   hint="the cube counts a flag once every vector sub-block of the cluster "
                                        "has set it")

    def blocked_report(self) -> list[str]:
        out = []
        for p in range(NPIPES):
            pend = self.pending[p]
            if pend:
                cop = pend[0][0]
                what = ("a set_flag" if cop.kind == WAIT else "a cross-core set")
                out.append(f"{self.core.name} {PIPES[p]} pipe waits at {cop.where()} for {what} "
                           f"that is never issued")
        if self.stalled is not None:
            out.append(f"{self.core.name} scalar unit waits at {self.stalled[0].where()} for the pipes to drain")
        return out

    # ------------------------------------------------------------------ race / clobber checks
    def race_check(self, cop):
        p = cop.pipe
        vcp = self.vc[p]
        base = self.base
        w_pipe, w_clk, owner, r_clk, buffer_of = self.w_pipe, self.w_clk, self.owner, self.r_clk, self.buffer_of
        clk = vcp[base + p]
        for t, a in cop.read_atoms:
            o = owner[a]
            if o is not None and o != t and buffer_of[o] != buffer_of[t]:
                self._clobbered(cop, t, a)
            wp = w_pipe[a]
            if wp >= 0 and wp != p and vcp[base + wp] < w_clk[a]:
                self._race(cop, t, a, "reads", self.w_op[a], "wrote")
            rc = r_clk[a]
            if rc is None:
                rc = r_clk[a] = [0] * NPIPES
            rc[p] = clk
            self.r_op[a * NPIPES + p] = cop
        if not cop.write_atoms:
            return
        mine = vcp[base:base + NPIPES]
        for t, a in cop.write_atoms:
            wp = w_pipe[a]
            if wp >= 0 and wp != p and mine[wp] < w_clk[a]:
                self._race(cop, t, a, "writes", self.w_op[a], "wrote")
            rc = r_clk[a]
            # a read this pipe's clock does not cover (this pipe's own reads always are covered)
            if rc is not None and any(map(gt, rc, mine)):
                other = next(q for q in range(NPIPES) if rc[q] > mine[q])
                self._race(cop, t, a, "writes", self.r_op[a * NPIPES + other], "read")
            w_pipe[a] = p
            w_clk[a] = clk
            self.w_op[a] = cop
            r_clk[a] = None
            owner[a] = t

    def gm_check(self, cop, vals):
        """GM races inside one launch instance (e.g. a store and a later load of the same region by another
        pipe or core with no flag chain between them). Regions are kept per (buffer, shape) in buckets of rows."""
        write = cop.is_store
        loc = self.gm_names[cop.gm_param]
        if not write and loc not in self.gm_written:
            if self.declared is not None:               # nothing here writes it: only the declared-region check
                self._check_declared(cop, False, *self._gm_box(cop, vals))
            return
        p = cop.pipe
        actor = self.base + p
        vcp = self.vc[p]
        lead, box = self._gm_box(cop, vals)
        key = (loc, lead)
        recs = self.gm_records.get(key)
        if recs is None:
            recs = self.gm_records[key] = {}
        b0, b1 = box[0] // GM_BUCKET_ROWS, (box[1] - 1) // GM_BUCKET_ROWS + 1
        for b in range(b0, b1):
            bucket = recs.get(b)
            if bucket is None:
                continue
            # a read conflicts with earlier writes; a write with earlier writes and reads. Each list keeps
            # the latest clock of every actor in it (an actor's clock only grows): a list whose actors'
            # accesses this pipe's clock all covers holds no conflict, and is not walked
            for k in ((0, 1) if write else (0,)):
                for oactor, oclk in bucket[2 + k].items():
                    if oactor != actor and vcp[oactor] < oclk:
                        self._gm_conflicts(cop, write, box, actor, vcp, bucket[k], k == 0)
                        break
        if self.declared is not None:
            self._check_declared(cop, write, lead, box)
        clk = vcp[actor]
        entry = (box, actor, clk, cop)
        k = 0 if write else 1
        for b in range(b0, b1):
            bucket = recs.get(b)
            if bucket is None:
                bucket = recs[b] = ([], [], {}, {})     # writes, reads; latest clock of each actor in them
            lst = bucket[k]
            if not write and lst and lst[-1][0] == box and lst[-1][1] == actor:
                lst[-1] = entry                     # the same pipe re-reading the same box: keep the latest
            else:
                lst.append(entry)
            bucket[2 + k][actor] = clk

    @staticmethod
    def _gm_conflicts(cop, write, box, actor, vcp, records, owrite):
        """Raise on the first of ``records`` (accesses of the same rows) that overlaps ``box`` with no flag
        chain ordering it before this access."""
        for obox, oactor, oclk, oop in records:
            if oactor != actor and vcp[oactor] < oclk and \
                    obox[0] < box[1] and box[0] < obox[1] and obox[2] < box[3] and box[2] < obox[3]:
                raise SimError(f"race on GM: {cop.where()} {'writes' if write else 'reads'} "
                               f"{cop.gm_param}[{box[0]}:{box[1]}, {box[2]}:{box[3]}], which {oop.where()} "
                               f"{'wrote' if owrite else 'read'} with no flag chain ordering them "
                               f"(a set_flag/wait_flag, or a cross-core flag between cube and vector)",
                               loc=cop.loc)

    @staticmethod
    def _gm_box(cop, vals):
        """(leading offsets, (r0, r1, c0, c1)) of an instruction's GM box."""
        n = 2 * cop.n_tiles
        offs, ext, _ = gm_bounds.box(vals[n:n + cop.gm_rank], vals[0], vals[1], cop.trans)
        return offs[:-2], (offs[-2], offs[-2] + ext[-2], offs[-1], offs[-1] + ext[-1])

    def _check_declared(self, cop, write, lead, box):
        """The task's GM access must lie in a region it declares: the scheduler orders tasks by those."""
        inst, geo = self.declared
        declared = inst.write_boxes if write else inst.read_boxes
        if declared is None:
            return
        name = inst.task.gm_args[cop.gm_param]
        covered = self._covered.get((name, write))
        if covered is None:                          # does a declared box hold the whole bound buffer?
            whole = geo.whole(name, inst.loop_env)
            covered = self._covered[(name, write)] = whole is None or any(
                d[0] == whole[0] and d[1] <= whole[1] and whole[2] <= d[2] and d[3] <= whole[3] and whole[4] <= d[4]
                for d in declared)
        if covered:
            return
        offsets = lead + (box[0], box[2]) if cop.gm_rank > 1 else (box[2],)
        extents = (1,) * len(lead) + (box[1] - box[0], box[3] - box[2]) if cop.gm_rank > 1 else (box[3] - box[2],)
        acc = geo.access_box(name, offsets, extents, inst.loop_env)
        if acc is None:
            return
        for d in declared:
            if d[0] == acc[0] and d[1] <= acc[1] and acc[2] <= d[2] and d[3] <= acc[3] and acc[4] <= d[4]:
                return
        what = "writes" if write else "reads"
        shown = ", ".join(f"{d[0]}[{d[1]}:{d[2]}, {d[3]}:{d[4]}]" for d in declared) or "nothing"
        raise SimError(f"task {inst.label} {what} {acc[0]}[{acc[1]}:{acc[2]}, {acc[3]}:{acc[4]}] (via {name}), "
                       f"outside the GM regions it declares it {what} ({shown}): the scheduler orders tasks by "
                       f"their declared regions, so this access can race with other tasks\n  in {cop.where()}",
                       loc=cop.loc)

    def _bytes(self, a) -> str:
        space, lo, hi = self.cb.atom_span[a]
        return f"{space}[0x{lo:05x}, 0x{hi:05x})"

    def _race(self, cop, t, a, verb, other, other_verb):
        tile = self.cb.tile_list[t]
        where = "" if (tile.space, tile.addr, tile.addr + tile.nbytes) == self.cb.atom_span[a] else \
            f" (bytes {self._bytes(a)})"
        raise SimError(f"race: {cop.where()} {verb} tile '{tile.name}' {tile.footprint()}{where} that "
                       f"{other.where()} {other_verb} with no set_flag/wait_flag chain ordering "
                       f"{other.pipe_enum} before {cop.pipe_enum}",
                       loc=cop.loc,
                       hint=f"set_flag({other.pipe_enum}, {cop.pipe_enum}, ev) after the {other.op} and "
                            f"wait_flag({other.pipe_enum}, {cop.pipe_enum}, ev) before the {cop.op}")

    def _clobbered(self, cop, t, a):
        tiles = self.cb.tile_list
        writer, w, tile = self.w_op[a], tiles[self.owner[a]], tiles[t]
        raise SimError(f"overlapping live buffers: {cop.where()} reads tile '{tile.name}' {tile.footprint()}, "
                       f"but {writer.where()} wrote tile '{w.name}' {w.footprint()} over its bytes "
                       f"{self._bytes(a)} since '{tile.name}' was last written", loc=cop.loc,
                       hint="place the two tiles at disjoint addresses, or end one's life before the other starts")


def _join(v: list, snap) -> None:
    v[:] = map(max, v, snap)


def _ev(key) -> str:
    return f"event {PIPES[key[0]]} -> {PIPES[key[1]]} ev{key[2]}"
