"""Qwen3-Next's MLPs as ``pypto.nn`` modules: the SwiGLU ``Qwen3NextMLP`` (the dense MLP and the shared
expert) and the sparse mixture-of-experts ``Qwen3NextSparseMoeBlock``.

The block runs as two pypto programs (``moe(hidden_states)`` outside a trace):

    dispatch  router logits, fp32 softmax, top-k (renormalised when norm_topk_prob), per-expert token
              counts and offsets, each (token, slot)'s row in expert order, the tokens permuted into it
    experts   the grouped SwiGLU matmul: for each expert e, counts[e] and offsets[e] are read at run time
              (data scalars) as the trip count and row offset of its row chunks (0 tokens: no chunk runs),
              into a scratch argument; then the unpermute and the weighted sum over the k slots in one
              kernel (unpermute.py: each slot's rows gathered by indexed DMA into an fp32 accumulator) and
              the gated shared expert

Two programs because the grouped matmul's trip counts are data the dispatch computes, and a data scalar
is read from an argument no task of its program writes (frontend/scalars.py). Inside an enclosing trace
(the block inlined into a model's forward) it takes the dense form instead: every expert on every token,
weighted by the top-k weight scattered into [N, E] (zero where not routed) — the same result, E / k times
the routed FLOPs; the run's report notes it.

State dict keys and layouts are transformers 5's (``gate.weight``, ``experts.gate_up_proj`` [E, 2I, H],
``experts.down_proj`` [E, H, I], ``shared_expert.*``, ``shared_expert_gate.weight``), so
``load_state_dict`` takes one layer's ``mlp.`` entries as they are and ``hf_state_dict`` gives them back.
"""
from __future__ import annotations

from typing import Optional

import torch

import pypto
import pypto.nn as nn
import pypto.nn.functional as F

from pypto.frontend.context import is_tracing, note

from .config import Qwen3NextConfig
from .unpermute import unpermute

ROWS_PER_CHUNK = 1024       # rows of one expert per loop iteration: at 4096 tokens x top-8 over 64 experts
                            # (~512 rows each) one chunk per expert; bench_moe 4096 tokens a2a3, gate and up
                            # fused, experts overlapping (their workspaces multi-buffered): 256 -> 0.65,
                            # 512 -> 0.68, 1024 -> 0.70 of the cube roofline (fewer, wider tasks)


DISPATCH_BLOCK = 128        # tokens per block of dispatch_plan's prefix scan


class Qwen3NextMLP(nn.Module):
    """down_proj(SiLU(gate_proj(x)) * up_proj(x)); ``intermediate_size`` defaults to the config's."""

    def __init__(self, config, intermediate_size: Optional[int] = None, dtype=torch.float32):
        super().__init__()
        c = self.config = Qwen3NextConfig.from_any(config)
        inter = c.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(c.hidden_size, inter, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(c.hidden_size, inter, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(inter, c.hidden_size, bias=False, dtype=dtype)

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return tuple(range(rank - 1))

    def forward(self, x):
        return swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)

    def hf_state_dict(self) -> dict:
        return dict(self.state_dict())


class Qwen3NextExperts(nn.Module):
    """The routed experts' weights as transformers stores them: gate_up_proj [E, 2I, H] (each expert's
    gate rows, then its up rows) and down_proj [E, H, I]."""

    def __init__(self, config, dtype=torch.float32):
        super().__init__()
        c = Qwen3NextConfig.from_any(config)
        E, H, I = c.num_experts, c.hidden_size, c.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, H, dtype=dtype))
        self.down_proj = nn.Parameter(torch.zeros(E, H, I, dtype=dtype))


class Qwen3NextSparseMoeBlock(nn.Module):
    """``moe(hidden_states [B, T, hidden]) -> [B, T, hidden]``; ``moe(x, return_router_logits=True)`` also
    gives the router logits [B * T, num_experts] as transformers' router does."""

    def __init__(self, config, dtype=torch.float32, rows_per_chunk: int = ROWS_PER_CHUNK):
        super().__init__()
        c = self.config = Qwen3NextConfig.from_any(config)
        self.rows_per_chunk = rows_per_chunk
        self.gate = nn.Linear(c.hidden_size, c.num_experts, bias=False, dtype=dtype)
        self.experts = Qwen3NextExperts(c, dtype=dtype)
        self.shared_expert = Qwen3NextMLP(c, c.shared_expert_intermediate_size, dtype=dtype)
        self.shared_expert_gate = nn.Linear(c.hidden_size, 1, bias=False, dtype=dtype)
        self._programs: dict = {}

    def hf_state_dict(self) -> dict:
        return dict(self.state_dict())

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return (1,) if arg == "hidden_states" else ()           # the sequence length T

    # ------------------------------------------------------------------ calling
    def __call__(self, hidden_states, return_router_logits: bool = False):
        if is_tracing():
            return super().__call__(hidden_states, return_router_logits)
        if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 3:
            raise pypto.ShapeError(f"{type(self).__name__}: hidden_states must be a [B, T, hidden] torch tensor, "
                                   f"found {getattr(hidden_states, 'shape', type(hidden_states).__name__)}")
        c = self.config
        B, T, H = hidden_states.shape
        if H != c.hidden_size:
            raise pypto.ShapeError(f"{type(self).__name__}: hidden_states' last dim is {H}, the config's "
                                   f"hidden_size is {c.hidden_size}")
        dispatch, experts = self._compiled(hidden_states.dtype)
        x = hidden_states.reshape(B * T, H)
        logits, weights, counts, offsets, rows, x_perm = dispatch(x, self.gate.weight.data)
        gate_up, down = self.experts.gate_up_proj.data, self.experts.down_proj.data
        out = experts(x, x_perm, counts, offsets, rows, weights, gate_up.reshape(-1, H), down.reshape(-1, down.shape[-1]),
                      self.shared_expert.gate_proj.weight.data,
                      self.shared_expert.up_proj.weight.data, self.shared_expert.down_proj.weight.data,
                      self.shared_expert_gate.weight.data, x_perm.new_empty(x_perm.shape))
        self.last_reports = (dispatch.last_report, experts.last_report)
        out = out.reshape(B, T, H)
        return (out, logits) if return_router_logits else out

    def forward(self, hidden_states, return_router_logits: bool = False):
        """The dense form, for a block traced inside another program (see the module docstring)."""
        c = self.config
        note(f"{type(self).__name__}: dense experts inside an enclosing trace ({c.num_experts} experts on every "
             f"token; the grouped matmul needs its counts from a separate dispatch program)")
        shape = hidden_states.shape
        x = pypto.reshape(hidden_states, [shape[0] * shape[1], shape[2]])
        logits, weights, ids = route(x, self.gate.weight, c.num_experts_per_tok, c.norm_topk_prob)
        dense = pypto.sum(pypto.cast(F.one_hot(ids, c.num_experts), weights.dtype) * pypto.unsqueeze(weights, -1), 1)    # [N, E]
        I = c.moe_intermediate_size
        out = shared_expert(x, self.shared_expert.gate_proj.weight, self.shared_expert.up_proj.weight,
                            self.shared_expert.down_proj.weight, self.shared_expert_gate.weight)
        for e in range(c.num_experts):
            w = self.experts.gate_up_proj[e]
            y = swiglu(x, w[:I], w[I:], self.experts.down_proj[e])
            out = out + y * dense[:, e:e + 1]
        out = pypto.reshape(out, shape)
        return (out, logits) if return_router_logits else out

    # ------------------------------------------------------------------ the two programs
    def _compiled(self, tdt: torch.dtype):
        opts = self._compile_options
        key = (tdt, opts.get("backend"), opts.get("machine"), opts.get("timing_only"))
        if key not in self._programs:
            self._programs[key] = build_programs(self.config, pypto.dtypes.from_torch(tdt), self.rows_per_chunk,
                                                 backend=opts.get("backend"), machine=opts.get("machine"),
                                                 dump=opts.get("dump"), timing_only=bool(opts.get("timing_only")))
        return self._programs[key]

    def compile(self, *, backend=None, machine=None, dump=None, timing_only: bool = False, **kwargs):
        out = super().compile(backend=backend, machine=machine, dump=dump, **kwargs)
        self._compile_options["timing_only"] = timing_only
        self._programs.clear()
        return out


# ---------------------------------------------------------------------- traced pieces
def swiglu(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def shared_expert(x, w_gate, w_up, w_down, w_shared_gate):
    return pypto.sigmoid(F.linear(x, w_shared_gate)) * swiglu(x, w_gate, w_up, w_down)


def route(x, router_weight, top_k: int, norm_topk_prob: bool):
    """(logits [N, E] in x's dtype, top-k weights [N, k] in x's dtype, expert ids [N, k] int64)."""
    logits = F.linear(x, router_weight)
    probs = F.softmax(pypto.cast(logits, pypto.float32), -1)
    top = pypto.topk(probs, top_k, -1)
    weights = top.values
    if norm_topk_prob:
        weights = weights / pypto.sum(weights, -1, keepdim=True)
    return logits, pypto.cast(weights, x.dtype), top.indices


def dispatch_plan(ids, num_experts: int, block: int = None):
    """From the expert ids [N, k]: counts [E] and offsets [E] (int32), each (token, slot)'s row in expert
    order ``rows`` [N * k] (int32; tokens keep their order inside an expert) and the token of each row
    ``token_of_row`` [N * k]. Linear in N: a token's k experts are distinct (top-k), so the row of (t, s)
    is offsets[e] plus the number of earlier tokens routed to e = ids[t, s], an exclusive prefix sum over
    tokens of the per-token one-hots [N, E], scanned in blocks of ``block`` tokens (a strictly
    lower-triangular [block, block] matmul per block, the blocks' totals carried by one more triangle of
    ceil(N / block) rows): O(N block E) + O((N / block)^2 E) instead of the [N k, N k] triangle's
    O((N k)^2 E). Then each (t, s) picks its expert's column (a gather along E), and the inverse
    permutation is a row scatter (MSCATTER). Counting is exact in fp32 up to 2^24 assignments."""
    block = DISPATCH_BLOCK if block is None else block
    N, k = ids.shape[0], ids.shape[1]
    f32 = pypto.float32
    hot = pypto.cast(F.one_hot(ids, num_experts), f32)                                    # [N, k, E]
    per_token = pypto.sum(hot, 1)                                                          # [N, E], 0/1
    nb = pypto.ceildiv(N, block)
    blocks = pypto.reshape(pypto.pad(per_token, (0, 0, 0, nb * block - N)), [nb, block, num_experts])
    within = pypto.matmul(pypto.tril(pypto.ones(block, block, dtype=f32), -1), blocks)     # [nb, block, E]
    totals = pypto.sum(blocks, 1)                                                          # [nb, E]
    # counts from the blocks' totals: a sum over N itself would put the one-hot work on one core
    counts = pypto.sum(totals, 0)                                                          # [E]
    offsets = pypto.cumsum(counts, 0) - counts
    carried = pypto.matmul(pypto.tril(pypto.ones(nb, nb, dtype=f32), -1), totals)          # [nb, E]
    before = pypto.reshape(within + pypto.unsqueeze(carried, 1), [nb * block, num_experts])
    base = pypto.view(before, [N, num_experts], [0, 0]) + pypto.unsqueeze(offsets, 0)      # [N, E]
    rows = pypto.cast(pypto.reshape(pypto.gather(base, 1, ids), [N * k]), pypto.int32)
    token = pypto.reshape(pypto.expand(pypto.unsqueeze(pypto.arange(N, dtype=pypto.int32), 1), [N, k]), [N * k])
    token_of_row = pypto.scatter(pypto.zeros(N * k, dtype=pypto.int32), 0, rows, token)
    return pypto.cast(counts, pypto.int32), pypto.cast(offsets, pypto.int32), rows, token_of_row


def grouped_swiglu(x_perm, counts, offsets, gate_up, down, out, rows_per_chunk: int):
    """out[offsets[e] : offsets[e] + counts[e]] = SwiGLU_e(x_perm's rows there) for every expert e, the
    counts and offsets read at run time; chunks of ``rows_per_chunk`` rows, the last one a tail.
    The experts' weights come stacked 2-D, gate_up [E * 2I, H] and down [E * H, I] (HF's 3-D tensors
    reshaped by the caller for free), so each expert's matrices are plain 2-D views: a view of a 3-D
    tensor reshaped to 2-D is a copy per expert."""
    E = counts.shape[0]
    H, I = down.shape[0] // E, down.shape[1]
    M = rows_per_chunk
    for e in pypto.loop(E):
        n = counts[e].item()
        start = offsets[e].item()
        w_gate_up = pypto.view(gate_up, [2 * I, H], [e * 2 * I, 0])
        w_down = pypto.view(down, [H, I], [e * H, 0])
        for i in pypto.loop(pypto.ceildiv(n, M)):
            xv = pypto.view(x_perm, [M, H], [start + i * M, 0], valid_shape=[pypto.min(M, n - i * M), H])
            h = F.linear(xv, w_gate_up)              # gate and up in one matmul: [rows, 2I]
            y = F.linear(F.silu(h[:, :I]) * h[:, I:], w_down)
            pypto.assemble(y, [start + i * M, 0], out)


def build_programs(config: Qwen3NextConfig, dt, rows_per_chunk: int = ROWS_PER_CHUNK, **jit_options):
    """(dispatch, experts): the block's two pypto.jit programs for activations of dtype ``dt``."""
    c = config
    H, E, k, I = c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size
    DYN = pypto.DYNAMIC

    # the dispatch's counts and offsets are the experts program's trip counts, data its control program reads:
    # computed even in a timing-only run (which would give meta tensors), so that the experts program can run
    dispatch_options = dict(jit_options, timing_only=False)

    @pypto.jit(name="moe_dispatch", **dispatch_options)
    def dispatch(x: pypto.Tensor[[DYN, H], dt], router_weight: pypto.Tensor[[E, H], dt]):
        logits, weights, ids = route(x, router_weight, k, c.norm_topk_prob)
        counts, offsets, rows, token_of_row = dispatch_plan(ids, E)
        x_perm = pypto.index_select(x, 0, token_of_row)
        return logits, weights, counts, offsets, rows, x_perm

    @pypto.jit(name="moe_experts", **jit_options)
    def experts(x: pypto.Tensor[[DYN, H], dt], x_perm: pypto.Tensor[[DYN, H], dt],
                counts: pypto.Tensor[[E], pypto.int32], offsets: pypto.Tensor[[E], pypto.int32],
                rows: pypto.Tensor[[DYN], pypto.int32], weights: pypto.Tensor[[DYN, k], dt],
                gate_up: pypto.Tensor[[E * 2 * I, H], dt], down: pypto.Tensor[[E * H, I], dt],
                shared_gate, shared_up, shared_down, shared_expert_gate, y_perm: pypto.Tensor[[DYN, H], dt]):
        # y_perm [N k, H]: the experts' rows in expert order, a scratch argument (every row is written; a
        # zeros of its own would be a 2 N k H-byte fill)
        N = x.shape[0]
        grouped_swiglu(x_perm, counts, offsets, gate_up, down, y_perm, rows_per_chunk)
        routed = unpermute(y_perm, pypto.reshape(rows, [N, k]), weights)         # fp32 [N, H]
        shared = shared_expert(x, shared_gate, shared_up, shared_down, shared_expert_gate)
        return pypto.cast(routed + pypto.cast(shared, pypto.float32), dt)

    return dispatch, experts


def build_block_program(config: Qwen3NextConfig, dt, rows_per_chunk: int = ROWS_PER_CHUNK, **jit_options):
    """The block as one pypto.jit program (dispatch and experts together): the experts' loops read the
    counts and offsets the same program computes (pypto.item of a computed tensor: the control program
    reads them once the dispatch's tasks are done). Returns (out, logits) for
    (x [N, H], router_weight, gate_up, down, the shared expert's weights, y_perm [N k, H] scratch).
    A timing-only run cannot read them (it computes no data): ``build_programs`` keeps the two programs."""
    c = config
    H, E, k, I = c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size
    DYN = pypto.DYNAMIC

    @pypto.jit(name="moe_block", **jit_options)
    def block(x: pypto.Tensor[[DYN, H], dt], router_weight: pypto.Tensor[[E, H], dt],
              gate_up: pypto.Tensor[[E * 2 * I, H], dt], down: pypto.Tensor[[E * H, I], dt],
              shared_gate, shared_up, shared_down, shared_expert_gate, y_perm: pypto.Tensor[[DYN, H], dt]):
        N = x.shape[0]
        logits, weights, ids = route(x, router_weight, k, c.norm_topk_prob)
        counts, offsets, rows, token_of_row = dispatch_plan(ids, E)
        x_perm = pypto.index_select(x, 0, token_of_row)
        grouped_swiglu(x_perm, counts, offsets, gate_up, down, y_perm, rows_per_chunk)
        routed = unpermute(y_perm, pypto.reshape(rows, [N, k]), weights)         # fp32 [N, H]
        shared = shared_expert(x, shared_gate, shared_up, shared_down, shared_expert_gate)
        return pypto.cast(routed + pypto.cast(shared, pypto.float32), dt), logits

    return block
