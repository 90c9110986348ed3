"""rankscope: find out what is wrong with a multi-node, multi-GPU PyTorch job."""

__version__ = "0.1.0"
