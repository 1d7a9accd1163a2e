"""Conv1d over [batch, channels, time] (torch's layout and state-dict keys); see functional.conv1d."""
from __future__ import annotations

from . import functional as F, init
from .module import Module


class Conv1d(Module):
    """Depthwise causal (Qwen3-Next's short conv):
    ``Conv1d(C, C, K, groups=C, padding=K - 1, bias=False)`` then ``y[..., :T]``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding=0,
                 dilation: int = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros", dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            from ..errors import PyptoError
            raise PyptoError(f"Conv1d: only padding_mode='zeros' is supported, found {padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = kernel_size[0] if isinstance(kernel_size, (tuple, list)) else kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * self.kernel_size
        self.weight = init.uniform_fan_in((out_channels, in_channels // groups, self.kernel_size), fan_in, dtype)
        if bias:
            self.bias = init.uniform_fan_in((out_channels,), fan_in, dtype)
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return (0, 2) if rank == 3 else (rank - 1,)          # batch and time; channels are static

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, padding={self.padding}"
                + (f", dilation={self.dilation}" if self.dilation != 1 else "")
                + (f", groups={self.groups}" if self.groups != 1 else "")
                + ("" if self.bias is not None else ", bias=False"))
