"""The framework changes nothing about the result: K steps of training through ``train()``
(one device, BatchNorm, momentum, d2l's normal(0.01) init, the real data in its shuffled order)
end with the weights and BatchNorm statistics of a plain PyTorch loop, written here from the
same initial state over the same batches."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from conftest import TINY, compose_config

from multigpu.data import FashionMNISTDataModule
from multigpu.models import resnet18
from multigpu.run.fit import build_module
from multigpu.run.training import resolve, train
from multigpu.storage.checkpoint import load_checkpoint, network_state

SAMPLES, BATCH, EPOCHS, SEED = 512, 64, 2, 7  # K = 16 steps


def test_training_equals_a_plain_pytorch_loop(tmp_path, data_root):
    overrides = [
        *TINY,
        f"trainer.max_epochs={EPOCHS}",
        f"data.root={data_root}",
        f"data.train_subset={SAMPLES}",
        "data.test_subset=128",
        f"data.batch_size={BATCH}",
        "data.normalize=false",
        "model.net.width=4",
        "model.net.init_std=0.01",
        "model.optimizer.lr=0.05",
        "model.optimizer.momentum=0.9",
        "model.optimizer.weight_decay=0.0005",
        f"seed={SEED}",
    ]
    cfg = compose_config(overrides, tmp_path / "run")
    assert train(cfg)["status"] == "completed"
    trained = network_state(load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt"))

    # The initial state: the module train() builds, after the same seeding.
    run = resolve(cfg)
    pl.seed_everything(SEED, workers=True, verbose=False)
    initial = {k[len("net.") :]: v for k, v in build_module(cfg.model, run).state_dict().items()}

    # The same samples (the seeded subset); their order written out here: each epoch a
    # permutation seeded by data.seed + epoch, as DistributedSampler draws it.
    data = FashionMNISTDataModule(
        root=str(data_root), train_subset=SAMPLES, seed=SEED, num_workers=0
    )
    data.normalize = False
    data.setup("fit")
    net = resnet18(width=4, init_std=0.01)
    net.load_state_dict(initial)
    net.train()
    # fused: the shipped config's (model.optimizer.fused), whose multiply-adds round as one
    optimizer = torch.optim.SGD(
        net.parameters(), lr=0.05, momentum=0.9, weight_decay=0.0005, fused=True
    )
    steps = 0
    for epoch in range(EPOCHS):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(SEED + epoch))
        for first in range(0, SAMPLES, BATCH):
            samples = [data.train_set[int(i)] for i in order[first : first + BATCH]]
            images = torch.stack([image for image, _ in samples])
            labels = torch.tensor([label for _, label in samples])
            loss = F.cross_entropy(net(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
    assert steps == EPOCHS * SAMPLES // BATCH == 16

    expected = net.state_dict()
    assert trained.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(trained[name], value, rtol=0, atol=1e-6, msg=name)
    moved = max((expected[k].float() - initial[k].float()).abs().max().item() for k in expected)
    assert moved > 1e-3  # they trained: equality is not the trivial kind
