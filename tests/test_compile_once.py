"""One compile per network: with ``model.compile`` a training run compiles its network as one
graph (one per replica at most), with no graph break, no recompile at the evaluation between
epochs (it runs eagerly) and none across the blocks of different widths; dynamo's own counters
say so. Its compile time is recorded apart from the epochs. The capture-only backend (``eager``)
shows in seconds what inductor would be handed."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY, compose_config, run_python
from torch._dynamo.utils import counters

from multigpu.models.compiled import WARMUP_CALLS, compile_counts, warm_up
from multigpu.run.training import train

WHOLE_BATCHES = [
    *("data=synthetic", "data.num_train=100", "data.num_test=40", "data.batch_size=32"),
    *("data.drop_last=true", "trainer.max_epochs=2", "callbacks.test_figures=null"),
    *("model.net.width=4", "model.compile={backend:eager}"),
]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo's caches and counters as a new process has them."""
    torch._dynamo.reset()
    counters.clear()


@pytest.mark.parametrize(
    "strategy,replicas",
    [("single", 1), ("scatter_allreduce", 2), ("dp", 1)],
    ids=["single", "scatter_allreduce_x2", "dp"],
)
def test_a_compiled_network_is_one_graph(strategy, replicas, tmp_path):
    overrides = [*TINY, *WHOLE_BATCHES, f"strategy={strategy}", f"trainer.devices={replicas}"]
    record = train(compose_config(overrides, tmp_path))
    counts = compile_counts()
    assert record["status"] == "completed" and record["epochs"] == 2
    assert 1 <= counts["graphs"] <= replicas and counts["graph_breaks"] == 0, counts
    assert counts["recompile_limit_hits"] == 0
    # The compile time is its own figure: in the first epoch, apart from its epoch_s.
    first, second = record["history"]
    assert first["compile_s"] > 0 and second["compile_s"] == pytest.approx(0, abs=0.05)
    assert record["compile_s"] == pytest.approx(first["compile_s"] + second["compile_s"])


@pytest.mark.slow
def test_a_short_last_batch_is_a_second_graph_without_drop_last(tmp_path):
    """What ``data.drop_last=true`` spares the compiled recipes: 100 images in batches of 32
    end with a batch of 4, a second shape, compiled as such (never as symbolic shapes)."""
    overrides = [*TINY, *WHOLE_BATCHES, "data.drop_last=false"]
    assert train(compose_config(overrides, tmp_path))["status"] == "completed"
    assert compile_counts()["graphs"] == 2


def test_drop_last_needs_a_whole_batch(tmp_path):
    from multigpu.config.errors import UserError
    from multigpu.run.training import resolve

    cfg = compose_config([*TINY, *WHOLE_BATCHES, "data.batch_size=128"], tmp_path)
    with pytest.raises(UserError, match="data.drop_last=true with a global batch of 128 leaves"):
        resolve(cfg)


def test_the_network_is_traced_from_a_frame_of_its_own():
    """Dynamo starts at the compiled module's ``forward`` and skips frames in torch's own files
    (torch 2.11 skipped ``nn.Sequential.forward``, then compiled every block apart): the
    network's ``forward``, and each block's, is this project's code, which dynamo traces."""
    import multigpu
    from multigpu.models.resnet import Residual, resnet18

    package = Path(multigpu.__file__).parent
    for module in (resnet18(width=2), Residual(2, 2)):
        source = Path(type(module).forward.__code__.co_filename)
        assert source.is_relative_to(package), source


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_cpu_compile_says_nothing_of_cuda(tmp_path):
    """The CPU form of a GPU recipe compiles quietly: torch's warning that no CUDA runtime is
    found (about building CUDA extensions) is not shown where no GPU is."""
    script = (
        "import torch\n"
        "from multigpu.models.compiled import compile_network\n"
        "net = torch.nn.Linear(2, 2)\n"
        "compile_network(net, {})\n"
        "net(torch.randn(3, 2)).sum().backward()\n"
        "print('compiled')\n"
    )
    done = run_python("-c", script, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-2000:]
    assert "CUDA" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    "precision", ["32-true", pytest.param("bf16-true", marks=pytest.mark.slow)]
)
def test_the_warm_up_changes_nothing_trained_and_counts_as_compile_time(
    precision, tmp_path, monkeypatch
):
    """Before the first epoch a compiled network runs its step on zeros of a training batch's
    shape (``compiled.warm_up``): its BatchNorm statistics restored and its gradients dropped,
    the run trains the weights it trains without it, bit for bit; its compile happens there,
    with the first batch's shape (one graph), in the batches' precision (a ``bf16-true``
    network's bf16), and its seconds are in the first epoch's ``compile_s``."""
    import multigpu.models.classifier as classifier

    warmed: list[float] = []

    def recorded(*args):
        warmed.append(classifier_warm_up(*args))
        return warmed[-1]

    classifier_warm_up = classifier.warm_up
    monkeypatch.setattr(classifier, "warm_up", recorded)
    overrides = [*TINY, *WHOLE_BATCHES, "trainer.max_epochs=1", f"trainer.precision={precision}"]
    record = train(compose_config(overrides, tmp_path / "warm"))
    assert len(warmed) == 1 and compile_counts()["graphs"] == 1
    assert record["history"][0]["compile_s"] >= warmed[0] * (1 - 1e-6) > 0  # logged as float32

    torch._dynamo.reset()
    monkeypatch.setattr(classifier, "warm_up", lambda *args: pytest.fail("warmed up"))
    monkeypatch.setattr(classifier.ImageClassifier, "on_train_start", lambda self: None)
    train(compose_config(overrides, tmp_path / "cold"))
    weights = {name: load_weights(tmp_path / name) for name in ("warm", "cold")}
    assert weights["warm"].keys() == weights["cold"].keys()
    for name, value in weights["cold"].items():
        torch.testing.assert_close(weights["warm"][name], value, rtol=0, atol=0, msg=name)


def test_each_warm_up_pass_starts_without_gradients():
    """As a training step does (zero_grad before backward): under CUDA graphs a pass's
    gradients live in memory the next replay writes over, and a backward accumulating into
    them failed on an H200. Every pass, the first included, finds none; none is left."""
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(3))
    batch = (torch.zeros(2, 1, 6, 6), torch.zeros(2, dtype=torch.long))
    net(batch[0])  # the lazy layer's shape
    found: list[bool] = []

    def loss(logits, labels):
        found.append(all(p.grad is None for p in net.parameters()))
        return torch.nn.functional.cross_entropy(logits, labels)

    warm_up(net, batch, loss, contextlib.nullcontext)
    assert found == [True] * WARMUP_CALLS
    assert all(p.grad is None for p in net.parameters())


def load_weights(run: Path) -> dict[str, torch.Tensor]:
    from multigpu.storage.checkpoint import load_checkpoint, network_state

    return network_state(load_checkpoint(run / "checkpoints" / "last.ckpt"))


@pytest.mark.slow  # a DDP run of two processes
def test_a_ddp_process_is_not_warmed_up(tmp_path):
    """Under DDP the network is compiled inside DDP's forward, which splits its graph at the
    gradient buckets (the exchange overlaps the backward): a warm-up outside it would have
    compiled it whole first. The run trains what the uncompiled one does."""
    common = [*TINY, *WHOLE_BATCHES, "strategy=ddp", "trainer.devices=2", "data.num_train=128"]
    for name, compiled in (("compiled", "{backend:eager}"), ("plain", "false")):
        run = [*common, f"model.compile={compiled}", f"hydra.run.dir={tmp_path / name}"]
        done = run_python(str(REPO / "train.py"), *run, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    log = (tmp_path / "compiled" / "train.log").read_text()
    assert "compiled in" in log and "warmed up" not in log
    weights = {name: load_weights(tmp_path / name) for name in ("compiled", "plain")}
    for name, value in weights["plain"].items():
        torch.testing.assert_close(weights["compiled"][name], value, rtol=0, atol=0, msg=name)


@pytest.mark.slow
def test_a_resumed_compiled_run_says_what_compiling_took(tmp_path, caplog):
    """The compile line is the first trained epoch's, which a resume's is not the run's first."""
    overrides = [*TINY, *WHOLE_BATCHES, "trainer.max_epochs=1"]
    train(compose_config(overrides, tmp_path / "run"))
    torch._dynamo.reset()
    resumed = [
        *overrides,
        "trainer.max_epochs=2",
        f"ckpt_path={tmp_path}/run/checkpoints/last.ckpt",
    ]
    with caplog.at_level(logging.INFO, logger="multigpu.callbacks.epoch_timer"):
        record = train(compose_config(resumed, tmp_path / "resumed"))
    assert record["epochs"] == 2 and record["history"][1]["compile_s"] > 0
    said = [r.getMessage() for r in caplog.records if r.name == "multigpu.callbacks.epoch_timer"]
    assert len(said) == 1 and said[0].startswith("compiled and warmed up in ")
