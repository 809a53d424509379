"""Where a steady step's time goes (``multigpu.callbacks.step_profile``): a timed window of
steps, then a profiled one, and the device's own work told apart from the host's ranges that
torch also draws on the device's timeline."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, TINY, compose_config, run_module
from hydra.utils import instantiate
from torch import nn
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg

from multigpu.callbacks.step_profile import eager_ops, summarise
from multigpu.run.training import train


def event(number: int, name: str, start: int, end: int, **kind) -> FunctionEventAvg:
    """One event, as ``key_averages()`` gives it (each name once here)."""
    averaged = FunctionEventAvg()
    averaged.add(FunctionEvent(id=number, name=name, thread=0, start_us=start, end_us=end,
                               use_device="cuda", **kind))  # fmt: skip
    return averaged


@pytest.mark.parametrize("steps", [1, 4])
def test_device_time_counts_kernels_not_the_annotated_ranges_around_them(steps):
    """On a GPU, ``Optimizer.step#SGD.step`` and ``forward`` appear on the device's timeline
    spanning the kernels inside them: counted too, the device looked busier than the step."""
    cuda = {"device_type": DeviceType.CUDA}
    kernels = {"sm90_conv_fprop": (10, 60), "triton_batch_norm": (60, 75), "sgd_foreach": (80, 88)}
    events = [event(1, "aten::convolution", 0, 100), event(2, "aten::add_", 100, 104)]
    events += [event(3 + i, name, *span, **cuda) for i, (name, span) in enumerate(kernels.items())]
    events += [event(10, "Optimizer.step#SGD.step", 0, 95, is_user_annotation=True, **cuda)]
    events += [event(11, "forward", 5, 70, is_user_annotation=True, **cuda)]
    summary = summarise(events, steps, top=10)

    kernel_us = sum(end - start for start, end in kernels.values())
    assert summary["device_busy_ms_per_step"] == pytest.approx(kernel_us / 1000 / steps)
    assert summary["kernels_per_step"] == pytest.approx(len(kernels) / steps)
    assert [row["name"] for row in summary["top_device"]] == list(kernels)  # by time
    assert {row["name"] for row in summary["top_host"]} == {"aten::convolution", "aten::add_"}
    assert summary["host_ops_per_step"] == pytest.approx(2 / steps)


def test_eager_ops_are_the_outermost_aten_calls_outside_compiled_graphs():
    """What the host issues one by one: an op inside a compiled graph's call is the graph's,
    one called by another op is part of it; a range that is no op (the optimizer's, autograd's)
    hides nothing."""
    calls: list[FunctionEvent] = []

    def call(name: str, parent: FunctionEvent | None = None, **kind) -> FunctionEvent:
        made = FunctionEvent(id=len(calls), name=name, thread=0, start_us=0, end_us=1, **kind)
        if parent is not None:
            made.set_cpu_parent(parent)
        calls.append(made)
        return made

    for _ in range(2):  # steps
        graph = call("## Call CompiledFxGraph f4izh3lj ##")
        call("aten::empty", call("aten::convolution", graph))
        call("aten::add_", call("Optimizer.step#SGD.step"))
        call("aten::empty", call("aten::mul"))
        call("aten::detach", call("torch::autograd::AccumulateGrad"))
        call("aten::empty", call("aten::pin_memory"))  # the loader's thread
        call("triton_poi_fused_add_0", device_type=DeviceType.CUDA)
    counted = eager_ops(calls, steps=2, top=2)
    assert counted["eager_ops_per_step"] == 3
    assert len(counted["top_eager"]) == 2
    assert {row["name"] for row in counted["top_eager"]} < {
        "aten::add_",
        "aten::mul",
        "aten::detach",
    }
    assert all(row["calls_per_step"] == 1 for row in counted["top_eager"])


@pytest.mark.slow
def test_a_run_is_timed_then_profiled_over_its_steady_steps(tmp_path):
    result = tmp_path / "profile.json"
    overrides = [
        *TINY,
        *("data=synthetic", "data.num_train=512", "data.num_test=32", "data.batch_size=16"),
        "+callbacks.profile._target_=multigpu.callbacks.StepProfile",
        *("+callbacks.profile.first_step=4", "+callbacks.profile.steps=6"),
        *("+callbacks.profile.stop=true", f"+callbacks.profile.path={result}"),
        "+callbacks.profile.top=100",
    ]
    record = train(compose_config(overrides, tmp_path / "run"))
    profiled = json.loads(result.read_text())
    assert profiled["complete"] and profiled["steps"] == 6
    assert record["history"][-1]["partial_batches"] == 4 + 2 * 6  # stopped once both windows ended
    assert 0 < profiled["ms_per_step"] < profiled["profiled_ms_per_step"] * 5
    assert profiled["device_busy_ms_per_step"] is None  # a CPU has no device timeline
    assert any("convolution" in row["name"] for row in profiled["top_host"])
    # Not compiled: each convolution of the network (20) is issued one by one, every step.
    eager = {row["name"]: row["calls_per_step"] for row in profiled["top_eager"]}
    assert eager["aten::conv2d"] == 20 and profiled["eager_ops_per_step"] > 20


@pytest.mark.slow  # a second run of the default one's kind
@pytest.mark.parametrize("epochs", [1, 2])
def test_a_window_an_evaluation_falls_in_is_cut_before_it(epochs, tmp_path):
    """32 steps an epoch: steps 4-19 timed, 20-31 profiled of the 16 asked, then the test set
    is evaluated. The window ends before it: what was profiled holds training steps only (each
    of the network's convolutions once a step), summarised per step it held; the result says
    what cut it, and training goes on where nothing asks it to stop."""
    result = tmp_path / "profile.json"
    overrides = [
        *TINY,
        *("data=synthetic", "data.num_train=512", "data.num_test=256", "data.batch_size=16"),
        f"trainer.max_epochs={epochs}",
        "+callbacks.profile._target_=multigpu.callbacks.StepProfile",
        *("+callbacks.profile.first_step=4", "+callbacks.profile.steps=16"),
        *("+callbacks.profile.top=200", f"+callbacks.profile.path={result}"),
    ]
    cfg = compose_config(overrides, tmp_path / "run")
    assert train(cfg)["epochs"] == epochs
    profiled = json.loads(result.read_text())
    assert not profiled["complete"] and profiled["cut_by"] == "an evaluation"
    assert profiled["ms_per_step"] > 0 and profiled["profiled_ms_per_step"] is None
    calls = {row["name"]: row["calls_per_step"] for row in profiled["top_host"]}
    convolutions = sum(isinstance(m, nn.Conv2d) for m in instantiate(cfg.model.net).modules())
    assert calls["aten::convolution"] == pytest.approx(convolutions)  # 12 steps, counted as 12
    assert calls["forward"] == pytest.approx(1)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_command_prints_the_profile_and_refuses_what_it_cannot_measure(tmp_path):
    data = (*TINY, "data=synthetic", "data.num_train=256", "data.batch_size=16")
    tool = "multigpu.tools.bench.step_profile"
    out = str(tmp_path / "kept")
    done = run_module(tool, "--first-step", "2", *data, "--steps", "4", "--out", out, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]  # options after the overrides too
    assert json.loads(done.stdout)["steps"] == 4
    assert "ms per step" in done.stderr
    refused_out = tmp_path / "refused" / "nested"  # both made, both taken away
    said = {
        "the window past the epoch": ("--first-step", "10", "--steps", "8"),
        "a kept run again": ("--first-step", "2", "--steps", "4", "--out", out),
        "a typo": ("--out", str(refused_out), "model.optimizer.fussed=false"),
    }
    lines, exits = {}, {}
    for case, options in said.items():
        done = run_module(tool, *options, *data, cwd=REPO)
        exits[case], lines[case] = done.returncode, done.stderr.strip().splitlines()[-1]
    assert exits == {"the window past the epoch": 1, "a kept run again": 2, "a typo": 2}
    # train.py's own line for what it was given, and nothing left of the --out it would use
    assert lines["a typo"].startswith("error: model.optimizer.fussed is not a setting")
    assert not refused_out.parent.exists()
    assert lines["the window past the epoch"].startswith(
        "error: the run's steps 10-25 are not all in one epoch (an evaluation came first)"
    )
    assert (
        lines["a kept run again"]
        == f"error: {out}/run holds an earlier measured run: pass another --out"
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("existing", [False, True])
def test_a_refused_measured_run_leaves_only_the_folders_that_were_there(existing, tmp_path):
    """train.py refuses a typo (exit 2): every folder the measuring run made for ``--out`` is
    taken away, its parents too, and one that existed keeps what it held."""
    from multigpu.config.errors import UserError
    from multigpu.tools.bench.instrumented import run_measured

    out = tmp_path / "kept" / "run"
    if existing:
        out.mkdir(parents=True)
        (out / "mine.txt").write_text("")
    with pytest.raises(UserError, match="model.optimizer.fussed"):
        run_measured("x.Y", {}, [*TINY, "model.optimizer.fussed=false"], out)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == (["kept", "kept/run", "kept/run/mine.txt"] if existing else [])
