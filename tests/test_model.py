"""The d2l ResNet-18: shape, size, options."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from multigpu.models import resnet18


def count(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def expected_parameters(w: int, in_channels: int = 1, classes: int = 10, bn: bool = True) -> int:
    """Counted from the architecture's description, independently of the code."""
    conv = lambda cin, cout, k: cin * cout * k * k + cout  # noqa: E731
    norm = lambda c: 2 * c if bn else 0  # noqa: E731
    total = conv(in_channels, w, 3) + norm(w)
    cin = w
    for cout, down in ((w, False), (2 * w, True), (4 * w, True), (8 * w, True)):
        for block in range(2):
            first_in = cin if block == 0 else cout
            total += conv(first_in, cout, 3) + conv(cout, cout, 3) + 2 * norm(cout)
            if block == 0 and down:
                total += conv(cin, cout, 1)
        cin = cout
    return total + 8 * w * classes + classes


def test_full_width_has_about_11_2_million_parameters():
    net = resnet18()
    assert count(net) == expected_parameters(64)
    assert 11.1e6 < count(net) < 11.3e6


@pytest.mark.parametrize("width,norm", [(4, "batch"), (8, "none"), (16, "batch")])
def test_width_and_norm_scale_the_network(width, norm):
    net = resnet18(width=width, norm=norm)
    assert count(net) == expected_parameters(width, bn=norm == "batch")
    assert any(isinstance(m, nn.BatchNorm2d) for m in net.modules()) == (norm == "batch")


def test_no_max_pool_and_stride_one_stem():
    net = resnet18(width=4)
    assert not any(isinstance(m, nn.MaxPool2d) for m in net.modules())
    assert net[0].kernel_size == (3, 3) and net[0].stride == (1, 1)


def test_forward_backward_at_full_width():
    net = resnet18(num_classes=10)
    images = torch.randn(2, 1, 28, 28)
    logits = net(images)
    assert logits.shape == (2, 10)
    logits.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


def test_options_change_the_head_and_stem():
    net = resnet18(num_classes=7, in_channels=3, width=4)
    assert net(torch.randn(3, 3, 32, 32)).shape == (3, 7)


def test_init_std_sets_conv_and_linear_weights():
    torch.manual_seed(0)
    d2l = resnet18(width=16, init_std=0.01)
    default = resnet18(width=16, init_std=None)
    weights = torch.cat([m.weight.flatten() for m in d2l.modules() if isinstance(m, nn.Conv2d)])
    assert abs(weights.std().item() - 0.01) < 0.001
    first = default[0].weight
    assert abs(first.std().item() - 0.01) > 0.05  # PyTorch's kaiming-uniform, much wider


@pytest.mark.parametrize("kwargs", [{"width": 0}, {"width": -8}, {"norm": "layer"}])
def test_bad_options_say_which_value(kwargs):
    with pytest.raises(ValueError, match=f"model.net.{next(iter(kwargs))}"):
        resnet18(**kwargs)


def test_zero_init_residual_starts_each_block_as_the_identity():
    net = resnet18(width=4, zero_init_residual=True)
    blocks = [m for m in net.modules() if m.__class__.__name__ == "Residual"]
    assert len(blocks) == 8
    assert all(torch.equal(b.bn2.weight, torch.zeros_like(b.bn2.weight)) for b in blocks)
    assert all(torch.equal(b.bn1.weight, torch.ones_like(b.bn1.weight)) for b in blocks)
    x = torch.randn(3, 4, 8, 8).relu()
    first = blocks[0].eval()  # no shortcut conv: with bn2's scale at 0 the block passes x on
    torch.testing.assert_close(first(x), x.relu())
