"""The training step never waits on the device: over a window of steady-state steps the only
host-device synchronisations are the ones a setting asks for every N steps (the divergence
check's read, the progress bar's loss), counted on the CPU by ``multigpu.callbacks.host_syncs``
(on a GPU, ``python -m multigpu.tools.bench.host_syncs`` counts CUDA's own)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import REPO, TINY, compose_config, run_module

from multigpu.callbacks.host_syncs import count_host_syncs
from multigpu.run.training import train

CPU = torch.device("cpu")
X = torch.arange(-3.0, 5.0)

# Each way of reading a tensor back to the host, as code writes it.
READS = {
    "item": lambda: X.sum().item(),
    "bool": lambda: bool(X.sum() > 0),
    "if": lambda: 1 if X.sum() else 0,
    "float": lambda: float(X.sum()),
    "int": lambda: int(X[0]),
    "index": lambda: [0, 1][X[0].long().clamp(0, 1)],
    "tolist": lambda: X.tolist(),
    "cpu": lambda: X.cpu(),
    "numpy": lambda: X.numpy(),
    "format": lambda: f"{X.sum():.2f}",
    "repr": lambda: repr(X),
    "unique": lambda: torch.unique(X),
    "nonzero": lambda: X.nonzero(),
    "masked_select": lambda: X.masked_select(X > 0),
    "boolean index": lambda: X[X > 0],
    "bincount": lambda: torch.bincount(X.long().clamp(min=0)),
    "all, then bool": lambda: bool(torch.isfinite(X).all()),
}


@pytest.mark.parametrize("read", list(READS.values()), ids=list(READS))
def test_each_kind_of_read_counts_once(read):
    with count_host_syncs(CPU) as count:
        read()
    assert count.syncs == 1, count.where
    (where,) = count.where
    assert "test_host_syncs.py" in where  # named by the line that asked for it


def test_work_that_stays_on_the_device_counts_nothing():
    with count_host_syncs(CPU) as count:
        y = (X * 2).relu().sum() / X.numel()
        torch.where(X > 0, X, -X).max(dim=0)
        torch.isfinite(y).all()
        X.argmax().unsqueeze(0)
    assert count.syncs == 0, count.where


def steps_where(first: int, last: int, every: int) -> int:
    """Steps ``first..last`` (counted from 1) after which a reader every ``every`` steps reads."""
    return sum(1 for step in range(first, last + 1) if step % every == 0)


@pytest.mark.parametrize(
    "layout",
    [["strategy=single"], ["strategy=scatter_allreduce", "trainer.devices=2"]],
    ids=["single", "scatter_allreduce"],
)
def test_steady_steps_wait_only_where_a_setting_asks(tmp_path, layout):
    """Steps 6 to 25 of a run with the progress bar and TensorBoard's logger: only the
    divergence check (every 7 steps) and the bar's loss (every 10) read from the device."""
    first, steps, check_every, redraw_every = 5, 20, 7, 10
    result = tmp_path / "syncs.json"
    overrides = [
        *[o for o in TINY if not o.startswith("callbacks.progress_bar")],
        *layout,
        "data=synthetic",
        "data.num_train=512",
        "data.num_test=32",
        "data.batch_size=16",
        f"check_finite_every_n_steps={check_every}",
        f"callbacks.progress_bar.refresh_rate={redraw_every}",
        "callbacks.test_figures=null",
        "+callbacks.syncs._target_=multigpu.callbacks.HostSyncCounter",
        f"+callbacks.syncs.first_step={first}",
        f"+callbacks.syncs.steps={steps}",
        "+callbacks.syncs.stop=true",
        f"+callbacks.syncs.path={result}",
    ]
    assert train(compose_config(overrides, tmp_path / "run"))["status"] == "completed"
    counted = json.loads(result.read_text())
    last = first + steps  # steps counted from 1: the window is first + 1 .. first + steps
    expected = {
        "DivergenceGuard.on_train_batch_end": steps_where(first + 1, last, check_every),
        "BarLoss.on_train_batch_end": steps_where(first + 1, last, redraw_every),
    }
    by_reader = {reader: 0 for reader in expected}
    for where, times in counted["where"].items():
        reader = next((r for r in expected if f"({r})" in where), where)
        by_reader[reader] = by_reader.get(reader, 0) + times
    assert counted["steps"] == steps
    assert by_reader == expected, counted["where"]
    assert counted["syncs"] == sum(expected.values())


def test_without_a_progress_bar_no_loss_is_read(tmp_path):
    """``callbacks.progress_bar=null`` means no bar, not Lightning's own redrawn every step."""
    result = tmp_path / "syncs.json"
    overrides = [
        *TINY,
        "data=synthetic",
        "data.num_train=256",
        "data.num_test=32",
        "data.batch_size=16",
        "check_finite_every_n_steps=1000",
        "+callbacks.syncs._target_=multigpu.callbacks.HostSyncCounter",
        "+callbacks.syncs.first_step=2",
        "+callbacks.syncs.steps=10",
        f"+callbacks.syncs.path={result}",
    ]
    assert train(compose_config(overrides, tmp_path / "run"))["status"] == "completed"
    counted = json.loads(result.read_text())
    assert counted["steps"] == 10 and counted["syncs"] == 0, counted["where"]


def test_the_bar_shows_each_batchs_own_loss_whatever_a_step_accumulates(tmp_path):
    """Before the first optimizer step the weights are the same whatever a step accumulates, so
    the bar's loss after batch 0 is the same number (Lightning hands callbacks the loss divided
    by the batches a step accumulates: the bar had shown half of it with 2)."""
    shown = {}
    for accumulate in (1, 2):
        log = tmp_path / f"bar_{accumulate}.txt"
        overrides = [
            *(o for o in TINY if not o.startswith("callbacks.progress_bar")),
            *("data=synthetic", "data.num_train=64", "data.num_test=16", "data.batch_size=16"),
            *("callbacks.progress_bar.refresh_rate=1", "callbacks.test_figures=null"),
            f"+trainer.accumulate_grad_batches={accumulate}",
            *("+callbacks.bar_log._target_=probes.BarLossLog", f"+callbacks.bar_log.path={log}"),
        ]
        run = compose_config(overrides, tmp_path / f"run_{accumulate}")
        assert train(run)["status"] == "completed"
        shown[accumulate] = [float(line) for line in log.read_text().split()]
    assert len(shown[1]) == len(shown[2]) == 4
    assert shown[2][0] == pytest.approx(shown[1][0], rel=1e-6)
    assert 1.5 < shown[1][0] < 3.5  # about ln(10): a fresh network's cross-entropy on 10 classes


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_command_prints_the_count_of_a_run(tmp_path):
    """What the GPU acceptance runs (there under CUDA's sync debug mode)."""
    done = run_module(
        "multigpu.tools.bench.host_syncs",
        *("--first-step", "3", "--steps", "12", "--out", str(tmp_path)),
        *(*TINY, "data=synthetic", "data.num_train=256", "data.batch_size=16"),
        "check_finite_every_n_steps=5",
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    assert printed["steps"] == 12 and printed["syncs"] == steps_where(4, 15, 5)
    assert printed["per_step"] == pytest.approx(printed["syncs"] / 12)
    assert printed["method"].endswith("(CPU)")
