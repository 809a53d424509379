"""``model.channels_last`` and ``model.compile`` change how the network runs, not its results
or its checkpoints; ``experiment=fast`` composes them. Compiling takes about a minute on the
2-core CPU, so the compile cases are ``slow``."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, compose_config

from multigpu.checkpoint import load_checkpoint
from multigpu.module import ImageClassifier
from multigpu.training import train

NET = {"_target_": "multigpu.models.resnet18", "width": 4, "init_std": None}
SGD = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}


def classifier(**options) -> ImageClassifier:
    torch.manual_seed(0)
    module = ImageClassifier(net=NET, optimizer=SGD, **options)
    module.configure_model()
    return module


@pytest.mark.parametrize(
    "options",
    [{"channels_last": True}, pytest.param({"compile": True}, marks=pytest.mark.slow)],
    ids=["channels_last", "compile"],
)
def test_speed_options_compute_what_the_plain_network_computes(options):
    images = torch.randn(8, 1, 28, 28)
    plain = classifier()
    module = classifier(**options)
    module.load_state_dict(plain.state_dict())
    torch.testing.assert_close(module(images), plain(images), rtol=1e-4, atol=1e-5)
    assert module.state_dict().keys() == plain.state_dict().keys()
    if options.get("channels_last"):
        assert module.net[0].weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.slow
def test_compiled_run_keeps_plain_checkpoint_keys(tmp_path):
    overrides = [*TINY, "data=synthetic", "trainer.limit_train_batches=2", "model.compile=true"]
    overrides += ["model.channels_last=true", "data.pipeline=memory", "callbacks.test_figures=null"]
    summary = train(compose_config(overrides, tmp_path))
    assert summary["status"] == "completed"
    state = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(k.startswith("net.") for k in state) and not any("_orig_mod" in k for k in state)


def test_fast_experiment_composes_the_speed_options(tmp_path):
    cfg = compose_config(["experiment=fast"], tmp_path)
    assert cfg.data.pipeline == "memory" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.model.channels_last and cfg.model.compile and cfg.trainer.benchmark
    assert cfg.data.batch_size == 256 and cfg.model.optimizer.lr == 0.1  # still the d2l recipe
    assert cfg.trainer.max_epochs == 10
