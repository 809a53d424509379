"""Data-parallel training of ResNet-18 on Fashion-MNIST, configured with Hydra."""

__version__ = "0.1.0"
