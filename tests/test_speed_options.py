"""``model.channels_last`` and ``model.compile`` change how the network runs, not its results
or its checkpoints; ``experiment=fast`` composes them. Compiling with inductor takes about a
minute on the 2-core CPU, so those cases are ``slow``; a recording backend (TorchDynamo's graph
capture, then the captured graph as it is) shows in seconds that every replica runs compiled."""

from __future__ import annotations

import os
import subprocess
import sys

import hypothesis.strategies as st
import pytest
import torch
from conftest import TINY, compose_config, composed, examples, resolve_on
from hydra.utils import instantiate
from hypothesis import example, given

from multigpu.config.errors import UserError
from multigpu.config.settings import CUDA_GRAPH_MODES, MIN_CPU_NHWC_WIDTH
from multigpu.models.classifier import ImageClassifier
from multigpu.models.compiled import is_compiled
from multigpu.run.fit import build_module
from multigpu.run.training import resolve, train
from multigpu.storage.checkpoint import load_checkpoint, network_state

BATCH_SIZES: list[int] = []  # of every call into code the recording backend compiled


@torch._dynamo.register_backend(name="recording")
def recording_backend(graph: torch.fx.GraphModule, example_inputs):
    def run(*args):
        images = [a for a in args if isinstance(a, torch.Tensor) and a.shape[1:] == (1, 28, 28)]
        BATCH_SIZES.extend(len(a) for a in images)
        return graph.forward(*args)

    return run


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


@pytest.mark.parametrize(
    "compile,compiled",
    [(True, True), ({}, True), ({"mode": "default"}, True), (False, False), (None, False)],
    ids=["true", "empty_map", "a_mode", "false", "null"],
)
def test_a_map_of_compile_arguments_compiles_even_when_empty(compile, compiled, tmp_path):
    """``model.compile={}`` is torch.compile with no arguments, as ``true`` is: an empty map
    is falsy, and the network was quietly left uncompiled. The settings read it alike: compiled
    DataParallel is refused on several GPUs for either."""
    assert is_compiled(classifier(compile=compile).net) is compiled  # lazily: nothing compiles yet
    cfg = composed(["strategy=dp", "trainer.devices=2"])
    cfg.model.compile = compile
    if compiled:
        with pytest.raises(UserError, match="model.compile with strategy=dp on 2 GPUs"):
            resolve_on(cfg, cuda_devices=2)
    else:
        assert resolve_on(cfg, cuda_devices=2).strategy == "dp"


@pytest.mark.slow
def test_compiled_run_keeps_plain_checkpoint_keys(tmp_path):
    overrides = [*TINY, "data=synthetic", "+trainer.limit_train_batches=2", "model.compile=true"]
    overrides += ["model.channels_last=true", "data.pipeline=memory", "callbacks.test_figures=null"]
    overrides += [f"model.net.width={MIN_CPU_NHWC_WIDTH}"]
    summary = train(compose_config(overrides, tmp_path))
    assert summary["status"] == "completed"
    state = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(k.startswith("net.") for k in state) and not any("_orig_mod" in k for k in state)


@examples(60)
@given(width=st.integers(1, 64), cuda=st.booleans(), channels_last=st.booleans())
@example(width=MIN_CPU_NHWC_WIDTH - 1, cuda=False, channels_last=True)  # the bound, both sides
@example(width=MIN_CPU_NHWC_WIDTH, cuda=False, channels_last=True)
def test_channels_last_is_refused_exactly_on_a_cpu_below_the_width_onednn_computes(
    width, cuda, channels_last
):
    cfg = composed(["trainer.accelerator=auto"])
    cfg.model.net.width, cfg.model.channels_last = width, channels_last
    refused = channels_last and not cuda and width < MIN_CPU_NHWC_WIDTH
    try:
        resolve_on(cfg, cuda_devices=int(cuda))
    except UserError as error:
        said = str(error)
        assert refused and "\n" not in said, said
        assert said.startswith(f"model.channels_last=true with model.net.width={width} on the CPU")
        assert "use model.channels_last=false or model.net.width=8" in said
    else:
        assert not refused


@examples(60)
@given(
    mode=st.sampled_from([None, "default", *CUDA_GRAPH_MODES, "max-autotune-no-cudagraphs"]),
    accumulate=st.integers(1, 4),
    cuda=st.booleans(),
)
@example(mode="reduce-overhead", accumulate=2, cuda=True)  # experiment=fast's compile, refused
@example(mode="reduce-overhead", accumulate=2, cuda=False)  # a CPU replays no CUDA graph
def test_cuda_graphs_are_refused_exactly_where_a_step_accumulates_gradients(mode, accumulate, cuda):
    cfg = composed(["trainer.accelerator=auto", "+trainer.accumulate_grad_batches=1"])
    cfg.model.compile = {"mode": mode} if mode else True
    cfg.trainer.accumulate_grad_batches = accumulate
    refused = cuda and mode in CUDA_GRAPH_MODES and accumulate > 1
    try:
        resolve_on(cfg, cuda_devices=int(cuda))
    except UserError as error:
        said = str(error)
        assert refused and "\n" not in said, said
        assert said.startswith(
            f"model.compile.mode={mode} with trainer.accumulate_grad_batches={accumulate}: CUDA"
        )
        assert said.endswith(
            "use model.compile=true (no CUDA graphs) or leave out +trainer.accumulate_grad_batches"
        )
    else:
        assert not refused


def test_the_narrowest_width_allowed_nhwc_on_the_cpu_trains_on_one_thread():
    """The bound's other side, in a process of its own (the bug below it aborts the process):
    a step of every layer, shortcuts included, at that width in NHWC on one thread, as the
    suite's workers run."""
    step = (
        "import torch; from multigpu.models import resnet18; "
        f"net = resnet18(width={MIN_CPU_NHWC_WIDTH}).to(memory_format=torch.channels_last); "
        "x = torch.randn(32, 1, 28, 28).contiguous(memory_format=torch.channels_last); "
        "[net(x).sum().backward() for _ in range(3)]; print('trained')"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", step], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0 and b"trained" in done.stdout, done.stderr.decode()[-2000:]


SYNTHETIC = [  # batches of 32, 32 and 16, then 32 test images
    "data=synthetic",
    "data.num_train=80",
    "data.num_test=32",
    "data.batch_size=32",
    "data.shuffle=false",
    "model.net.norm=none",
    "model.net.init_std=null",
    "callbacks.test_figures=null",
]


@pytest.mark.parametrize(
    "strategy,devices,calls",
    [
        pytest.param("scatter_allreduce", 3, {11, 10, 6, 5}, marks=pytest.mark.slow),
        ("dp", 1, {32, 16}),
    ],
    ids=["scatter_allreduce", "dp"],
)
def test_compile_runs_every_replica_compiled(strategy, devices, calls, tmp_path):
    """Every replica's shards (32 over 3 devices: 11, 11, 10; 16: 6, 5, 5) or DataParallel's
    whole batches go through compiled code, and training ends where it ends uncompiled."""
    common = [*TINY, *SYNTHETIC, f"strategy={strategy}", f"trainer.devices={devices}"]
    weights = {}
    for compiled in ("false", "{backend:recording}"):
        torch._dynamo.reset()
        BATCH_SIZES.clear()
        out = tmp_path / compiled.strip("{}").replace(":", "_")
        assert train(compose_config([*common, f"model.compile={compiled}"], out))["epochs"] == 1
        weights[compiled] = network_state(load_checkpoint(out / "checkpoints" / "last.ckpt"))
    assert calls <= set(BATCH_SIZES)
    for name, expected in weights["false"].items():
        torch.testing.assert_close(weights["{backend:recording}"][name], expected, msg=name)


def test_fast_experiment_composes_the_speed_options(tmp_path):
    cfg = compose_config(["experiment=fast"], tmp_path)
    assert cfg.data.pipeline == "memory" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.model.channels_last and cfg.model.compile and cfg.trainer.benchmark
    assert cfg.model.compile.mode == "reduce-overhead"  # CUDA graphs: two launches a step
    assert cfg.data.drop_last  # one shape: one compile (tests/test_compile_once.py)
    assert cfg.data.batch_size == 256 and cfg.model.optimizer.lr == 0.1  # still the d2l recipe
    assert cfg.trainer.max_epochs == 10


@pytest.mark.parametrize("accumulate", [1, 2])
def test_warmup_rises_per_step_to_the_scaled_lr_and_composes_with_the_schedule(
    accumulate, tmp_path
):
    """Batch 64 under the linear rule from base 32: lr 0.1 -> 0.2; warm-up over 1.5 epochs of
    4 steps climbs from 0.1 (Goyal et al.: the unscaled lr) in equal steps, then a step
    schedule halves the lr after each epoch; the warm-up multiplies what the schedule gives.
    Accumulating 2 batches a step, an epoch is 2 steps and the warm-up 3 (it had counted
    batches, and lasted twice as long as configured), and an update sees 128 images: lr 0.4
    (the rule had scaled by one batch)."""
    log = tmp_path / "lr.txt"
    overrides = [*TINY, "data=synthetic", "data.num_train=256", "data.num_test=32"]
    overrides += ["data.batch_size=64", "model.optimizer.lr=0.1", "trainer.max_epochs=3"]
    overrides += ["model.lr_scaling.rule=linear", "model.lr_scaling.base_batch=32"]
    overrides += ["model.lr_scaling.warmup_epochs=1.5", "+model/scheduler=step"]
    overrides += ["model.scheduler.step_size=1", "model.scheduler.gamma=0.5"]
    overrides += ["+callbacks.lr._target_=probes.StepLr", f"+callbacks.lr.path={log}"]
    overrides += [f"+trainer.accumulate_grad_batches={accumulate}"]
    assert train(compose_config(overrides, tmp_path / "run"))["status"] == "completed"
    used = [float(line) for line in log.read_text().split()]
    steps_per_epoch, warmup_steps = 4 // accumulate, 6 // accumulate
    top = 0.1 * 64 * accumulate / 32  # the linear rule, over the images of an update
    start = 0.1 / top  # from the unscaled lr
    expected = []
    for step in range(3 * steps_per_epoch):
        scheduled = top * 0.5 ** (step // steps_per_epoch)
        factor = start + (1 - start) * step / warmup_steps if step < warmup_steps else 1.0
        expected.append(scheduled * factor)
    assert used == pytest.approx(expected, rel=1e-9)
    assert used[0] == pytest.approx(0.1) and max(used) < top  # never the full lr in epoch 1


@pytest.mark.parametrize("fused", [True, False])
def test_the_shipped_optimizer_updates_each_group_in_one_operation(fused, tmp_path):
    """``model.optimizer.fused=true`` (what the shipped null resolves to without clipping): the
    speedrun's optimizer (momentum, Nesterov, weight decay on the weights: two groups) runs one
    ``_fused_sgd_`` per group, where torch's default runs several operations per parameter,
    each a kernel launch on a GPU; the update is the default's, to rounding."""
    overrides = [*TINY, "experiment=speedrun", "trainer.accelerator=cpu"]
    cfg = compose_config([*overrides, f"model.optimizer.fused={str(fused).lower()}"], tmp_path)
    module = build_module(cfg.model, resolve(cfg))
    optimizer = instantiate(module.hparams.optimizer)(module.parameter_groups())  # as configured
    default = torch.optim.SGD(
        [
            {**g, "params": [p.detach().clone() for p in g["params"]]}
            for g in module.parameter_groups()
        ],
        **{k: v for k, v in optimizer.defaults.items() if k != "fused"},
    )
    for step in range(2):
        for p, q in zip(default_params(optimizer), default_params(default), strict=True):
            p.grad = torch.randn_like(p, generator=torch.Generator().manual_seed(step))
            q.grad = p.grad.clone()
        with torch.profiler.profile() as profile:
            optimizer.step()
        default.step()
    names = [event.name for event in profile.events()]
    groups, params = len(optimizer.param_groups), len(list(module.parameters()))
    assert groups == 2
    if fused:
        assert names.count("aten::_fused_sgd_") == groups
        assert len([n for n in names if n.startswith("aten::")]) < params
    else:
        assert names.count("aten::_fused_sgd_") == 0
        assert len([n for n in names if n.startswith("aten::")]) > 2 * params
    for p, q in zip(default_params(optimizer), default_params(default), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def default_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]
