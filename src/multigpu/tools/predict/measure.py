"""The cost model's inputs measured on this machine: a one-device run's phases, the network's
sizes, and the two links CPU runs use (memory copies in one process; gloo between processes)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from multigpu.models.phases import COMPUTE, DATA
from multigpu.tools.predict.cost_model import Link, Workload

INPUT_BYTES = 1 * 28 * 28 * 4  # one normalised Fashion-MNIST image, float32
# Message sizes, 4 KiB to 16 MiB: a line through their times gives alpha (its intercept)
# and beta (its slope).
SIZES = (4 * 2**10, 256 * 2**10, 2 * 2**20, 8 * 2**20, 16 * 2**20)


def network_bytes(width: int) -> tuple[int, int]:
    """(parameter bytes, floating-point buffer bytes) of the d2l ResNet-18 at ``width``."""
    from multigpu.models import resnet18

    net = resnet18(width=width)
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    buffers = sum(b.numel() * b.element_size() for b in net.buffers() if b.is_floating_point())
    return params, buffers


def workload_from_run(name: str, phases: dict[str, Any], run: dict[str, Any]) -> Workload:
    """Per-sample compute and per-step fixed work from a one-device run's ``phases.json``:
    the network's forward and backward scale with the batch, the rest of the step does not."""
    means = {n: p["mean_ms"] / 1000 for n, p in phases["phases"].items()}
    compute = sum(means.get(n, 0.0) for n in COMPUTE)
    fixed = sum(s for n, s in means.items() if n not in (*COMPUTE, DATA))
    params, buffers = network_bytes(run["width"])
    return Workload(
        name=name,
        compute_s_per_sample=compute / run["process_batch_size"],
        fixed_s=fixed,
        param_bytes=params,
        buffer_bytes=buffers,
        input_bytes_per_sample=INPUT_BYTES,
        output_bytes_per_sample=run.get("num_classes", 10) * 4,
    )


def fit_link(
    name: str, times: list[float], share: float = 1.0, messages: int = 1, sizes=SIZES
) -> Link:
    """alpha and beta from the times of ``sizes`` by least squares, for an operation that
    takes ``messages * alpha + share * size / beta`` (a copy: 1 and 1; a ring allreduce over
    N: ``2 (N - 1)`` messages and a share of ``2 (N - 1) / N``)."""
    n = len(sizes)
    mean_x, mean_y = sum(sizes) / n, sum(times) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, times, strict=True))
    slope /= sum((x - mean_x) ** 2 for x in sizes)
    intercept = mean_y - slope * mean_x
    return Link(name, max(intercept, 0.0) / messages, share / max(slope, 1e-15))


def _median_time(op, repeats: int) -> float:
    op()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        op()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def copy_link(repeats: int = 20) -> Link:
    """In one process: a copy between two tensors in memory (CPU replicas' transfers)."""
    timed = []
    for size in SIZES:
        src, dst = torch.ones(size // 4), torch.empty(size // 4)
        timed.append(_median_time(lambda s=src, d=dst: d.copy_(s), repeats))
    return fit_link("memory copy (this machine)", timed)


def _allreduce_worker(rank: int, world: int, init_file: str, repeats: int, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        timed = []
        for size in SIZES:
            tensor = torch.ones(size // 4)
            dist.barrier()
            timed.append(_median_time(lambda t=tensor: dist.all_reduce(t), repeats))
        if rank == 0:
            out.put(timed)
    finally:
        dist.destroy_process_group()


def gloo_link(repeats: int = 10) -> Link:
    """Between two processes of this machine: gloo's allreduce, as DDP on the CPU uses it."""
    context = mp.get_context("spawn")
    out = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        init_file = os.path.join(folder, "init")
        args = (2, init_file, repeats, out)
        processes = [context.Process(target=_allreduce_worker, args=(r, *args)) for r in (0, 1)]
        for process in processes:
            process.start()
        timed = out.get(timeout=120)
        for process in processes:
            process.join(timeout=60)
    return fit_link("gloo, 2 processes (this machine)", timed, share=1.0, messages=2)
