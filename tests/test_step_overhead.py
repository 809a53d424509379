"""What the framework overhead is measured against, and what the training step still computes
once it logs nothing per step: the plain step does the same work as our Lightning step, the
epoch's training loss is the sample-weighted mean of its steps' losses, and the overhead tool
pairs its rounds. No time is asserted: docs/performance.md has the measured figures."""

from __future__ import annotations

import copy
import json

import pytest
import pytorch_lightning as pl
import torch
from conftest import REPO, TINY, compose_config, run_module
from pytorch_lightning import Callback
from torch.utils.data import DataLoader, TensorDataset

from multigpu.models.classifier import ImageClassifier
from multigpu.run.training import train
from multigpu.tools.bench.plain_loop import overhead_summary, plain_step

NET = {"_target_": "multigpu.models.resnet18", "width": 2, "init_std": None}
SGD = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1, "momentum": 0.9}


@pytest.mark.filterwarnings("ignore:You defined a `validation_step`")
def test_the_plain_step_does_what_our_lightning_step_does():
    """Two steps on the same batches from the same weights end with the same weights."""
    torch.manual_seed(0)
    module = ImageClassifier(net=NET, optimizer=SGD)
    net, initial = copy.deepcopy(module.net), copy.deepcopy(module.net.state_dict())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    images, labels = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    batches = DataLoader(TensorDataset(images, labels), batch_size=8)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, train_dataloaders=batches)
    for batch in batches:
        plain_step(net, optimizer, *batch)
    ours, plain = module.net.state_dict(), net.state_dict()
    for name in ours:
        torch.testing.assert_close(ours[name], plain[name], rtol=0, atol=1e-6, msg=name)
    moved = max((ours[n].float() - initial[n].float()).abs().max().item() for n in ours)
    assert moved > 1e-3  # two real steps, not two copies of the starting point


class StepLosses(Callback):
    """Each step's loss and batch size, as the training step returned them."""

    def __init__(self):
        self.steps: list[tuple[float, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append((outputs["loss"].item(), len(batch[1])))


def test_epoch_train_loss_is_the_sample_weighted_mean_of_its_steps(tmp_path, monkeypatch):
    """Accumulated on the device and logged once per epoch, it is still the mean over samples
    (the last batch is smaller), as a log of every step's loss with its batch size was."""
    losses = StepLosses()
    import multigpu.run.fit as fit

    build = fit.build_trainer
    monkeypatch.setattr(
        fit,
        "build_trainer",
        lambda node, callbacks, **kw: build(node, callbacks=[*callbacks, losses], **kw),
    )
    overrides = [*TINY, "data=synthetic", "data.num_train=72", "data.num_test=16"]
    record = train(compose_config([*overrides, "data.batch_size=16"], tmp_path))
    assert [n for _, n in losses.steps] == [16, 16, 16, 16, 8]
    weighted = sum(loss * n for loss, n in losses.steps) / sum(n for _, n in losses.steps)
    assert record["train_loss"] == pytest.approx(weighted, rel=1e-6)
    plain = sum(loss for loss, _ in losses.steps) / len(losses.steps)
    assert abs(weighted - plain) > 1e-6  # the weighting is seen


def test_the_overhead_is_the_median_of_paired_differences():
    """Paired within rounds: a round when the machine was slow (9 ms) moves both sides."""
    ours, plain = [3.0, 2.0, 9.0, 2.5], [1.0, 1.5, 2.0, 2.0]
    summary = overhead_summary(ours, plain, block=5)
    differences = [2.0, 0.5, 7.0, 0.5]
    assert summary["overhead_ms_each"] == differences
    assert summary["overhead_ms_per_step"] == pytest.approx((0.5 + 2.0) / 2)
    assert summary["overhead_ms_per_step"] != pytest.approx((2.5 + 3.0) / 2 - (1.5 + 2.0) / 2)
    assert summary["ratio"] == pytest.approx((4.0 / 3 + 3.0) / 2, rel=1e-3)
    assert summary["rounds"] == 4 and summary["block"] == 5


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_overhead_command_reports_both_runs(tmp_path):
    done = run_module(
        "multigpu.tools.bench.overhead",
        *("--warmup", "3", "--block", "2", "--rounds", "3", "--out", str(tmp_path)),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    ours, floor = report["ours"], report["lightning_floor"]
    assert ours["rounds"] == floor["rounds"] == 3 and ours["block"] == 2
    assert report["ours_beyond_floor_ms"] == pytest.approx(
        ours["overhead_ms_per_step"] - floor["overhead_ms_per_step"], abs=1e-3
    )
    assert all(ms > 0 for ms in (ours["plain_ms_per_step"], floor["lightning_ms_per_step"]))
