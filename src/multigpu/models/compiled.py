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
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn

COMPILE_DEFAULTS = {"dynamic": False}
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
