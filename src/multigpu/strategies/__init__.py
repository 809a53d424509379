from multigpu.strategies.ddp import ddp
from multigpu.strategies.devices import trainer_devices
from multigpu.strategies.dp import data_parallel
from multigpu.strategies.scatter_allreduce import scatter_allreduce
from multigpu.strategies.single import single_device

__all__ = ["data_parallel", "ddp", "scatter_allreduce", "single_device", "trainer_devices"]
