"""`rankscope rerun`: run a failed program again synchronously (CUDA_LAUNCH_BLOCKING=1) or on CPU,
find the error in its own code, and say where it disagrees with the first (asynchronous) run."""
