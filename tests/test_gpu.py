"""The CUDA paths, on one GPU: every strategy trains in fp32 and bf16-mixed (scatter_allreduce
with two replicas on the same GPU, ``trainer.devices=[0,0]``; DDP with one NCCL process), two
replicas equal one device, the in-memory pipeline keeps its data on the GPU and gives the
torchvision pipeline's result, channels_last and compile run under every strategy, and a
checkpoint written on CUDA gives the same accuracy on the CPU, and per-phase timing with CUDA
events adds up to the epoch under every strategy. Skipped without CUDA;
``python -m multigpu.tools.acceptance`` runs them where there is one."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compose_config, run_script
from gpu_commands import (
    CUDA_GRAPHS,
    EXACT,
    ON_GPU,
    SMALL,
    SPEED,
    STRATEGIES,
    SYNTHETIC,
    TWO_REPLICAS,
)  # fmt: skip

from multigpu.run.training import train
from multigpu.storage.checkpoint import load_checkpoint, network_state

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU: python -m multigpu.tools.acceptance runs these on one",
    ),
]


@pytest.fixture(autouse=True)
def exact_float32():
    """No TF32: CUDA's float32 then differs from itself only by summation order."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def run_on_gpu(tmp_path, *overrides: str) -> dict:
    result = run_script("train.py", *overrides, f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp_path / "metrics.json").read_text())


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_trains_on_cuda(strategy, precision, tmp_path):
    recorded = run_on_gpu(tmp_path, *SMALL, *STRATEGIES[strategy], f"trainer.precision={precision}")
    run = recorded["run"]
    assert recorded["status"] == "completed" and run["accelerator"] == "cuda"
    assert run["precision"] == precision and recorded["train_loss"] == recorded["train_loss"]
    weights = network_state(load_checkpoint(tmp_path / "checkpoints" / "last.ckpt"))
    assert all(torch.isfinite(w.float()).all() for w in weights.values())


def final_weights(tmp_path, name: str, *overrides: str) -> dict[str, torch.Tensor]:
    """In this process (so the TF32 setting holds), ``EXACT`` plus ``overrides``."""
    out = tmp_path / name
    assert train(compose_config([*EXACT, *overrides], out))["status"] == "completed"
    return network_state(load_checkpoint(out / "checkpoints" / "last.ckpt"))


def test_two_replicas_on_one_gpu_equal_one_device(tmp_path):
    """Tolerance: float32 without TF32 and with deterministic kernels, so the two runs differ
    only in how the batch's gradient is summed (one convolution over 32 samples, or two over 16
    then an add): relative differences of about 1e-6 per step, over 3 steps with momentum."""
    single = final_weights(tmp_path, "single", *SYNTHETIC, "strategy=single")
    split = final_weights(tmp_path, "split", *SYNTHETIC, *TWO_REPLICAS)
    for name, expected in single.items():
        torch.testing.assert_close(split[name], expected, rtol=1e-4, atol=1e-5, msg=name)


def test_memory_pipeline_keeps_its_data_on_the_gpu(tmp_path, data_root):
    probe = tmp_path / "devices.json"
    real = [f"data.root={data_root}", "data.train_subset=512", "data.test_subset=128"]
    memory = final_weights(
        tmp_path,
        "memory",
        *real,
        "data.pipeline=memory",
        "+callbacks.probe._target_=probes.BatchDevice",
        f"+callbacks.probe.path={probe}",
    )
    assert set(json.loads(probe.read_text())) == {"cuda:0"}
    reference = final_weights(tmp_path, "torchvision", *real, "data.pipeline=torchvision")
    for name, expected in reference.items():
        torch.testing.assert_close(memory[name], expected, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("speed", ["compile", "cuda_graphs"])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_channels_last_and_compile_under_every_strategy(strategy, speed, tmp_path):
    options = {"compile": SPEED, "cuda_graphs": CUDA_GRAPHS}[speed]
    recorded = run_on_gpu(tmp_path, *SMALL, *STRATEGIES[strategy], *options)
    assert recorded["status"] == "completed" and recorded["epochs"] == 1


def test_a_cuda_checkpoint_evaluates_alike_on_the_cpu(tmp_path, data_root):
    data = [f"data.root={data_root}", "data.test_subset=512"]
    recorded = run_on_gpu(tmp_path, *ON_GPU, *data, "data.train_subset=1024")
    checkpoint = tmp_path / "checkpoints" / "last.ckpt"
    accuracy = {}
    for accelerator in ("gpu", "cpu"):
        result = run_script(
            "eval.py",
            f"ckpt_path={checkpoint}",
            f"trainer.accelerator={accelerator}",
            *data,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        accuracy[accelerator] = json.loads(result.stdout.strip().splitlines()[-1])["test_acc"]
    assert accuracy["cpu"] == pytest.approx(accuracy["gpu"], abs=2 / 512)  # a flip or two
    assert accuracy["gpu"] == pytest.approx(recorded["test_acc"], abs=2 / 512)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_phases_on_cuda_add_up_to_the_epoch(strategy, tmp_path):
    """CUDA events, read once per interval: the phases of every step still add up to the
    epoch time measured beside them (``tests/test_phases.py`` checks the same on the CPU)."""
    overrides = [*SMALL, *STRATEGIES[strategy], "trainer.max_epochs=2", "phases=true"]
    recorded = run_on_gpu(tmp_path, *overrides)
    phases = json.loads((tmp_path / "phases.json").read_text())
    assert phases["clock"] == "CUDA events"
    assert {"data", "loss", "backward", "optimizer"} <= set(phases["phases"])
    for epoch, record in zip(phases["epochs"], recorded["history"], strict=True):
        summed = sum(epoch["phases_ms"].values()) * epoch["steps"] / 1000
        assert summed == pytest.approx(record["epoch_s"], rel=0.10), (epoch, record)
