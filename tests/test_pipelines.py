"""The in-memory pipeline against the torchvision one, and batch augmentation."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, compose_config, run_script

from multigpu.data import FashionMNISTDataModule
from multigpu.data.augment import augment, random_crop, random_flip
from multigpu.run.training import train
from multigpu.storage.checkpoint import load_checkpoint, network_state


def epoch_batches(loader, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    sampler = getattr(loader.sampler, "sampler", loader.sampler)  # inside IndexBatches
    sampler.set_epoch(epoch)
    return list(loader)


def test_memory_pipeline_gives_the_torchvision_batches(data_root):
    kwargs = dict(root=str(data_root), download=False, batch_size=100, train_subset=1000, seed=3)
    kwargs["num_workers"] = 0
    reference = FashionMNISTDataModule(**kwargs)
    memory = FashionMNISTDataModule(**kwargs, pipeline="memory")
    for dm in (reference, memory):
        dm.setup("fit")
    for epoch in (0, 1):
        expected = epoch_batches(reference.train_dataloader(), epoch)
        got = epoch_batches(memory.train_dataloader(), epoch)
        assert len(got) == len(expected) == 10
        for (x, y), (gx, gy) in zip(expected, got, strict=True):
            assert torch.equal(gx, x) and torch.equal(gy, y)
    assert not torch.equal(expected[0][1], epoch_batches(reference.train_dataloader(), 0)[0][1])
    test_x, test_y = next(iter(memory.test_dataloader()))
    ref_x, ref_y = next(iter(reference.test_dataloader()))
    assert torch.equal(test_x, ref_x) and torch.equal(test_y, ref_y)


def windows(padded: torch.Tensor, size: int) -> list[torch.Tensor]:
    span = padded.shape[-1] - size + 1
    return [padded[..., t : t + size, s : s + size] for t in range(span) for s in range(span)]


def test_random_crop_cuts_a_window_of_the_padded_image():
    images = torch.rand(16, 1, 8, 8)
    cropped = random_crop(images, 2, -1.0, torch.Generator().manual_seed(0))
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2), value=-1.0)
    offsets = set()
    for i in range(16):
        matches = [k for k, w in enumerate(windows(padded[i], 8)) if torch.equal(w, cropped[i])]
        assert matches, f"image {i} is not a window of its padded self"
        offsets.add(matches[0])
    assert len(offsets) > 1  # the windows differ from image to image
    assert torch.equal(random_crop(images, 0, 0.0, torch.Generator()), images)


def test_random_flip_and_seeded_augmentation():
    images = torch.rand(64, 1, 6, 6)
    flipped = random_flip(images, torch.Generator().manual_seed(1))
    same = [torch.equal(f, x) for f, x in zip(flipped, images, strict=True)]
    mirrored = [torch.equal(f, x.flip(-1)) for f, x in zip(flipped, images, strict=True)]
    assert all(a or b for a, b in zip(same, mirrored, strict=True))
    assert 10 < sum(mirrored) < 54
    first = augment(images, 2, True, 0.0, torch.Generator().manual_seed(5))
    again = augment(images, 2, True, 0.0, torch.Generator().manual_seed(5))
    assert torch.equal(first, again)


@pytest.mark.slow
def test_training_through_either_pipeline_ends_with_the_same_weights(tmp_path, data_root):
    common = [
        *TINY,
        f"data.root={data_root}",
        "data.train_subset=256",
        "data.test_subset=64",
        "data.batch_size=64",
        "trainer.max_epochs=2",
        "callbacks.test_figures=null",
    ]

    def final_weights(*overrides: str) -> dict[str, torch.Tensor]:
        out = tmp_path / "_".join(o.split("=")[1] for o in overrides)
        assert train(compose_config([*common, *overrides], out))["status"] == "completed"
        return network_state(load_checkpoint(out / "checkpoints" / "last.ckpt"))

    for augmented in ("false", "true"):
        reference = final_weights("data.pipeline=torchvision", f"data.augment={augmented}")
        memory = final_weights("data.pipeline=memory", f"data.augment={augmented}")
        for name, expected in reference.items():
            torch.testing.assert_close(memory[name], expected, rtol=0, atol=1e-6, msg=name)
        if augmented == "false":
            plain = memory
    assert not torch.equal(memory["0.weight"], plain["0.weight"])  # augmentation took effect


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.subprocess
def test_pipelines_train_alike_under_ddp(tmp_path, data_root):
    """Two real DDP processes, each reading its own shard: the in-memory pipeline (and the
    per-rank augmentation) must end where the torchvision pipeline ends."""
    weights = {}
    for pipeline in ("torchvision", "memory"):
        out = tmp_path / pipeline
        result = run_script(
            "train.py",
            *TINY,
            f"data.root={data_root}",
            "data.train_subset=512",
            "data.test_subset=128",
            "data.batch_size=64",
            "data.augment=true",
            f"data.pipeline={pipeline}",
            "strategy=ddp",
            "trainer.devices=2",
            "callbacks.test_figures=null",
            f"hydra.run.dir={out}",
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        weights[pipeline] = network_state(load_checkpoint(out / "checkpoints" / "last.ckpt"))
    for name, expected in weights["torchvision"].items():
        torch.testing.assert_close(weights["memory"][name], expected, rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("pipeline", "workers"),
    [
        ("memory", 0),  # the default suite's; loader workers and torchvision's pipeline: -m slow
        pytest.param("torchvision", 2, marks=pytest.mark.slow),
        pytest.param("torchvision", 0, marks=pytest.mark.slow),
    ],
)
def test_a_resume_under_a_per_step_schedule_ends_as_a_run_never_stopped(
    pipeline, workers, tmp_path
):
    """The batches had come from the order the sampler read when Lightning made the training
    iterator: before the loops were restored when a per-step schedule sized the training data
    (``configure_optimizers``), so a resumed run drew epoch 0's order (``experiment=speedrun``
    resumed to other weights) where the sampler is read then: the memory pipeline's, and a
    loader's workers, which fetch ahead as they start."""
    from test_integrity import SYNTHETIC

    recipe = [*SYNTHETIC, "data.batch_size=16", f"data.pipeline={pipeline}"]
    recipe += [f"data.num_workers={workers}"]
    recipe += [
        "+model/scheduler=cosine",
        "model.scheduler_interval=step",
        "model.scheduler.T_max=3",
    ]
    train(compose_config([*recipe, "trainer.max_epochs=2"], tmp_path / "first"))
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    resumed = train(
        compose_config([*recipe, "trainer.max_epochs=3", f"ckpt_path={last}"], tmp_path / "resumed")
    )
    once = train(compose_config([*recipe, "trainer.max_epochs=3"], tmp_path / "once"))
    assert resumed["history"][-1]["train_loss"] == pytest.approx(once["history"][-1]["train_loss"])
    weights = [
        torch.load(tmp_path / run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        for run in ("resumed", "once")
    ]
    for name, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][name], msg=name)
