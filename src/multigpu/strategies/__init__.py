from multigpu.strategies.ddp import BoundedDDPStrategy
from multigpu.strategies.dp import DataParallelStrategy
from multigpu.strategies.scatter_allreduce import ScatterAllreduceStrategy

__all__ = ["BoundedDDPStrategy", "DataParallelStrategy", "ScatterAllreduceStrategy"]
