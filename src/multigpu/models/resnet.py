"""ResNet-18 in the small-image form of *Dive into Deep Learning* (3x3 stem, no max-pool)."""

from __future__ import annotations

from torch import Tensor, nn

from multigpu.config.names import NORMS, Norm


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"model.net.norm={kind!r} is not known: use one of {', '.join(NORMS)}")


class Residual(nn.Module):
    """Two 3x3 convolutions with a skip connection; a 1x1 conv reshapes the skip when needed."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, norm: Norm = "batch"):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn1 = _norm(norm, out_channels)
        self.bn2 = _norm(norm, out_channels)
        self.shortcut = (
            nn.Conv2d(in_channels, out_channels, 1, stride=stride)
            if stride != 1 or in_channels != out_channels
            else None
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(y + skip)


def _stage(in_channels: int, out_channels: int, downsample: bool, norm: Norm) -> nn.Sequential:
    stride = 2 if downsample else 1
    return nn.Sequential(
        Residual(in_channels, out_channels, stride=stride, norm=norm),
        Residual(out_channels, out_channels, norm=norm),
    )


class ResNet(nn.Sequential):
    """The layers in order, with a ``forward`` of this project's own: ``torch.compile`` starts
    tracing at the network's own frame and inlines every block into one graph. Dynamo skips
    frames of torch's own files, and in torch 2.11 that included ``nn.Sequential.forward``: the
    first H100 run compiled each ``Residual.forward`` as a graph of its own, recompiling it for
    every block width until dynamo's recompile limit (8), past which the blocks ran eagerly."""

    def forward(self, x: Tensor) -> Tensor:
        for layer in self:
            x = layer(x)
        return x


def _init_normal(module: nn.Module, std: float) -> None:
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        nn.init.normal_(module.weight, std=std)  # biases keep PyTorch's default, as in d2l


def resnet18(
    num_classes: int = 10,
    in_channels: int = 1,
    width: int = 64,
    norm: Norm = "batch",
    init_std: float | None = 0.01,
    zero_init_residual: bool = False,
) -> ResNet:
    """The d2l ResNet-18; ``width`` scales every stage (width, 2w, 4w, 8w channels).

    ``norm="none"`` drops BatchNorm so that data-parallel runs match one device exactly;
    ``init_std`` reproduces d2l's normal init (``None`` keeps PyTorch's default);
    ``zero_init_residual`` starts the last BatchNorm scale of every residual block at 0, so each
    block starts as the identity (Goyal et al. 2017, "Accurate, Large Minibatch SGD", 5.1).
    """
    if not isinstance(width, int) or width <= 0:
        raise ValueError(f"model.net.width={width!r} must be a positive integer, e.g. 64")
    if norm not in NORMS:
        raise ValueError(f"model.net.norm={norm!r} is not known: use one of {', '.join(NORMS)}")
    w = width
    net = ResNet(
        nn.Conv2d(in_channels, w, 3, padding=1),
        _norm(norm, w),
        nn.ReLU(inplace=True),
        _stage(w, w, downsample=False, norm=norm),
        _stage(w, 2 * w, downsample=True, norm=norm),
        _stage(2 * w, 4 * w, downsample=True, norm=norm),
        _stage(4 * w, 8 * w, downsample=True, norm=norm),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8 * w, num_classes),
    )
    if init_std is not None:
        net.apply(lambda m: _init_normal(m, init_std))
    if zero_init_residual:
        for block in net.modules():
            if isinstance(block, Residual) and isinstance(block.bn2, nn.BatchNorm2d):
                nn.init.zeros_(block.bn2.weight)
    return net
