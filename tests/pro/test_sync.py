"""Synchronisation: automatic set/wait pairing (checked by the simulator's race, event and deadlock
checks), manual sync with one sync removed caught as a race, cross-core flags, event-id limits."""
import inspect

import pytest
import torch

import pypto_pro.language as pl
from pypto.errors import SimError
from pypto.ir.block import CrossCoreSetFlag, CrossCoreWaitFlag, SetFlag, WaitFlag, walk

VEC = pl.MemorySpace.Vec
F16 = pl.DT_FP16


def _flags(block):
    return [s for s in walk(block.body) if isinstance(s, (SetFlag, WaitFlag))]


def manual_add(drop: str = ""):
    """Single-buffered add with hand-written sync; ``drop`` names one sync to leave out."""
    def add_manual(x: pl.Tensor[[pl.DYNAMIC, 128], F16], y: pl.Tensor[[pl.DYNAMIC, 128], F16],
                   z: pl.Tensor[[pl.DYNAMIC, 128], F16], drop_which: str):
        t = pl.TileType([64, 128], F16, VEC)
        a = pl.make_tile(t, addr=0x0000)
        b = pl.make_tile(t, addr=0x4000)
        c = pl.make_tile(t, addr=0x8000)
        with pl.section_vector():
            for i in pl.range(x.shape[0] // 64):
                if i > 0 or drop_which == "never":      # the first iteration has nothing to wait for
                    pl.system.sync_dst(pl.PIPE_V, pl.PIPE_MTE2, 0)
                pl.load_tile(a, x, [i, 0])
                pl.load_tile(b, y, [i, 0])
                pl.system.sync_src(pl.PIPE_MTE2, pl.PIPE_V, 0)
                if drop_which != "mte2_to_v":
                    pl.system.sync_dst(pl.PIPE_MTE2, pl.PIPE_V, 0)
                if i > 0:
                    pl.system.sync_dst(pl.PIPE_MTE3, pl.PIPE_V, 0)
                pl.add(c, a, b)
                if i + 1 < x.shape[0] // 64:
                    pl.system.sync_src(pl.PIPE_V, pl.PIPE_MTE2, 0)
                pl.system.sync_src(pl.PIPE_V, pl.PIPE_MTE3, 0)
                pl.system.sync_dst(pl.PIPE_V, pl.PIPE_MTE3, 0)
                pl.store_tile(z, c, [i, 0])
                if i + 1 < x.shape[0] // 64:
                    pl.system.sync_src(pl.PIPE_MTE3, pl.PIPE_V, 0)
    return pl.jit(add_manual)


def _xyz(rows=256):
    x = torch.randn(rows, 128, dtype=torch.float16)
    y = torch.randn(rows, 128, dtype=torch.float16)
    return x, y, torch.zeros_like(x)


def test_manual_sync_runs_and_disables_auto_sync():
    x, y, z = _xyz()
    k = manual_add()
    k[None, 1](x, y, z, "")
    torch.testing.assert_close(z, x + y)
    compiled = k.compile(x, y, z, "")
    assert compiled.manual_sync
    assert len(_flags(compiled.kernel.blocks[0])) == 8     # exactly the user's, nothing added


def test_removing_one_manual_sync_is_caught_as_a_race():
    x, y, z = _xyz()
    with pytest.raises(SimError, match="race") as info:
        manual_add()[None, 1](x, y, z, "mte2_to_v")
    assert "TADD" in str(info.value) and "TLOAD" in str(info.value)


def test_auto_sync_double_buffered_add_is_race_free_with_tails():
    import add
    x = torch.randn(200, 300, dtype=torch.float16)      # row and column tails, odd tile counts
    y = torch.randn(200, 300, dtype=torch.float16)
    z = torch.zeros_like(x)
    add.add_kernel[None, 3](x, y, z)
    torch.testing.assert_close(z[:128, :256], (x + y)[:128, :256])  # the kernel covers whole tiles


def test_auto_sync_gives_each_double_buffer_slot_its_own_events():
    import add
    x = torch.zeros(256, 512, dtype=torch.float16)
    compiled = add.add_kernel.compile(x, x, x)
    assert compiled.events["add_kernel_aiv"] == {"V->MTE2": 2, "MTE3->V": 2, "MTE2->V": 2, "V->MTE3": 2}
    body = compiled.kernel.blocks[0].body
    # the "slot free" tokens are set once before the loops and drained once after them
    assert [type(s).__name__ for s in body[:4]] == ["SetFlag"] * 4
    assert [type(s).__name__ for s in body[-4:]] == ["WaitFlag"] * 4


def test_every_set_is_waited_on_every_path():
    """Walk all paths of the structured program: per event, sets and waits alternate and balance."""
    import matmul
    a = torch.zeros(200, 300, dtype=torch.float16)
    compiled = matmul.matmul_kernel.compile(a, a.T.contiguous(), torch.zeros(200, 200))
    block = compiled.kernel.blocks[0]
    from pypto.ir.block import For, If

    def paths(stmts, prefix):
        if not stmts:
            yield prefix
            return
        head, rest = stmts[0], stmts[1:]
        if isinstance(head, If):
            for branch in (head.then_body, head.else_body):
                yield from paths(list(branch) + list(rest), prefix)
        elif isinstance(head, For):             # zero, one and two trips
            for n in (0, 1, 2):
                yield from paths(list(head.body) * n + list(rest), prefix)
        else:
            yield from paths(rest, prefix + [head])

    count = 0
    for path in paths(list(block.body), []):
        live = set()
        for s in path:
            key = (s.src, s.dst, s.event) if isinstance(s, (SetFlag, WaitFlag)) else None
            if isinstance(s, SetFlag):
                assert key not in live, f"{key} set twice"
                live.add(key)
            elif isinstance(s, WaitFlag):
                assert key in live, f"{key} waited without a set"
                live.remove(key)
        assert not live
        count += 1
        if count > 400:
            break
    assert count > 10


def test_event_limit_is_checked():
    """Ten tiles handed from V to MTE3 in straight-line code need ten live events: more than the
    machine's eight: the allocator serialises (a barrier before reusing an id) and the answer is right; eight fit."""
    def many(x: pl.Tensor[[pl.DYNAMIC, 128], F16], z: pl.Tensor[[pl.DYNAMIC, 128], F16], n):
        t = pl.TileType([16, 128], F16, VEC)
        tiles = [pl.make_tile(t, addr=i * 0x1000) for i in range(n)]
        with pl.section_vector():
            for i in range(n):
                pl.load_tile(tiles[i], x, [i, 0])
            for i in range(n):
                pl.abs(tiles[i], tiles[i])
                pl.store_tile(z, tiles[i], [i, 0])
    x = torch.randn(160, 128, dtype=torch.float16)
    z = torch.zeros_like(x)
    k = pl.jit(many)
    k[None, 1](x, z, 10)              # ten live events on eight ids: serialised (event_alloc's last resort)
    torch.testing.assert_close(z, x.abs())
    z.zero_()
    k[None, 1](x, z, 8)
    torch.testing.assert_close(z[:128], x[:128].abs())
    assert max(k.compile(x, z, 8).events["many_aiv"].values()) == 8


def test_if_elif_else_with_runtime_conditions():
    def branches(x: pl.Tensor[[pl.DYNAMIC, 128], F16], z: pl.Tensor[[pl.DYNAMIC, 128], F16]):
        t = pl.TileType([64, 128], F16, VEC)
        a = pl.make_tile(t, addr=0)
        c = pl.make_tile(t, addr=0x4000)
        with pl.section_vector():
            for i in pl.range(x.shape[0] // 64):
                pl.load_tile(a, x, [i, 0])
                if i % 3 == 0:
                    pl.add(c, a, 1.0)
                elif i % 3 == 1:
                    pl.mul(c, a, 2.0)
                else:
                    pl.neg(c, a)
                pl.store_tile(z, c, [i, 0])
    x = torch.randn(320, 128, dtype=torch.float16)
    z = torch.zeros_like(x)
    pl.jit(branches)[None, 1](x, z)
    ref = torch.cat([(x[i * 64:(i + 1) * 64].float() + 1 if i % 3 == 0 else
                      (x[i * 64:(i + 1) * 64].float() * 2 if i % 3 == 1 else -x[i * 64:(i + 1) * 64].float()))
                     for i in range(5)]).half()
    torch.testing.assert_close(z, ref)


def deep_fifo_kernel(order):
    """The vectors hand 9 row blocks of x to the cube through a 9-slot GM workspace group (more slots than
    flag pairs: one counting full/empty pair for the group); the cube computes y = x @ w block by block.
    ``order``: the slot order the vectors write in (the cube reads 0, 1, ...)."""
    def deep_fifo(x: pl.Tensor[[144, 16], F16], w: pl.Tensor[[16, 16], F16],
                  y: pl.Tensor[[144, 16], pl.DT_FP32], vec_order):
        ws = pl.make_tile_group(pl.TileType([16, 16], F16, pl.MemorySpace.GM), depth=9)
        xv = pl.make_tile(pl.TileType([8, 16], F16, VEC), addr=0x0)
        x1 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Mat), addr=0x0)
        w1 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Mat), addr=0x1000)
        x0 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Left), addr=0x0)
        w0 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Right), addr=0x0)
        c0 = pl.make_tile(pl.TileType([16, 16], pl.DT_FP32, pl.MemorySpace.Acc), addr=0x0)
        with pl.section_vector():
            row0 = pl.get_subblock_idx() * 8
            for i in vec_order:
                pl.load(xv, x, [i * 16 + row0, 0])
                pl.store(ws[i], xv, [row0, 0])
        with pl.section_cube():
            pl.load(w1, w, [0, 0])
            pl.move(w0, w1)
            for i in range(9):
                pl.load(x1, ws[i])
                pl.move(x0, x1)
                pl.matmul(c0, x0, w0)
                pl.store(y, c0, [i * 16, 0])
    return pl.jit(deep_fifo, name=f"deep_fifo_{''.join(map(str, order))}")


def test_deep_workspace_fifo_shares_a_counting_flag_pair():
    torch.manual_seed(0)
    x, w = torch.randn(144, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16)
    y = torch.zeros(144, 16)
    kernel = deep_fifo_kernel(list(range(9)))
    kernel[None, 1](x, w, y, list(range(9)))
    torch.testing.assert_close(y, x.float() @ w.float(), rtol=1e-3, atol=1e-3)
    flags = {s.flag for b in kernel.compile(x, w, y, list(range(9))).kernel.blocks for s in walk(b.body)
             if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag))}
    assert flags == {0, 1}


def test_deep_workspace_fifo_in_another_order_is_caught_as_a_gm_race():
    x, w = torch.randn(144, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16)
    order = [1, 0] + list(range(2, 9))
    with pytest.raises(SimError, match="race on GM"):
        deep_fifo_kernel(order)[None, 1](x, w, torch.zeros(144, 16), order)


def workspace_reuse_kernel(mode: str):
    """The vectors hand row blocks of x to the cube through a 2-slot GM workspace group; the cube computes
    y = x @ w. ``mode`` "pairs": each cube iteration takes two slots and reads the older one again through
    previous() after the newer next() (one iteration, legal); "across": each iteration takes one slot and
    also reads previous(), the slot an earlier iteration acquired (refused at compile time)."""
    def ws_reuse(x: pl.Tensor[[pl.DYNAMIC, 16], F16], w: pl.Tensor[[16, 16], F16],
                 y: pl.Tensor[[pl.DYNAMIC, 16], pl.DT_FP32], mode: str):
        ws = pl.make_tile_group(pl.TileType([16, 16], F16, pl.MemorySpace.GM), depth=2)
        xv = pl.make_tile(pl.TileType([8, 16], F16, VEC), addr=0x0)
        x1 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Mat), addr=0x0)
        w1 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Mat), addr=0x1000)
        x0 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Left), addr=0x0)
        w0 = pl.make_tile(pl.TileType([16, 16], F16, pl.MemorySpace.Right), addr=0x0)
        c0 = pl.make_tile(pl.TileType([16, 16], pl.DT_FP32, pl.MemorySpace.Acc), addr=0x0)
        with pl.section_vector():
            row0 = pl.get_subblock_idx() * 8
            for i in pl.range(x.shape[0] // 16):
                pl.load(xv, x, [i * 16 + row0, 0])
                pl.store(ws.next(), xv, [row0, 0])
        with pl.section_cube():
            pl.load(w1, w, [0, 0])
            pl.move(w0, w1)
            if mode == "pairs":
                for i in pl.range(x.shape[0] // 32):
                    ws.next()
                    pl.load(x1, ws.next())
                    pl.move(x0, x1)
                    pl.matmul(c0, x0, w0)
                    pl.store(y, c0, [i * 32 + 16, 0])
                    pl.load(x1, ws.previous())          # the older slot, acquired in this iteration
                    pl.move(x0, x1)
                    pl.matmul(c0, x0, w0)
                    pl.store(y, c0, [i * 32, 0])
            else:
                for i in pl.range(x.shape[0] // 16):
                    pl.load(x1, ws.next())
                    pl.move(x0, x1)
                    pl.load(x1, ws.previous())          # the slot of the previous iteration
                    pl.matmul(c0, x0, w0)
                    pl.store(y, c0, [i * 16, 0])
    return ws_reuse


@pytest.mark.parametrize("rows", [64, 96])
def test_workspace_previous_after_next_in_one_iteration(rows):
    torch.manual_seed(1)
    x, w = torch.randn(rows, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16)
    y = torch.zeros(rows, 16)
    pl.jit(workspace_reuse_kernel("pairs"))[None, 1](x, w, y, "pairs")
    torch.testing.assert_close(y, x.float() @ w.float(), rtol=1e-3, atol=1e-3)


def test_workspace_slot_of_an_earlier_iteration_is_refused_with_a_caret():
    """previous() after a newer next() reaching back into the previous iteration used to deadlock in the
    simulator (the reader took the slot's `full` flag twice per writer set)."""
    fn = workspace_reuse_kernel("across")
    x, w = torch.randn(64, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16)
    with pytest.raises(pl.ParseError, match="used outside the statement list where it was acquired") as info:
        pl.jit(fn).compile(x, w, torch.zeros(64, 16), "across")
    lines, first = inspect.getsourcelines(fn)
    line = next(first + i for i, s in enumerate(lines) if "the slot of the previous iteration" in s)
    col = lines[line - first].index("ws.previous()")
    assert (info.value.span.line, info.value.span.col) == (line, col)
    assert "^" in str(info.value)
