"""Loader settings that follow the machine: ``data.num_workers`` and ``data.pin_memory`` left
null are chosen from the machine the run resolves on (its cores, a GPU present), and recorded
with the run; set, they stand."""

from __future__ import annotations

import pytest
from conftest import compose_config, examples, resolve_on
from hypothesis import given
from hypothesis import strategies as st

from multigpu.config.settings import loader_defaults


@pytest.mark.parametrize(
    "overrides,gpus,cores,expected",
    [
        (["experiment=d2l"], 1, 16, (8, True)),  # the d2l recipe on a lent H100 machine
        (["experiment=d2l", "trainer.accelerator=cpu"], 0, 2, (2, False)),  # this laptop-like one
        (["experiment=fast"], 1, 16, (0, False)),  # the in-memory pipeline: no loader processes
        (["strategy=ddp", "trainer.devices=8"], 8, 16, (2, True)),  # 8 processes share 16 cores
        (["data.num_workers=3", "data.pin_memory=false"], 1, 16, (3, False)),  # as set
    ],
    ids=["d2l_h100", "d2l_cpu", "fast_memory", "ddp_x8", "set_by_hand"],
)
def test_the_loader_follows_the_machine(overrides, gpus, cores, expected, tmp_path):
    run = resolve_on(compose_config(overrides, tmp_path), cuda_devices=gpus, cpu_cores=cores)
    assert (run.num_workers, run.pin_memory) == expected
    assert (run.record()["num_workers"], run.record()["pin_memory"]) == expected


@examples(50)
@given(
    cores=st.integers(1, 512),
    processes=st.integers(1, 64),
    pipeline=st.sampled_from(["torchvision", "memory"]),
    accelerator=st.sampled_from(["cpu", "cuda"]),
)
def test_the_chosen_workers_fit_the_cores(cores, processes, pipeline, accelerator):
    """Never more loader processes than 8 per training process, nor (past the floor of 2)
    more than the cores each process can spare; none for data already in memory; pinned
    only where there is a GPU to copy to."""
    data = {"pipeline": pipeline, "num_workers": None, "pin_memory": None}
    workers, pin = loader_defaults(data, accelerator, cores, processes)
    if pipeline == "memory":
        assert (workers, pin) == (0, False)
        return
    assert 2 <= workers <= 8 and (workers == 2 or workers <= cores // processes - 1)
    assert pin == (accelerator == "cuda")
