"""The training-recipe options of the model group: label smoothing, flip test-time augmentation
and a scheduler stepped per optimizer step. Each is checked against a second computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, compose_config

from multigpu.models.classifier import ImageClassifier
from multigpu.run.training import train

NET = {"_target_": "multigpu.models.resnet18", "width": 4, "init_std": None}
SGD = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}
SYNTHETIC = ["data=synthetic", "data.num_train=256", "data.num_test=32", "data.batch_size=64"]


def classifier(**options) -> ImageClassifier:
    torch.manual_seed(0)
    return ImageClassifier(net=NET, optimizer=SGD, **options)


def batch(size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(size, 1, 28, 28, generator=generator), torch.arange(size) % 10


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_spreads_the_targets_of_the_training_loss(smoothing, monkeypatch):
    module = classifier(label_smoothing=smoothing)
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
    images, labels = batch()
    loss = module.training_step((images, labels), 0)
    log_p = F.log_softmax(module.net(images), dim=1)
    targets = torch.full_like(log_p, smoothing / 10)
    targets[torch.arange(len(labels)), labels] += 1 - smoothing
    assert loss.item() == pytest.approx(-(targets * log_p).sum(1).mean().item(), rel=1e-5)


def test_flip_tta_predicts_from_the_mean_of_both_views(monkeypatch):
    module = classifier(tta_flip=True).eval()
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
    images, labels = batch(64)
    with torch.no_grad():
        predicted = module.evaluate((images, labels), "test")
        both = module.net(images) + module.net(images.flip(-1))
        plain = module.net(images).argmax(1)
    assert torch.equal(predicted, both.argmax(1))
    assert not torch.equal(predicted, plain)  # the mirror view does change some predictions


def cosine_steps(tmp_path, epochs: int, extra: list[str]) -> list[float]:
    log = tmp_path / "lr.txt"
    tmp_path.mkdir()
    overrides = [*TINY, *SYNTHETIC, f"trainer.max_epochs={epochs}", "model.optimizer.lr=0.1"]
    overrides += ["+model/scheduler=cosine", "model.scheduler.T_max=3"]
    overrides += ["model.scheduler_interval=step", *extra]
    overrides += ["+callbacks.lr._target_=probes.StepLr", f"+callbacks.lr.path={log}"]
    assert train(compose_config(overrides, tmp_path / "run"))["status"] == "completed"
    return [float(line) for line in log.read_text().split()]


@pytest.mark.slow
def test_a_per_step_cosine_decays_every_step_over_t_max_epochs_and_resumes_on_its_curve(
    tmp_path,
):
    """T_max=3 epochs of 4 steps: lr 0.1 (1 + cos(pi s / 12)) / 2 at step s. A run stopped
    after an epoch and resumed goes on along the same curve."""
    expected = [0.1 * (1 + math.cos(math.pi * s / 12)) / 2 for s in range(12)]
    assert cosine_steps(tmp_path / "whole", 3, []) == pytest.approx(expected, rel=1e-9)
    assert cosine_steps(tmp_path / "part", 1, []) == pytest.approx(expected[:4], rel=1e-9)
    last = tmp_path / "part" / "run" / "checkpoints" / "last.ckpt"
    rest = cosine_steps(tmp_path / "rest", 3, [f"ckpt_path={last}"])
    assert rest == pytest.approx(expected[4:], rel=1e-9)


def test_weight_decay_on_weights_leaves_norms_and_biases_undecayed(monkeypatch):
    """One plain SGD step (lr 0.1, weight decay 0.5): convolution and linear weights move by
    lr x (grad + 0.5 w), BatchNorm scales and shifts and biases by lr x grad alone."""
    sgd = {**SGD, "weight_decay": 0.5}
    module = ImageClassifier(net=NET, optimizer=sgd, weight_decay_on="weights")
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
    optimizer = module.configure_optimizers()
    before = {name: p.detach().clone() for name, p in module.net.named_parameters()}
    module.training_step(batch(), 0).backward()
    grads = {name: p.grad.clone() for name, p in module.net.named_parameters()}
    optimizer.step()
    decayed = set()
    for name, p in module.net.named_parameters():
        expected = before[name] - 0.1 * grads[name]
        if p.ndim > 1:
            expected -= 0.1 * 0.5 * before[name]
            decayed.add(name.rsplit(".", 1)[-1])
        assert torch.allclose(p.detach(), expected, atol=1e-6), name
    assert decayed == {"weight"}  # and every bias, BatchNorm weight and shift undecayed
    everything = ImageClassifier(net=NET, optimizer=sgd).configure_optimizers()
    assert [g["weight_decay"] for g in everything.param_groups] == [0.5]


@pytest.mark.parametrize("tta_flip", [True, False])
def test_eval_evaluates_a_checkpoint_the_way_its_training_did(tta_flip, tmp_path):
    """eval.py's module follows the run's model.tta_flip: the same test accuracy as reported."""
    from multigpu.storage.checkpoint import classifier, load_checkpoint

    overrides = [*TINY, *SYNTHETIC, f"model.tta_flip={str(tta_flip).lower()}"]
    assert train(compose_config(overrides, tmp_path / "run"))["status"] == "completed"
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert classifier(load_checkpoint(path), path).tta_flip is tta_flip
