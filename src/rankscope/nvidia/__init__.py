"""The one reader of this node's NVIDIA GPUs, shared by `stacks` (is a waiting rank's GPU busy?) and
`doctor` (is the node healthy?): NVML (nvidia-ml-py) where it is installed, ``nvidia-smi -q -x``
otherwise (:func:`rankscope.nvidia.read.read_nvidia`); the parsers are pure (:mod:`.nvsmi`, :mod:`.nvml`)."""
