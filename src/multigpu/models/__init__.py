from multigpu.models.resnet import Residual, resnet18

__all__ = ["Residual", "resnet18"]
