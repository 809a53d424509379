from multigpu.strategies.single import single_device

__all__ = ["single_device"]
