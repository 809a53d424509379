"""How a step is spread over devices: DataParallel, scatter-allreduce and DDP (with rank 0's
watch over its peers), on device-agnostic collectives."""

from multigpu.strategies.ddp import BoundedDDPStrategy
from multigpu.strategies.dp import DataParallelStrategy
from multigpu.strategies.scatter_allreduce import ScatterAllreduceStrategy

__all__ = ["BoundedDDPStrategy", "DataParallelStrategy", "ScatterAllreduceStrategy"]
