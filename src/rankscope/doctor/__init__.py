"""`rankscope doctor`: is this node ready to run and debug a distributed PyTorch job? One checklist.

``system.py`` reads the node through small injectable readers, ``facts.py`` gathers what the checks
need, ``checks.py`` turns facts into PASS/WARN/FAIL verdicts with their fix (pure), ``nvsmi.py`` and
``nvml.py`` read the NVIDIA GPUs, ``render.py`` formats.
"""
