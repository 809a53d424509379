from multigpu.callbacks.epoch_timer import EpochTimer
from multigpu.callbacks.metrics_file import MetricsFile

__all__ = ["EpochTimer", "MetricsFile"]
