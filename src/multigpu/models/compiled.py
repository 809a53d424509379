"""``torch.compile`` as this project uses it: one graph per network, compiled for the training
step's one shape, and the compile time counted apart from the epochs.

- ``dynamic=False``: every shape is compiled as it is. Dynamo would otherwise turn the batch
  dimension symbolic at the first batch of another size (an epoch's short last batch) and
  recompile the whole network for symbolic shapes, slowly (inductor's ``pow_by_natural``
  warnings on an H100). Training batches all have one shape with ``data.drop_last=true``.
- Evaluation runs the network eagerly (``eager``): in eval mode BatchNorm is another graph, and
  the test set is a small share of the work. A network that recompiled past dynamo's limit
  falls back to compiling its blocks one by one, which is what ran on the first H100.
- ``compile_seconds``: dynamo's own account of the time spent compiling (frames and their
  backward), which ``EpochTimer`` takes out of the epoch's time.
- ``warm_up``: what a compiled step still pays at its first calls, after dynamo's compile
  (CUDA graphs recorded, cuDNN's and Triton's autotuning), paid before the first epoch and
  counted with the compile time (on one device: ``ImageClassifier.on_train_start``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn

COMPILE_DEFAULTS = {"dynamic": False}
# CUDA graph trees run a new graph once, record it at its second call and replay it from the
# third: the first step that runs as every later one does.
WARMUP_CALLS = 3
# Dynamo's cumulative timers (nanoseconds) that together are the time spent compiling.
COMPILE_TIMERS = ("entire_frame_compile", "entire_backward_compile")


def compile_network(net: nn.Module, options: dict[str, Any]) -> None:
    """Compile ``net`` in place (``nn.Module.compile`` keeps its ``state_dict`` keys)."""
    if not torch.cuda.is_available():
        # Inductor imports torch.utils.cpp_extension, which warns on a machine without a GPU
        # that "No CUDA runtime is found": about building CUDA extensions, which a CPU compile
        # never does, and read by users of a recipe's CPU form as something gone wrong.
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    net.compile(**{**COMPILE_DEFAULTS, **options})


def is_compiled(net: nn.Module) -> bool:
    return getattr(net, "_compiled_call_impl", None) is not None


def eager(net: nn.Module, images: Tensor) -> Tensor:
    """``net`` on ``images`` without its compiled graph: its own ``forward``, as written."""
    return net.forward(images) if is_compiled(net) else net(images)


def compile_seconds() -> float:
    """Seconds this process has spent compiling so far (0 where dynamo keeps no account)."""
    try:
        from torch._dynamo.utils import cumulative_time_spent_ns
    except ImportError:  # a torch without the account: compile time stays in the epochs
        return 0.0
    return sum(cumulative_time_spent_ns.get(key, 0.0) for key in COMPILE_TIMERS) / 1e9


def compile_counts() -> dict[str, int]:
    """Dynamo's counters: graphs compiled, graph breaks, frames it gave up on."""
    from torch._dynamo.utils import counters

    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompile_limit_hits": counters["frames"].get("recompile_limit", 0)
        + counters["frames"].get("cache_size_limit", 0),
    }


def warm_up(
    net: nn.Module,
    batch: tuple[Tensor, Tensor],
    loss: Callable[[Tensor, Tensor], Tensor],
    autocast: Callable[[], AbstractContextManager],
) -> float:
    """Seconds spent running the compiled ``net``'s forward and backward ``WARMUP_CALLS``
    times on ``batch`` (a training batch's shape, strides and device, its values aside), then
    undoing what they did: BatchNorm's running statistics copied back in place (a CUDA graph
    reads them where it recorded them). No optimizer step, no random number drawn: training
    then computes what it would have computed without it. Each pass's gradients are dropped
    before the next, as a training step's are: replayed as CUDA graphs they live in the graphs'
    memory, which the next replay writes over, and a backward accumulating into them failed
    ("accessing tensor output of CUDAGraphs that has been overwritten", one H200)."""
    started = time.perf_counter()
    buffers = [buffer.detach().clone() for buffer in net.buffers()]
    for _ in range(WARMUP_CALLS):
        with autocast():
            value = loss(net(batch[0]), batch[1])
        value.backward()
        net.zero_grad(set_to_none=True)
    with torch.no_grad():
        for buffer, saved in zip(net.buffers(), buffers, strict=True):
            buffer.copy_(saved)
    if batch[0].device.type == "cuda":
        torch.cuda.synchronize(batch[0].device)  # the recording and autotuning are done
    return time.perf_counter() - started
