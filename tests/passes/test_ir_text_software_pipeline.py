"""software_pipeline.software_pipeline, Block IR text in and out: a loop marked ``{unroll=U}`` becomes U copies
a step with their own tiles (multi-buffering) and the loop variable substituted per copy, the iterations
the loop does not run peeled under ``if`` (or, with ``tail=guard``, the later copies guarded inside the
loop); with ``skew=D`` and stage marks, a prologue of D stage-0 iterations, a steady state that runs stage 0
of iteration i + D before stage 1 of iteration i, and the epilogue. Tails: trip counts not a multiple of
the depth, smaller than the depth, and dynamic. Bad stage marks are a CompileError naming the line.
N stages (``skew=(0, D1, ...)``), Professional mode's marks (``slots`` among given tiles, ``rename=False``,
``stage=all`` preamble, ``tail=guard`` with skew): their text, and their result on sim against torch."""
import pytest
import sympy

from pypto.errors import CompileError
from pypto.ir.block import For, If, walk_instrs
from pypto.passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer
from pypto.passes.software_pipeline import software_pipeline

from .ir_text import assert_text, block

HEAD = """
block k  core=AIV  args(x: gm f32[n, 64], o: gm f32[8, 64])  params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y : ub f32[8, 64]
  tile z : ub f32[8, 64]
"""


def _run(text):
    blk = block(HEAD + text)
    software_pipeline(blk)
    return blk


def test_depth_2_with_an_odd_trip_count_peels_the_last_iteration():
    """5 iterations: the loop runs copies a, b for i = 0, 2; the last (i = 4) follows, unconditionally (a
    static trip count decides its guard); the accumulator set before the loop is not copied."""
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, 5, 1) {unroll=2}:
    TLOAD  y, x[8*i, 0]
    TEXP   z, y
    TADD   acc, acc, z
  TSTORE o[0, 0], acc
""")
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_a : ub f32[8, 64]
  tile z_a : ub f32[8, 64]
  tile y_b : ub f32[8, 64]
  tile z_b : ub f32[8, 64]
  tile y_ae : ub f32[8, 64]
  tile z_ae : ub f32[8, 64]
  TEXPANDS acc, 0.0 V
  for i in range(0, 4, 2) {pipeline=2}:
    TLOAD y_a, x[8*i, 0] MTE2
    TEXP z_a, y_a V
    TADD acc, acc, z_a V
    TLOAD y_b, x[8*i + 8, 0] MTE2
    TEXP z_b, y_b V
    TADD acc, acc, z_b V
  TLOAD y_ae, x[32, 0] MTE2
  TEXP z_ae, y_ae V
  TADD acc, acc, z_ae V
  TSTORE o[0, 0], acc MTE3
""")


def test_depth_3_with_a_dynamic_trip_count_guards_each_peeled_iteration():
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=3}:
    TLOAD  y, x[8*i, 0]
    TADD   acc, acc, y
  TSTORE o[0, 0], acc
""")
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_a : ub f32[8, 64]
  tile y_b : ub f32[8, 64]
  tile y_c : ub f32[8, 64]
  tile y_ae : ub f32[8, 64]
  tile y_be : ub f32[8, 64]
  tile z : ub f32[8, 64]
  TEXPANDS acc, 0.0 V
  for i in range(0, n - 2, 3) {pipeline=3}:
    TLOAD y_a, x[8*i, 0] MTE2
    TADD acc, acc, y_a V
    TLOAD y_b, x[8*i + 8, 0] MTE2
    TADD acc, acc, y_b V
    TLOAD y_c, x[8*i + 16, 0] MTE2
    TADD acc, acc, y_c V
  if 3*Max(0, ceiling(n/3 - 2/3)) < n:
    TLOAD y_ae, x[24*Max(0, ceiling(n/3 - 2/3)), 0] MTE2
    TADD acc, acc, y_ae V
  if 3*Max(0, ceiling(n/3 - 2/3)) + 1 < n:
    TLOAD y_be, x[24*Max(0, ceiling(n/3 - 2/3)) + 8, 0] MTE2
    TADD acc, acc, y_be V
  TSTORE o[0, 0], acc MTE3
""")


def test_a_trip_count_smaller_than_the_depth_runs_only_the_peeled_iterations():
    """1 iteration, depth 3: the loop's range is empty; the first peeled iteration runs, the second is dropped
    (and its tiles are not declared)."""
    blk = _run("""
  for i in range(0, 1, 1) {unroll=3}:
    TLOAD  y, x[8*i, 0]
    TSTORE o[0, 0], y
""")
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_a : ub f32[8, 64]
  tile y_b : ub f32[8, 64]
  tile y_c : ub f32[8, 64]
  tile y_ae : ub f32[8, 64]
  tile z : ub f32[8, 64]
  for i in range(0, -1, 3) {pipeline=3}:
    TLOAD y_a, x[8*i, 0] MTE2
    TSTORE o[0, 0], y_a MTE3
    TLOAD y_b, x[8*i + 8, 0] MTE2
    TSTORE o[0, 0], y_b MTE3
    TLOAD y_c, x[8*i + 16, 0] MTE2
    TSTORE o[0, 0], y_c MTE3
  TLOAD y_ae, x[0, 0] MTE2
  TSTORE o[0, 0], y_ae MTE3
""")


def test_guarded_tail_keeps_every_iteration_in_the_loop():
    """tail=guard (Tensor mode's ping-pong): copy s1 under ``if i + 1 < n`` inside the loop, names given."""
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=2, tail=guard, names=(s0, s1)}:
    TLOAD  y, x[8*i, 0]
    TADD   acc, acc, y
  TSTORE o[0, 0], acc
""")
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_s0 : ub f32[8, 64]
  tile y_s1 : ub f32[8, 64]
  tile z : ub f32[8, 64]
  TEXPANDS acc, 0.0 V
  for i in range(0, n, 2) {pipeline=2}:
    TLOAD y_s0, x[8*i, 0] MTE2
    TADD acc, acc, y_s0 V
    if i + 1 < n:
      TLOAD y_s1, x[8*i + 8, 0] MTE2
      TADD acc, acc, y_s1 V
  TSTORE o[0, 0], acc MTE3
""")


def test_skew_2_depth_3_dynamic_runs_stage_0_two_iterations_ahead():
    """y crosses from stage 0 (the load) to stage 1 (exp, add): the prologue loads iterations 0 and 1 into
    the tiles the loop's copies a and b read; the steady state loads i + 2 (copy c) before it finishes i
    (copy a); the epilogue finishes what the loop started (stage 0 of je + 2 .. je + 3, stage 1 of je ..
    je + 3), each under its own guard, with its own tiles for what does not cross (z). Iteration je + 4 is
    not emitted: the loop stops only once i + 4 >= n, so je + 4 >= n (a dead guard and tile z_bf)."""
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=3, skew=2}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=1}
    TADD   acc, acc, z {stage=1}
  TSTORE o[0, 0], acc
""")
    g = "3*Max(0, ceiling(n/3 - 4/3))"
    assert_text(blk, f"""
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_a : ub f32[8, 64]
  tile y_b : ub f32[8, 64]
  tile y_c : ub f32[8, 64]
  tile z_a : ub f32[8, 64]
  tile z_b : ub f32[8, 64]
  tile z_c : ub f32[8, 64]
  tile z_ae : ub f32[8, 64]
  tile z_be : ub f32[8, 64]
  tile z_ce : ub f32[8, 64]
  tile z_af : ub f32[8, 64]
  TEXPANDS acc, 0.0 V
  TLOAD y_a, x[0, 0] MTE2
  if 1 < n:
    TLOAD y_b, x[8, 0] MTE2
  for i in range(0, n - 4, 3) {{pipeline=3, skewed=2}}:
    TLOAD y_c, x[8*i + 16, 0] MTE2
    TEXP z_a, y_a V
    TADD acc, acc, z_a V
    TLOAD y_a, x[8*i + 24, 0] MTE2
    TEXP z_b, y_b V
    TADD acc, acc, z_b V
    TLOAD y_b, x[8*i + 32, 0] MTE2
    TEXP z_c, y_c V
    TADD acc, acc, z_c V
  if {g} + 2 < n:
    TLOAD y_c, x[24*Max(0, ceiling(n/3 - 4/3)) + 16, 0] MTE2
  if {g} < n:
    TEXP z_ae, y_a V
    TADD acc, acc, z_ae V
  if {g} + 3 < n:
    TLOAD y_a, x[24*Max(0, ceiling(n/3 - 4/3)) + 24, 0] MTE2
  if {g} + 1 < n:
    TEXP z_be, y_b V
    TADD acc, acc, z_be V
  if {g} + 2 < n:
    TEXP z_ce, y_c V
    TADD acc, acc, z_ce V
  if {g} + 3 < n:
    TEXP z_af, y_a V
    TADD acc, acc, z_af V
  TSTORE o[0, 0], acc MTE3
""")


def test_skew_with_a_trip_count_smaller_than_the_depth():
    """2 iterations, depth 3, skew 2: the prologue runs stage 0 of both, the loop none, the epilogue stage 1
    of both; stage 0 tiles that do not cross (y) are the prologue's own (y_ap, y_bp)."""
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, 2, 1) {unroll=3, skew=2}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=0}
    TADD   acc, acc, z {stage=1}
  TSTORE o[0, 0], acc
""")
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_ap : ub f32[8, 64]
  tile z_a : ub f32[8, 64]
  tile y_bp : ub f32[8, 64]
  tile z_b : ub f32[8, 64]
  tile y_c : ub f32[8, 64]
  tile z_c : ub f32[8, 64]
  tile y_a : ub f32[8, 64]
  tile y_b : ub f32[8, 64]
  TEXPANDS acc, 0.0 V
  TLOAD y_ap, x[0, 0] MTE2
  TEXP z_a, y_ap V
  TLOAD y_bp, x[8, 0] MTE2
  TEXP z_b, y_bp V
  for i in range(0, -2, 3) {pipeline=3, skewed=2}:
    TLOAD y_c, x[8*i + 16, 0] MTE2
    TEXP z_c, y_c V
    TADD acc, acc, z_a V
    TLOAD y_a, x[8*i + 24, 0] MTE2
    TEXP z_a, y_a V
    TADD acc, acc, z_b V
    TLOAD y_b, x[8*i + 32, 0] MTE2
    TEXP z_b, y_b V
    TADD acc, acc, z_c V
  TADD acc, acc, z_a V
  TADD acc, acc, z_b V
  TSTORE o[0, 0], acc MTE3
""")


def test_nested_loops_are_pipelined_innermost_first_and_names_compose():
    """The inner loop's copies (y_a, y_b, y_ae) copied again by the outer loop: y_ab is outer copy a of inner
    copy b, y_aeb the outer peeled iteration's (ae) copy b; the inner loop's state (acc), set in the outer body, is one per outer copy; valid shapes get each
    copy's iteration; the accumulator's first step (an if with an else branch) is decided only in the inner
    copy that is never the first iteration."""
    blk = block("""
block k  core=AIV  args(x: gm f32[m, 64], o: gm f32[m, 64])  params(m)
  symbols m: int>0
  tile w : ub f32[8, 64]
  tile y : ub f32[8, 64]  valid [Min(8, m - 8*t), 64]
  tile acc : ub f32[8, 64]  valid [Min(8, m - 8*t), 64]
  TLOAD w, x[0, 0]
  for t in range(0, 3, 1) {unroll=2}:
    for j in range(0, 3, 1) {unroll=2}:
      TLOAD y, x[8*t, 0]
      if Eq(j, 0):
        TMUL acc, y, w
      else:
        TADD acc, acc, y
    TSTORE o[8*t, 0], acc
""")
    software_pipeline(blk)
    assert [t.name for t in blk.tiles] == ["w", "y_aa", "y_ab", "y_aae", "acc_a", "y_ba", "y_bb", "y_bae", "acc_b",
                                           "y_aea", "y_aeb", "y_aeae", "acc_ae"]
    decl = {t.name: t for t in blk.tiles}
    assert str(decl["acc_b"].valid[0]) == "Min(8, m - 8*t - 8)" and str(decl["y_ab"].valid[0]) == "Min(8, m - 8*t)"
    assert str(decl["y_aeae"].valid[0]) == "Min(8, m - 16)" and decl["w"].valid is None
    outer = blk.body[1]
    assert isinstance(outer, For) and outer.attrs == {"pipeline": 2} and outer.stop == 2
    inner = outer.body[0]
    assert isinstance(inner, For) and inner.attrs == {"pipeline": 2}
    first, later = inner.body[1], inner.body[3]
    assert isinstance(first, If) and first.cond == sympy.Eq(inner.var, 0)
    assert [i.op for i in first.then_body] == ["TMUL"] and [i.op for i in first.else_body] == ["TADD"]
    assert later.op == "TADD" and later.operands == ["acc_a", "acc_a", "y_ab"]
    # the peeled inner iteration (j = 2) keeps both forms: the pass decides the test only in the loop's copies
    peeled = outer.body[2]
    assert isinstance(peeled, If) and peeled.else_body[0].operands == ["acc_a", "acc_a", "y_aae"]
    store = outer.body[3]
    assert store.op == "TSTORE" and store.operands[1] == "acc_a"
    assert blk.body[-1].op == "TSTORE" and blk.body[-1].operands[0].offsets[0] == 16    # the outer peeled copy: t = 2


def test_handoff_uses_are_one_per_copy_and_the_slot_is_the_copy():
    """Two stores of one handoff in the body share a mark; each copy gets its own use, numbered in program
    order, and the slot symbol in the workspace offset becomes the copy's index."""
    blk = block("""
block k  core=AIV  args(x: gm f32[64, 64], ws: gm f32[64, 64])
  symbols slot: int>=0
  tile y : ub f32[8, 64]
  for i in range(0, 4, 1) {unroll=2, slot=slot}:
    TLOAD  y, x[8*i, 0]
    TSTORE ws[16*slot, 0], y
    TSTORE ws[16*slot + 8, 0], y
""")
    mark = HandoffAccess(HandoffBuffer(0, "workspace ws", 2), 7)
    for ins in walk_instrs(blk.body):
        if ins.op == "TSTORE":
            ins.attrs[HANDOFF] = mark
    software_pipeline(blk)
    stores = [i for i in walk_instrs(blk.body) if i.op == "TSTORE"]
    marks = [i.attrs[HANDOFF] for i in stores]
    assert marks[0] is marks[1] and marks[2] is marks[3] and marks[1] is not marks[2]
    assert [m.use for m in marks] == [0, 0, 1, 1] and {m.buffer for m in marks} == {mark.buffer}
    assert [i.operands[0].offsets[0] for i in stores] == [0, 8, 16, 24]


def test_a_stage_mark_that_reads_before_the_definition_is_an_error():
    """z is written in stage 1 and read in stage 0: stage 0 of iteration i runs before its stage 1."""
    with pytest.raises(CompileError, match=r"tile z is read by TADD in stage 0 but written by TEXP in stage 1.*"
                                           r"use would precede the definition") as e:
        _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=3, skew=2}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=1}                       # model.py:11
    TADD   acc, acc, z {stage=0}                # model.py:12
  TSTORE o[0, 0], acc
""")
    assert (e.value.loc.file, e.value.loc.line) == ("model.py", 12) and "(line 11)" in str(e.value)


def test_missing_or_mixed_stage_marks_and_bad_marks_are_errors():
    with pytest.raises(CompileError, match="TEXP in the skewed loop over i has no stage mark"):
        _run("""
  for i in range(0, n, 1) {unroll=2, skew=1}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y
    TSTORE o[0, 0], z {stage=1}
""")
    with pytest.raises(CompileError, match="an if in the skewed loop over i holds instructions of stages"):
        _run("""
  for i in range(0, n, 1) {unroll=2, skew=1}:
    TLOAD  y, x[8*i, 0] {stage=0}
    if i < 3:
      TEXP   z, y {stage=0}
      TSTORE o[0, 0], z {stage=1}
""")
    with pytest.raises(CompileError, match="bad mark on the loop over i"):
        _run("""
  for i in range(0, n, 1) {unroll=2, skew=2}:
    TLOAD  y, x[8*i, 0]
""")
    with pytest.raises(CompileError, match="bad mark on the loop over i"):     # a negative skew
        _run("""
  for i in range(0, n, 1) {unroll=2, skew=-1}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TSTORE o[0, 0], y {stage=1}
""")
    with pytest.raises(CompileError, match="tile y is read by TEXP before the iteration of the loop over i writes it"):
        _run("""
  for i in range(0, n, 1) {unroll=2}:
    TEXP   z, y
    TLOAD  y, x[8*i, 0]
    TSTORE o[0, 0], z
""")


RUN = """
block k  core=AIV  args(x: gm DT[R, 64], o: gm DT[8, 64])  params(n)
  symbols n: int>0
  tile acc : ub DT[8, 64]
  tile y : ub DT[8, 64]
  tile z : ub DT[8, 64]
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {MARK}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=1}
    TADD   acc, acc, z {stage=1}
  TSTORE o[0, 0], acc
"""


@pytest.mark.parametrize("mark", ["unroll=3, skew=2", "unroll=2, skew=1", "unroll=3, skew=(0, 1, 2)",
                                  "unroll=4, skew=(0, 2, 3)", "unroll=3", "unroll=3, skew=2, tail=guard"])
def test_every_guard_holds_for_some_trip_count(mark):
    """No dead code: each ``if`` the pass emits for a dynamic trip count n is true for some n in 1..40 (the
    epilogue once also ran iteration je + (U+D-1): never below n, as the loop only stops when i + U+D-1 >= n)."""
    text = """
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {MARK}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=S1}
    TADD   acc, acc, z {stage=S2}
  TSTORE o[0, 0], acc
"""
    three = "(0, " in mark
    text = text.replace("MARK", mark).replace("S1", "1").replace("S2", "2" if three else "1")
    if "skew" not in mark:
        text = text.replace(" {stage=0}", "").replace(" {stage=1}", "")
    blk = _run(text)
    conds = [s.cond for s in blk.body if isinstance(s, If)]      # the prologue's and the epilogue's
    assert conds
    for c in conds:
        n = next(f for f in c.free_symbols if f.name == "n")
        assert c.free_symbols == {n}
        assert any(bool(c.subs(n, v)) for v in range(1, 41)), f"dead guard {c} ({mark})"


@pytest.mark.parametrize("mark,dt", [("unroll=3, skew=2", "f32"), ("unroll=2, skew=1", "f16"), ("unroll=2", "f32"),
                                     ("unroll=3", "f16"), ("unroll=2, tail=guard", "f32")])
def test_the_pipelined_loop_computes_what_the_loop_computes(mark, dt):
    """After the pass (and the memory / sync passes), the simulator's result is torch's for every trip count
    from 1 (fewer than the depth) to 7, one compiled block for all (n is a run-time scalar)."""
    import torch

    import pypto
    from pypto.ir.block import Kernel
    from pypto.passes.memory import plan_memory
    from pypto.passes.pipe_sync import synchronize
    from pypto.passes.vector_barriers import insert_barriers
    from pypto.runtime import sim
    machine = pypto.get_machine()
    blk = block(RUN.replace("MARK", mark).replace("DT", dt))
    software_pipeline(blk)
    plan_memory(blk, machine)
    synchronize(blk, machine)
    insert_barriers(blk)
    assert sum(1 for t in blk.tiles if t.name.startswith("y_")) >= 2          # multi-buffered
    tdt = torch.float32 if dt == "f32" else torch.float16
    for n in range(1, 8):
        x = torch.randn(8 * n, 64, generator=torch.Generator().manual_seed(n)).to(tdt)
        out, _ = sim.run_kernel(Kernel("k", [blk]), {"x": x, "o": torch.empty(8, 64, dtype=tdt)}, {"n": n})
        ref = torch.exp(x.float()).reshape(n, 8, 64).sum(0)
        tol = 1e-5 if dt == "f32" else 2e-2
        torch.testing.assert_close(out["o"].float(), ref, rtol=tol, atol=tol)


def test_three_stages_each_one_iteration_behind_the_last():
    """skew=(0, 1, 2): time step T runs stage 0 of T, stage 1 of T - 1, stage 2 of T - 2. The prologue is time
    steps 0 and 1; copy i of the loop loads i + 2, exps i + 1 and adds i; y (stage 0 -> 1) and z (stage 1 -> 2)
    are named after the iteration's copy everywhere; the epilogue runs the time steps after the loop, up to
    iteration je + 3 (the loop stops once i + 4 >= n: nothing of je + 4 is emitted)."""
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=3, skew=(0, 1, 2)}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=1}
    TADD   acc, acc, z {stage=2}
  TSTORE o[0, 0], acc
""")
    g, x = "3*Max(0, ceiling(n/3 - 4/3))", "24*Max(0, ceiling(n/3 - 4/3))"
    assert_text(blk, f"""
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y_a : ub f32[8, 64]
  tile y_b : ub f32[8, 64]
  tile z_a : ub f32[8, 64]
  tile y_c : ub f32[8, 64]
  tile z_b : ub f32[8, 64]
  tile z_c : ub f32[8, 64]
  TEXPANDS acc, 0.0 V
  TLOAD y_a, x[0, 0] MTE2
  if 1 < n:
    TLOAD y_b, x[8, 0] MTE2
  TEXP z_a, y_a V
  for i in range(0, n - 4, 3) {{pipeline=3, skewed=(0, 1, 2)}}:
    TLOAD y_c, x[8*i + 16, 0] MTE2
    TEXP z_b, y_b V
    TADD acc, acc, z_a V
    TLOAD y_a, x[8*i + 24, 0] MTE2
    TEXP z_c, y_c V
    TADD acc, acc, z_b V
    TLOAD y_b, x[8*i + 32, 0] MTE2
    TEXP z_a, y_a V
    TADD acc, acc, z_c V
  if {g} + 2 < n:
    TLOAD y_c, x[{x} + 16, 0] MTE2
  if {g} + 1 < n:
    TEXP z_b, y_b V
  if {g} < n:
    TADD acc, acc, z_a V
  if {g} + 3 < n:
    TLOAD y_a, x[{x} + 24, 0] MTE2
  if {g} + 2 < n:
    TEXP z_c, y_c V
  if {g} + 1 < n:
    TADD acc, acc, z_b V
  if {g} + 3 < n:
    TEXP z_a, y_a V
  if {g} + 2 < n:
    TADD acc, acc, z_c V
  if {g} + 3 < n:
    TADD acc, acc, z_a V
  TSTORE o[0, 0], acc MTE3
""")


SLOTS = """
block k  core=AIV  args(x: gm DT[R, 64], o: gm DT[8, 64])  params(n)
  symbols n: int>0
  tile acc : ub DT[8, 64] @0x0
  tile w : ub DT[8, 64] @0x800
  tile y : ub DT[8, 64]
  tile z : ub DT[8, 64]
  tile y0 : ub DT[8, 64] @0x1000
  tile y1 : ub DT[8, 64] @0x1800
  tile z0 : ub DT[8, 64] @0x2000
  tile z1 : ub DT[8, 64] @0x2800
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=2, skew=(0, 1, 2), tail=guard, rename=False, slots={y=(y0, y1), z=(z0, z1)}}:
    TEXPANDS w, 2.0 {stage=all}
    TLOAD  y, x[8*i, 0] {stage=0}
    TMUL   z, y, w {stage=1}
    TADD   acc, acc, z {stage=2}
  TSTORE o[0, 0], acc
"""


def test_slots_choose_the_user_tiles_per_copy_and_the_preamble_runs_in_every_stage():
    """Professional mode's form: the user's tiles at the user's addresses (rename=False), the logical buffers y
    and z standing for slots (y0, y1) and (z0, z1): iteration k uses slot k mod 2 in every stage, so stage 1 of
    iteration k reads the slot its stage 0 filled. tail=guard with three stages: the loop runs the last stage of
    every iteration (copy 1 under ``if i + 1 < n``), the earlier stages each under their own guard; the
    stage=all statement (the preamble) is in front of every stage instance; the placeholders y, z are gone."""
    blk = block(SLOTS.replace("DT", "f32").replace("R, 64", "n, 64"))
    software_pipeline(blk)
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], o: gm f32[8, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64] @0x00000
  tile w : ub f32[8, 64] @0x00800
  tile y0 : ub f32[8, 64] @0x01000
  tile y1 : ub f32[8, 64] @0x01800
  tile z0 : ub f32[8, 64] @0x02000
  tile z1 : ub f32[8, 64] @0x02800
  TEXPANDS acc, 0.0 V
  TEXPANDS w, 2.0 V
  TLOAD y0, x[0, 0] MTE2
  if 1 < n:
    TEXPANDS w, 2.0 V
    TLOAD y1, x[8, 0] MTE2
  TEXPANDS w, 2.0 V
  TMUL z0, y0, w V
  for i in range(0, n, 2) {pipeline=2, skewed=(0, 1, 2)}:
    if i + 2 < n:
      TEXPANDS w, 2.0 V
      TLOAD y0, x[8*i + 16, 0] MTE2
    if i + 1 < n:
      TEXPANDS w, 2.0 V
      TMUL z1, y1, w V
    TEXPANDS w, 2.0 V
    TADD acc, acc, z0 V
    if i + 1 < n:
      if i + 3 < n:
        TEXPANDS w, 2.0 V
        TLOAD y1, x[8*i + 24, 0] MTE2
      if i + 2 < n:
        TEXPANDS w, 2.0 V
        TMUL z0, y0, w V
      TEXPANDS w, 2.0 V
      TADD acc, acc, z1 V
  TSTORE o[0, 0], acc MTE3
""")


def test_slots_in_a_peeled_loop_follow_the_iteration_and_a_slot_tile_is_not_renamed():
    """Two stages (skew=1), depth 4, a period-2 slot buffer: copies 0..3 use y0, y1, y0, y1; the prologue's
    iteration 0 and the epilogue's iterations keep the slot of their iteration (k mod 2); z (renamed) gets
    its per-copy tiles while the slot tiles keep their names."""
    blk = block("""
block k  core=AIV  args(x: gm f32[n, 64], o: gm f32[8, 64])  params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64]
  tile y : ub f32[8, 64]
  tile y0 : ub f32[8, 64]
  tile y1 : ub f32[8, 64]
  tile z : ub f32[8, 64]
  TEXPANDS acc, 0.0
  for i in range(0, 6, 1) {unroll=4, skew=1, slots={y=(y0, y1)}}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=1}
    TADD   acc, acc, z {stage=1}
  TSTORE o[0, 0], acc
""")
    software_pipeline(blk)
    loads = [i for i in walk_instrs(blk.body) if i.op == "TLOAD"]
    exps = [i for i in walk_instrs(blk.body) if i.op == "TEXP"]
    i = blk.body[2].var
    assert [(t.operands[0], t.operands[1].offsets[0]) for t in loads] == \
        [("y0", 0), ("y1", 8 * i + 8), ("y0", 8 * i + 16), ("y1", 8 * i + 24), ("y0", 8 * i + 32), ("y1", 40)]
    assert [t.operands[1] for t in exps] == ["y0", "y1", "y0", "y1", "y0", "y1"]
    assert [t.operands[0] for t in exps] == ["z_a", "z_b", "z_c", "z_d", "z_ae", "z_be"]
    names = [t.name for t in blk.tiles]
    assert "y" not in names and {"y0", "y1"} <= set(names) and not any(n.startswith("y_") for n in names)


def test_a_stage_all_preamble_is_copied_into_each_stage_of_a_renamed_loop():
    """stage=all with renamed tiles: the preamble's tile (w) is each stage's own (it is written in every stage,
    so it does not cross) and each stage instance sets it before use."""
    blk = _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=2, skew=1}:
    TEXPANDS w, 2.0 {stage=all}
    TLOAD  y, x[8*i, 0] {stage=0}
    TMUL   z, y, w {stage=1}
    TADD   acc, acc, z {stage=1}
  TSTORE o[0, 0], acc
""".replace("TEXPANDS w", "TEXPANDS z").replace("TMUL   z, y, w", "TMUL   z, y, z"))
    loop = next(s for s in blk.body if isinstance(s, For))
    ops = [(i.op, i.operands[0]) for i in loop.body]
    assert ops == [("TEXPANDS", "z_b"), ("TLOAD", "y_b"), ("TEXPANDS", "z_a"), ("TMUL", "z_a"), ("TADD", "acc"),
                   ("TEXPANDS", "z_a"), ("TLOAD", "y_a"), ("TEXPANDS", "z_b"), ("TMUL", "z_b"), ("TADD", "acc")]


def test_bad_n_stage_and_slot_marks_are_errors():
    for mark in ("unroll=3, skew=(0, 2, 1)", "unroll=3, skew=(1, 2)", "unroll=2, skew=(0, 1, 2)",
                 "unroll=3, slots={y=(y, z)}", "unroll=2, rename=maybe", "unroll=2, skew=(0, 0)"):
        with pytest.raises(CompileError, match="bad mark on the loop over i"):
            _run(f"""
  for i in range(0, n, 1) {{{mark}}}:
    TLOAD  y, x[8*i, 0] {{stage=0}}
    TEXP   z, y {{stage=1}}
    TSTORE o[0, 0], z {{stage=1}}
""")
    with pytest.raises(CompileError, match=r"TEXP in the skewed loop over i has no stage mark \(stage=0 \.\. 2"):
        _run("""
  for i in range(0, n, 1) {unroll=3, skew=(0, 1, 2)}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=3}
    TSTORE o[0, 0], z {stage=2}
""")
    with pytest.raises(CompileError, match="tile z is read by TADD in stage 1 but written by TEXP in stage 2"):
        _run("""
  TEXPANDS acc, 0.0
  for i in range(0, n, 1) {unroll=3, skew=(0, 1, 2)}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TEXP   z, y {stage=2}
    TADD   acc, acc, z {stage=1}
  TSTORE o[0, 0], acc
""")


RUN3 = RUN.replace("TADD   acc, acc, z {stage=1}", "TADD   acc, acc, z {stage=2}")


@pytest.mark.parametrize("text,mark,dt", [(RUN3, "unroll=3, skew=(0, 1, 2)", "f32"),
                                          (RUN3, "unroll=3, skew=(0, 1, 2), tail=guard", "f16"),
                                          (RUN3, "unroll=4, skew=(0, 2, 3)", "bf16"),
                                          (RUN, "unroll=2, skew=1, tail=guard", "f32"),
                                          (SLOTS, None, "f32"), (SLOTS, None, "f16")])
def test_n_stage_and_slot_loops_compute_what_the_loop_computes(text, mark, dt):
    """Three stages (peeled and guarded tails, distances 1 and 2), the guarded two-stage form and the
    Professional-mode form (slots at user addresses, rename=False, a stage=all preamble) after the memory and
    sync passes: the simulator's result is torch's for trip counts 1 .. 7, one compiled block for all."""
    import torch

    import pypto
    from pypto.ir.block import Kernel
    from pypto.passes.memory import plan_memory
    from pypto.passes.pipe_sync import synchronize
    from pypto.passes.vector_barriers import insert_barriers
    from pypto.runtime import sim
    machine = pypto.get_machine()
    src = text.replace("MARK", mark) if mark else text
    blk = block(src.replace("DT", dt))
    software_pipeline(blk)
    plan_memory(blk, machine)
    synchronize(blk, machine)
    insert_barriers(blk)
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
    for n in range(1, 8):
        x = (torch.randn(8 * n, 64, generator=torch.Generator().manual_seed(n)) * 0.5).to(tdt)
        out, _ = sim.run_kernel(Kernel("k", [blk]), {"x": x, "o": torch.empty(8, 64, dtype=tdt)}, {"n": n})
        per = 2 * x.float() if text is SLOTS else torch.exp(x.float())
        if dt != "f32":         # each step rounds to the tile dtype
            per = per.to(tdt).float()
        ref = per.reshape(n, 8, 64).sum(0)
        tol = 1e-5 if dt == "f32" else (3e-2 if dt == "f16" else 1e-1)
        torch.testing.assert_close(out["o"].float(), ref, rtol=tol, atol=tol)


TAIL_SLOTS = """
block k  core=AIV  args(x: gm DT[R, 64], o: gm DT[R, 64])  params(n)
  symbols n: int>0
  tile y : ub DT[8, 64]  valid [Min(8, R - 8*i), 64]
  tile z : ub DT[8, 64]  valid [Min(8, R - 8*i), 64]
  tile y0 : ub DT[8, 64] @0x0
  tile y1 : ub DT[8, 64] @0x800
  tile z0 : ub DT[8, 64] @0x1000
  tile z1 : ub DT[8, 64] @0x1800
  for i in range(0, n, 1) {unroll=2, skew=(0, 1, 2), tail=guard, rename=False, slots={y=(y0, y1), z=(z0, z1)}}:
    TLOAD  y, x[8*i, 0] {stage=0}
    TMULS  z, y, 3.0 {stage=1}
    TSTORE o[8*i, 0], z {stage=2}
"""


def test_a_slot_whose_valid_shape_follows_the_iteration_is_declared_per_iteration():
    """Professional mode's tails: the placeholder's valid shape depends on the loop variable (the last row
    block is partial), so each use of a slot tile gets a declaration of that slot (same address, buffer the
    slot) with its own iteration substituted: the prologue's iteration 0 / 1, the steady copies' i + 2 / i + 1
    / i (an earlier stage runs a later iteration); equal valid shapes share a declaration."""
    blk = block(TAIL_SLOTS.replace("DT", "f32"))
    software_pipeline(blk)
    assert_text(blk, """
block k  core=AIV  args(x: gm f32[R, 64], o: gm f32[R, 64])  params(n)
  symbols  n: int>0
  tile y0    : ub f32[8, 64] @0x00000
  tile y0_s1 : ub f32[8, 64] @0x00000  valid [Min(8, R), 64]  buffer y0
  tile y0_s2 : ub f32[8, 64] @0x00000  valid [Min(8, R - 8*i - 16), 64]  buffer y0
  tile y1    : ub f32[8, 64] @0x00800
  tile y1_s1 : ub f32[8, 64] @0x00800  valid [Min(8, R - 8), 64]  buffer y1
  tile y1_s2 : ub f32[8, 64] @0x00800  valid [Min(8, R - 8*i - 8), 64]  buffer y1
  tile y1_s3 : ub f32[8, 64] @0x00800  valid [Min(8, R - 8*i - 24), 64]  buffer y1
  tile z0    : ub f32[8, 64] @0x01000
  tile z0_s1 : ub f32[8, 64] @0x01000  valid [Min(8, R), 64]  buffer z0
  tile z0_s2 : ub f32[8, 64] @0x01000  valid [Min(8, R - 8*i - 16), 64]  buffer z0
  tile z0_s3 : ub f32[8, 64] @0x01000  valid [Min(8, R - 8*i), 64]  buffer z0
  tile z1    : ub f32[8, 64] @0x01800
  tile z1_s2 : ub f32[8, 64] @0x01800  valid [Min(8, R - 8*i - 8), 64]  buffer z1
  TLOAD          y0_s1, x[0, 0]                            MTE2
  if 1 < n:
    TLOAD          y1_s1, x[8, 0]                          MTE2
  TMULS          z0_s1, y0_s1, 3.0                         V
  for i in range(0, n, 2) {pipeline=2, skewed=(0, 1, 2)}:
    if i + 2 < n:
      TLOAD          y0_s2, x[8*i + 16, 0]                 MTE2
    if i + 1 < n:
      TMULS          z1_s2, y1_s2, 3.0                     V
    TSTORE         o[8*i, 0], z0_s3                        MTE3
    if i + 1 < n:
      if i + 3 < n:
        TLOAD          y1_s3, x[8*i + 24, 0]               MTE2
      if i + 2 < n:
        TMULS          z0_s2, y0_s2, 3.0                   V
      TSTORE         o[8*i + 8, 0], z1_s2                  MTE3
""")


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_slot_loops_with_a_partial_last_block_compute_what_the_loop_computes(dt):
    """The tail form above on the simulator against torch for 1 .. 29 rows (1 .. 4 blocks: fewer blocks than
    stages, partial and full last blocks), after the address check and sync passes Professional mode runs
    (its tiles keep the user's addresses; the slot's declarations are one buffer): every row of o is 3 x."""
    import torch

    import pypto
    from pypto.ir.block import Kernel
    from pypto.passes.memory import check_addresses
    from pypto.passes.pipe_sync import synchronize
    from pypto.passes.vector_barriers import insert_barriers
    from pypto.runtime import sim
    machine = pypto.get_machine()
    blk = block(TAIL_SLOTS.replace("DT", dt))
    software_pipeline(blk)
    check_addresses(blk, machine)           # the user's addresses, as Professional mode keeps them
    synchronize(blk, machine)
    insert_barriers(blk)
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
    for rows in (1, 5, 8, 13, 16, 20, 29):
        x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(rows)).to(tdt)
        out, _ = sim.run_kernel(Kernel("k", [blk]), {"x": x, "o": torch.zeros(rows, 64, dtype=tdt)},
                                {"n": -(-rows // 8)})
        torch.testing.assert_close(out["o"], (3 * x.float()).to(tdt), rtol=1e-5 if dt == "f32" else 1e-2, atol=1e-5)
