"""A data-parallel step's time, predicted phase by phase from a few measured or given numbers.

Communication follows the alpha-beta (latency-bandwidth) cost model: moving ``n`` bytes over
a link costs ``alpha + n / beta``. A ring allreduce of ``S`` bytes over ``N`` devices takes
``2 (N - 1)`` steps of ``S / N`` bytes each: ``2 (N - 1) alpha + 2 (N - 1) / N * S / beta``,
which is why NCCL reports *bus* bandwidth as the algorithm bandwidth times ``2 (N - 1) / N``:
``beta`` here is a link's bus bandwidth in that sense.

Each strategy's pattern:
- ``single``: compute, then the per-step fixed work (loss, optimizer).
- ``ddp``: each device computes its share; gradients go in buckets (25 MiB by default) whose
  ring allreduce runs beside the rest of backward; what is left after backward is the wait.
  Buffers (BatchNorm statistics) are broadcast from rank 0 before each forward. Over several
  nodes the ring's slowest link, the network between nodes, sets the pace.
- ``scatter_allreduce`` (one process, one node): the root copies each device its shard, gathers
  the outputs, then after backward takes each device's gradients (reduce) and after the step
  sends each its new weights and buffers (broadcast); every copy goes through the root's link,
  one after the other, and none overlaps computation.
- ``dp`` (DataParallel): as above, except that the network is replicated to every device
  each step (a pipelined broadcast of weights and buffers) and no broadcast follows the step.

Left out: the host's time to launch kernels (one thread launches every replica in ``dp`` and
``scatter_allreduce``), compute efficiency that changes with the per-device batch, contention
between copies and kernels, stragglers, and the data pipeline (``data`` is not predicted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MiB = 2**20


@dataclass(frozen=True)
class Link:
    name: str
    alpha_s: float  # latency per message
    beta: float  # bytes per second


@dataclass(frozen=True)
class Workload:
    """One device's work per sample and per step, and what a step moves."""

    name: str
    compute_s_per_sample: float  # forward and backward
    fixed_s: float  # per step whatever the batch: loss and metrics, optimizer, framework
    param_bytes: int
    buffer_bytes: int
    input_bytes_per_sample: int
    output_bytes_per_sample: int
    backward_share: float = 2 / 3  # of the compute: backward is about twice the forward
    bucket_bytes: int = 25 * MiB  # DDP's default bucket_cap_mb


@dataclass(frozen=True)
class Cluster:
    devices_per_node: int
    nodes: int
    intra: Link  # between devices of a node (or, in one process, between their memories)
    inter: Link | None = None  # between nodes
    concurrent: int | None = None  # devices computing at once at full speed (None: all)

    @property
    def devices(self) -> int:
        return self.devices_per_node * self.nodes


def compute_s(work: Workload, cluster: Cluster, samples_per_device: float) -> float:
    """Time for every device's share: devices beyond ``concurrent`` wait their turn."""
    rounds = math.ceil(cluster.devices / (cluster.concurrent or cluster.devices))
    return rounds * samples_per_device * work.compute_s_per_sample


def copies(link: Link, count: int, nbytes: float) -> float:
    """``count`` copies of ``nbytes`` one after another through one link."""
    return count * (link.alpha_s + nbytes / link.beta)


def ring_allreduce(link: Link, n: int, nbytes: float) -> float:
    if n < 2:
        return 0.0
    return 2 * (n - 1) * link.alpha_s + 2 * (n - 1) / n * nbytes / link.beta


def pipelined_broadcast(link: Link, n: int, nbytes: float) -> float:
    if n < 2:
        return 0.0
    return (n - 1) * link.alpha_s + nbytes / link.beta


def predict(strategy: str, work: Workload, cluster: Cluster, batch: int) -> dict[str, float]:
    """Predicted seconds per phase of one step at global ``batch`` (names as ``phases=true``
    records them); raises ValueError for a layout the strategy cannot run."""
    n = cluster.devices
    if strategy == "single" and n != 1:
        raise ValueError("single runs on one device")
    if strategy in ("scatter_allreduce", "dp") and cluster.nodes > 1:
        raise ValueError(f"{strategy} runs in one process, on one node")
    per_device = batch / n
    compute = compute_s(work, cluster, per_device)
    forward, backward = compute * (1 - work.backward_share), compute * work.backward_share
    phases = {"forward": forward, "backward": backward, "optimizer": work.fixed_s}
    if n == 1 or strategy == "single":
        return phases
    link = cluster.inter if cluster.nodes > 1 and cluster.inter else cluster.intra
    if strategy == "ddp":
        allreduce = ring_allreduce(link, n, work.param_bytes)
        buckets = max(1, math.ceil(work.param_bytes / work.bucket_bytes))
        beside = backward * (1 - 1 / buckets)  # backward left after the first bucket is ready
        phases["allreduce_wait"] = max(allreduce - beside, allreduce / buckets)
        phases["forward"] += pipelined_broadcast(link, n, work.buffer_bytes)
        return phases
    shard = per_device
    phases["scatter"] = copies(link, n - 1, shard * work.input_bytes_per_sample)
    phases["gather"] = copies(link, n - 1, shard * work.output_bytes_per_sample)
    phases["reduce"] = copies(link, n - 1, work.param_bytes)
    weights = work.param_bytes + work.buffer_bytes
    if strategy == "dp":
        phases["replicate"] = pipelined_broadcast(link, n, weights)
    else:
        phases["broadcast"] = copies(link, n - 1, weights)
    return phases


def step_s(phases: dict[str, float]) -> float:
    return sum(phases.values())


def speedup(strategy: str, work: Workload, cluster: Cluster, batch_per_device: int) -> float:
    """Samples per second on the cluster over one device's, each device keeping its batch
    (as d2l doubles the batch with the GPUs)."""
    one = Cluster(1, 1, cluster.intra, concurrent=1)
    alone = step_s(predict("single", work, one, batch_per_device)) / batch_per_device
    batch = batch_per_device * cluster.devices
    return alone / (step_s(predict(strategy, work, cluster, batch)) / batch)
