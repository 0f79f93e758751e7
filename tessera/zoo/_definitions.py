"""Torch definitions of the bundled models, with random weights. Sizes are parameters, so the
same code gives the small test versions and the full-size benchmark versions."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (64, 256, 256, 10)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return F.softmax(x, dim=-1)


# -- ResNet -----------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, depths: tuple[int, ...] = (3, 4, 6, 3), base: int = 64,
                 classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        cin = base
        for stage, depth in enumerate(depths):
            width = base * 2**stage
            for i in range(depth):
                blocks.append(Bottleneck(cin, width, 2 if i == 0 and stage > 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- MobileNetV2 / EfficientNet-like --------------------------------------------------------
class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int, se: bool = False,
                 act: type[nn.Module] = nn.ReLU6) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), act()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), act()]
        if se:
            layers.append(SqueezeExcite(hidden, max(1, cin // 4)))
        layers += [nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MobileNetV2(nn.Module):
    # (expand, channels, repeats, stride)
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, width: float = 1.0, classes: int = 1000, se: bool = False,
                 act: type[nn.Module] = nn.ReLU6, settings: Any = None) -> None:
        super().__init__()
        c = max(8, int(32 * width))
        layers: list[nn.Module] = [nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), act()]
        for t, ch, n, s in settings or self.SETTINGS:
            out = max(8, int(ch * width))
            for i in range(n):
                layers.append(InvertedResidual(c, out, s if i == 0 else 1, t, se, act))
                c = out
        last = max(8, int(1280 * width))
        layers += [nn.Conv2d(c, last, 1, bias=False), nn.BatchNorm2d(last), act()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# -- transformers -----------------------------------------------------------------------------
class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, causal: bool, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.causal = causal
        if causal:
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, h // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        if self.causal:
            mask: torch.Tensor = self.mask  # type: ignore[assignment]
            scores = scores.masked_fill(~mask[:s, :s], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, h))


class TransformerBlock(nn.Module):
    """Post-norm (BERT) or pre-norm (GPT-2) encoder/decoder block."""

    def __init__(self, hidden: int, heads: int, seq: int, causal: bool, pre_norm: bool) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads, causal, seq)
        self.ln1 = nn.LayerNorm(hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, 4 * hidden)
        self.ff2 = nn.Linear(4 * hidden, hidden)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.ff2(F.gelu(self.ff1(self.ln2(x)), approximate="tanh"))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Transformer(nn.Module):
    """BERT-like encoder (token ids in, hidden states out) or GPT-2-like decoder (logits)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, seq: int = 128,
                 vocab: int = 30522, causal: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.randn(1, seq, hidden) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(hidden, heads, seq, causal, causal)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False) if causal else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return self.head(x) if self.head is not None else x


class GPT2Block(nn.Module):
    """One GPT-2 decoder block with its causal mask, on hidden states."""

    def __init__(self, hidden: int = 768, heads: int = 12, seq: int = 128) -> None:
        super().__init__()
        self.block = TransformerBlock(hidden, heads, seq, causal=True, pre_norm=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


# -- ViT, ConvNeXt, UNet, hybrid --------------------------------------------------------------
class PreNormEncoder(nn.Module):
    """Learned positions, pre-norm encoder blocks, a final norm and a classifier on the pooled
    tokens (the first one, or their mean)."""

    def __init__(self, tokens: int, hidden: int, layers: int, heads: int, classes: int,
                 pool: str) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, tokens, hidden) * 0.02)
        self.blocks = nn.Sequential(*(TransformerBlock(hidden, heads, tokens, False, True)
                                      for _ in range(layers)))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.blocks(x + self.pos))
        return self.head(x[:, 0] if self.pool == "first" else x.mean(1))


class ViT(nn.Module):
    """ViT-like: 16x16 patches, a class token, pre-norm encoder blocks."""

    def __init__(self, image: int = 224, patch: int = 16, hidden: int = 768, layers: int = 12,
                 heads: int = 12, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.encoder = PreNormEncoder((image // patch) ** 2 + 1, hidden, layers, heads, classes,
                                      "first")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.encoder(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1))


class ChannelNorm(nn.Module):
    """LayerNorm over the channels of an NCHW tensor."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.scale * self.down(F.gelu(self.up(y)))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, depths: tuple[int, ...] = (2, 2, 6, 2),
                 dims: tuple[int, ...] = (64, 128, 256, 512), classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), ChannelNorm(dims[0])]
        for stage, (depth, dim) in enumerate(zip(depths, dims, strict=True)):
            if stage:
                layers += [ChannelNorm(dims[stage - 1]), nn.Conv2d(dims[stage - 1], dim, 2, 2)]
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1])
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.features(x).mean((2, 3))))


def _double_conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """UNet-like: an encoder, bilinear upsampling (Resize) and skip connections (Concat)."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 256), classes: int = 2) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = 3
        for width in widths:
            self.down.append(_double_conv(cin, width))
            cin = width
        self.up = nn.ModuleList(_double_conv(widths[i + 1] + widths[i], widths[i])
                                for i in reversed(range(len(widths) - 1)))
        self.out = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for block, skip in zip(self.up, reversed(skips[:-1]), strict=True):
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], dim=1))
        return self.out(x)


class Hybrid(nn.Module):
    """A CNN stem (ResNet bottlenecks to stride 16) feeding a transformer encoder."""

    def __init__(self, image: int = 224, hidden: int = 256, layers: int = 4, heads: int = 8,
                 classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1), Bottleneck(32, 16, 1),
                                  Bottleneck(64, 32, 2), Bottleneck(128, 64, 2))
        self.project = nn.Conv2d(256, hidden, 1)
        self.encoder = PreNormEncoder((image // 16) ** 2, hidden, layers, heads, classes, "mean")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.project(self.stem(x)).flatten(2).transpose(1, 2))
