"""The cost model of a data-parallel step: its formulas against step-by-step simulations,
the limits it must reach, the link fit, and the command on a real sweep of this machine."""

from __future__ import annotations

import json
import math

import pytest
from conftest import TINY, help_of, refusal_in, run_module, run_script

from multigpu.tools.predict.cost_model import (
    Cluster,
    Link,
    Workload,
    pipelined_broadcast,
    predict,
    ring_allreduce,
    speedup,
    step_s,
)
from multigpu.tools.predict.measure import SIZES, fit_link

LINK = Link("test", alpha_s=1e-5, beta=1e9)
WORK = Workload(
    "test",
    compute_s_per_sample=1e-4,
    fixed_s=2e-3,
    param_bytes=40_000_000,
    buffer_bytes=40_000,
    input_bytes_per_sample=3136,
    output_bytes_per_sample=40,
)


def simulated_ring_allreduce(link: Link, n: int, nbytes: float) -> float:
    """Reduce-scatter then allgather, step by step: each step every device sends one chunk
    to its neighbour, all at once; a step lasts one chunk's transfer."""
    chunk = nbytes / n
    elapsed = 0.0
    for _phase in ("reduce-scatter", "allgather"):
        for _step in range(n - 1):
            elapsed += link.alpha_s + chunk / link.beta
    return elapsed


@pytest.mark.parametrize("n", [2, 3, 8, 32])
def test_ring_allreduce_matches_a_step_by_step_ring(n):
    assert ring_allreduce(LINK, n, 1e8) == pytest.approx(simulated_ring_allreduce(LINK, n, 1e8))
    assert ring_allreduce(LINK, 1, 1e8) == 0.0


def test_pipelined_broadcast_tends_to_one_transfer_of_the_whole():
    assert pipelined_broadcast(LINK, 8, 1e9) == pytest.approx(7 * 1e-5 + 1.0)
    assert pipelined_broadcast(LINK, 1, 1e9) == 0.0


def test_one_device_is_compute_and_fixed_work_only():
    phases = predict("single", WORK, Cluster(1, 1, LINK), batch=256)
    assert step_s(phases) == pytest.approx(256 * 1e-4 + 2e-3)
    with pytest.raises(ValueError, match="one device"):
        predict("single", WORK, Cluster(2, 1, LINK), batch=256)
    with pytest.raises(ValueError, match="one node"):
        predict("dp", WORK, Cluster(2, 2, LINK), batch=256)


def test_ddp_waits_for_what_backward_cannot_hide():
    cluster = Cluster(4, 1, LINK)
    phases = predict("ddp", WORK, cluster, batch=1024)
    allreduce = ring_allreduce(LINK, 4, WORK.param_bytes)
    backward = 256 * 1e-4 * 2 / 3
    buckets = math.ceil(WORK.param_bytes / WORK.bucket_bytes)  # 2: half of backward hides it
    assert buckets == 2
    assert phases["allreduce_wait"] == pytest.approx(max(allreduce - backward / 2, allreduce / 2))
    one_bucket = Workload(**{**WORK.__dict__, "bucket_bytes": 10**9})
    assert predict("ddp", one_bucket, cluster, 1024)["allreduce_wait"] == pytest.approx(allreduce)
    slow = Link("between nodes", 1e-5, 1e8)
    two_nodes = predict("ddp", WORK, Cluster(2, 2, LINK, slow), batch=1024)
    assert two_nodes["allreduce_wait"] > phases["allreduce_wait"]  # the slowest link paces


def test_root_copies_add_up_one_after_another():
    n, batch = 4, 1024
    phases = predict("scatter_allreduce", WORK, Cluster(n, 1, LINK), batch)
    shard = batch / n
    assert phases["scatter"] == pytest.approx(3 * (1e-5 + shard * 3136 / 1e9))
    assert phases["reduce"] == pytest.approx(3 * (1e-5 + WORK.param_bytes / 1e9))
    assert phases["broadcast"] == pytest.approx(3 * (1e-5 + 40_040_000 / 1e9))
    dp = predict("dp", WORK, Cluster(n, 1, LINK), batch)
    assert "broadcast" not in dp
    assert dp["replicate"] == pytest.approx(3 * 1e-5 + 40_040_000 / 1e9)


def test_free_communication_scales_perfectly_and_shared_compute_not_at_all():
    free = Link("free", 0.0, math.inf)
    no_fixed = Workload(**{**WORK.__dict__, "fixed_s": 0.0})
    for strategy in ("ddp", "scatter_allreduce", "dp"):
        assert speedup(strategy, no_fixed, Cluster(8, 1, free), 256) == pytest.approx(8)
        shared = Cluster(8, 1, free, concurrent=1)  # CPU replicas taking turns
        assert speedup(strategy, no_fixed, shared, 256) == pytest.approx(1)
    assert speedup("ddp", WORK, Cluster(8, 1, LINK), 256) < 8


def test_link_fit_recovers_latency_and_bandwidth():
    alpha, beta = 3e-5, 2.5e9
    for share, messages in ((1.0, 1), (1.5, 6)):  # a copy; a ring allreduce over 4
        times = [messages * alpha + share * size / beta for size in SIZES]
        link = fit_link("fitted", times, share=share, messages=messages)
        assert link.alpha_s == pytest.approx(alpha)
        assert link.beta == pytest.approx(beta)
    noisy = [t * (1.02 if i % 2 else 0.98) for i, t in enumerate(times)]
    assert fit_link("noisy", noisy, 1.5, 6).beta == pytest.approx(beta, rel=0.05)


@pytest.mark.slow  # a cold process with matplotlib, 6 s: the arithmetic is tested above
@pytest.mark.subprocess
def test_gpu_prediction_prints_its_assumptions_and_plots(tmp_path):
    result = run_module("multigpu.tools.predict", "--plot", str(tmp_path / "p.png"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "predicted speedup over one GPU: d2l ResNet-18" in result.stdout
    assert "10x larger" in result.stdout and "assumptions:" in result.stdout
    assert "8 x 4 nodes" in result.stdout
    assert (tmp_path / "p.png").stat().st_size > 20_000
    bad = run_module("multigpu.tools.predict", "--check", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


@pytest.mark.slow  # a real sweep; the model's arithmetic is tested in-process above
@pytest.mark.subprocess
def test_check_against_a_real_sweep_of_this_machine(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *TINY, "data=synthetic", "data.num_train=512", "data.batch_size=64"]
    args += ["phases=true", "strategy=scatter_allreduce", "trainer.devices=1,2"]
    args += [f"hydra.sweep.dir={sweep}"]
    result = run_script("train.py", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    checked = run_module("multigpu.tools.predict", "--check", str(sweep), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    (line,) = [ln for ln in checked.stdout.splitlines() if ln.startswith("devices_2")]
    measured, predicted = (float(v) for v in line.split()[1:3])
    phases = json.loads((sweep / "devices_2" / "phases.json").read_text())
    assert measured == pytest.approx(phases["step_ms"]["mean_ms"], abs=0.06)
    assert predicted > 0 and "mean absolute error" in checked.stdout
    assert "measured link: memory copy" in checked.stdout


@pytest.mark.parametrize(
    "args,text",
    [
        (["--batch-per-device", "0"], "argument --batch-per-device: 0 is not an integer from 1"),
        (["--batch-per-device", "1.5"], "'1.5' is not an integer"),
        (["--gpu-images-per-s", "0"], "argument --gpu-images-per-s: 0 is not a number from 1"),
        (["--gpu-images-per-s", "inf"], "inf is not a number"),
        (["--fixed-ms", "-5"], "argument --fixed-ms: -5 is not a number from 0"),
        (["--fixed-ms", "nan"], "nan is not a number"),
        (["--plot", "notes.txt"], "argument --plot: notes.txt is not a .png file name"),
        (["--plot", "a-file/p.png"], "a-file is a file, not a folder"),
        (["--check", "nowhere"], "argument --check: nowhere is not a folder"),
        (["--gpu-image-per-s", "3"], "--gpu-image-per-s 3: did you mean --gpu-images-per-s?"),
    ],
)
def test_every_argument_is_checked_in_one_line(args, text, tmp_path, monkeypatch, capsys):
    from multigpu.tools.predict.__main__ import parse_args

    assert text in refusal_in(tmp_path, parse_args, args, monkeypatch, capsys)


def test_every_option_says_its_default(capsys):
    from multigpu.tools.predict.__main__ import parse_args

    shown = help_of(parse_args, capsys)
    for option, default in (("--gpu-images-per-s", 30000), ("--fixed-ms", 0.5)):
        assert f"{option} " in shown and f"(default: {default})" in shown
    assert "(default: 256)" in shown and "--check SWEEP_DIR" in shown and "--plot PNG" in shown


@pytest.mark.subprocess
def test_a_bad_argument_is_one_line_and_exit_2(tmp_path):
    result = run_module("multigpu.tools.predict", "--batch-per-device", "0", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "error: argument --batch-per-device: 0 is not an integer from 1 to 1048576"
    ]


def test_check_names_the_files_it_could_not_use(tmp_path, capsys):
    """A sweep whose phases.json are damaged: the refusal says which and why, not only that
    none was found."""
    from multigpu.tools.predict.__main__ import main

    job = tmp_path / "devices_2"
    job.mkdir()
    (job / "phases.json").write_text("[1, 2")
    (job / "metrics.json").write_text("{}")
    assert main(["--check", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("error: no multi-device job")
    assert "devices_2/phases.json" in said or "devices_2/metrics.json" in said, said
