"""aten.convolution (1-D and 2-D, not transposed) and inference batch norm as pypto ops: the rules'
conversions (pypto/fx/rules.py registers them).

A convolution is an im2col product: the input is padded (its stride's spare rows too), each kernel
tap's window ``x[..., i*d : i*d + s*OH : s, j*d : j*d + s*OW : s]`` is a box of it (a stride > 1 reads
the box's rows as [OH, s] and keeps the first of each), the windows are concatenated along the
channels into [N, taps * C, OH * OW], and one matmul by the weight's taps side by side ([O, taps * C],
the same order) gives [N, O, OH * OW] (per group, the groups' results concatenated). Depthwise
convolutions (groups == in == out channels) weight each window elementwise instead. fp16 / bf16
accumulate in fp32, as torch's CPU kernels do, and round once at the end.

Batch norm in eval mode is ``x * scale + shift`` per channel (dim 1) with ``scale = weight /
sqrt(running_var + eps)`` and ``shift = bias - running_mean * scale``, in fp32."""
from __future__ import annotations

from .. import dtypes, symbolic as sym
from ..frontend import api
from .meta import ConversionError, Lazy


def _box(x, dim: int, offset, length):
    offsets, shape = [0] * x.ndim, list(x.shape)
    offsets[dim], shape[dim] = offset, length
    return api.emit("view", [x], {"offsets": tuple(offsets), "shape": tuple(shape)})


def _strided(x, dim: int, start, count, stride: int):
    """x[start : start + stride * count : stride] along ``dim`` (x holds at least start + stride * count)."""
    if stride == 1:
        return _box(x, dim, start, count)
    box = _box(x, dim, start, sym.simplify(stride * count))
    shape = list(box.shape)
    shape[dim:dim + 1] = [count, stride]
    rows = _box(api.reshape(box, shape), dim + 1, 0, 1)
    del shape[dim + 1]
    return api.reshape(rows, shape)


def convolution_accepts(a) -> str | None:
    if a.get("transposed"):
        return "transposed convolution"
    if any(p != 0 for p in a.get("output_padding") or ()):
        return "convolution with output_padding"
    w = a.get("weight")
    wv = w.meta.get("val") if hasattr(w, "meta") else None
    if wv is None or wv.dim() not in (3, 4):
        return "convolution other than 1-D or 2-D"
    if not all(isinstance(d, int) for d in wv.shape):
        return "convolution with a dynamic weight shape"
    for k in ("stride", "padding", "dilation"):
        v = a.get(k)
        if not all(isinstance(p, int) and p >= 0 for p in v):
            return f"convolution with {k}={v!r}"
    if not isinstance(a.get("groups"), int):
        return "convolution with symbolic groups"
    x = a.get("input")
    xv = x.meta.get("val") if hasattr(x, "meta") else None
    if xv is None or xv.dim() != wv.dim() or not isinstance(xv.shape[1], int):
        return "convolution of an unbatched input or over a dynamic channel count"
    return None


def convolution(cx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """aten.convolution.default for 1-D ([N, C, L]) and 2-D ([N, C, H, W]) inputs."""
    one_d = input.ndim == 3
    if one_d:          # a 1-D convolution is a 2-D one over a height of 1
        input = api.reshape(input, [input.shape[0], input.shape[1], 1, input.shape[2]])
        weight = api.reshape(weight, [weight.shape[0], weight.shape[1], 1, weight.shape[2]])
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    n, c_in = input.shape[0], input.shape[1]
    c_out, c_group, kh, kw = weight.shape
    if c_group * groups != c_in or c_out % groups:
        raise ConversionError(f"convolution: weight {list(weight.shape)} does not fit {c_in} input channels in "
                              f"{groups} group(s)")
    out_hw = cx.out_shape[2:] if not one_d else (1, cx.out_shape[2])
    acc = dtypes.float32 if input.dtype in (dtypes.float16, dtypes.bfloat16) else input.dtype
    x = _padded(api.cast(input, acc), padding, stride)
    w = api.cast(weight, acc)
    taps = [(i, j) for i in range(kh) for j in range(kw)]

    def window(i, j):
        rows = _strided(x, 2, i * dilation[0], out_hw[0], stride[0])
        return _strided(rows, 3, j * dilation[1], out_hw[1], stride[1])

    if groups == c_in and c_out == c_in:
        y = None
        for i, j in taps:       # [N, C, OH, OW] * [C, 1, 1]
            term = api.mul(window(i, j), api.reshape(_tap(w, i, j), [c_out, 1, 1]))
            y = term if y is None else api.add(y, term)
    else:
        cols = [window(i, j) for i, j in taps]
        cols = api.concat(cols, 1) if len(cols) > 1 else cols[0]               # [N, taps * C, OH, OW]
        length = sym.simplify(out_hw[0] * out_hw[1])
        cols = api.reshape(cols, [n, len(taps) * c_in, length])
        o_group = c_out // groups
        parts = []
        for g in range(groups):
            wg = [_box(_tap(w, i, j), 0, g * o_group, o_group) for i, j in taps]   # [O/g, C/g] each
            wg = api.concat(wg, 1) if len(wg) > 1 else wg[0]                   # [O/g, taps * C/g]
            xg = cols if groups == 1 else api.concat(
                [_box(cols, 1, t * c_in + g * c_group, c_group) for t in range(len(taps))], 1)
            parts.append(api.matmul(wg, xg))                                  # [N, O/g, OH * OW]
        y = api.concat(parts, 1) if len(parts) > 1 else parts[0]
        y = api.reshape(y, [n, c_out, out_hw[0], out_hw[1]])
    if bias is not None:
        y = api.add(y, api.reshape(api.cast(bias, acc), [c_out, 1, 1]))
    if one_d:
        y = api.reshape(y, [n, c_out, out_hw[1]])
    return api.cast(y, cx.out_dtype)


def _tap(w, i, j):
    """weight[:, :, i, j]: [O, C/g]."""
    box = _box(_box(w, 2, i, 1), 3, j, 1)
    return api.reshape(box, [w.shape[0], w.shape[1]])


def _padded(x, padding, stride):
    """x padded by ``padding`` and, below / right of it, by stride - 1 more: a strided window's box
    (stride * out rows from its tap) may run that far past the padded input."""
    amounts = []
    for k in (1, 0):       # pypto.pad takes (left, right) pairs from the last dim
        amounts += [padding[k], padding[k] + stride[k] - 1]
    if not any(amounts):
        return x
    return api.pad(x, tuple(amounts), value=0)


def batch_norm_accepts(a) -> str | None:
    x = a.get("input")
    xv = x.meta.get("val") if hasattr(x, "meta") else None
    if xv is None or xv.dim() < 2 or not isinstance(xv.shape[1], int):
        return "batch norm over a dynamic channel count or of a 1-D input"
    if not isinstance(a.get("eps"), (int, float)):
        return f"batch norm with eps={a.get('eps')!r}"
    return None


def batch_norm(cx, input, weight, bias, running_mean, running_var, momentum, eps):
    """aten._native_batch_norm_legit_no_training -> (out, empty, empty); the two empty results (the
    saved statistics training would use) cannot be used."""

    def out():
        stats = dtypes.float32 if input.dtype in (dtypes.float16, dtypes.bfloat16) else input.dtype
        c = input.shape[1]
        mean, var = api.cast(running_mean, stats), api.cast(running_var, stats)
        scale = api.rsqrt(api.add(var, float(eps)))
        if weight is not None:
            scale = api.mul(scale, api.cast(weight, stats))
        shift = api.mul(mean, scale)
        shift = api.sub(api.cast(bias, stats), shift) if bias is not None else \
            api.neg(shift)
        per_channel = [c] + [1] * (input.ndim - 2)
        y = api.mul(api.cast(input, stats), api.reshape(scale, per_channel))
        return api.add(y, api.reshape(shift, per_channel))      # cast to torch's dtype by the getitem

    def unused():
        raise ConversionError("batch norm's saved statistics (empty in eval mode) are used")
    return Lazy([out, unused, unused])
