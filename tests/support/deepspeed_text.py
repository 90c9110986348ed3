"""DeepSpeed's launcher (``deepspeed.launcher.launch``) as it prints a node's failure, for tests that
read logs: its spawn lines, ``Killing subprocess`` lines and its report."""

from __future__ import annotations


def deepspeed_node(workers: int, traceback: str, code: int = 1, last: str = "") -> str:
    """DeepSpeed's launcher with ``workers`` workers, one of which fails: its report's command list
    is the last one it built (the highest local rank's), whichever failed."""
    spawn = "[2026-11-20 10:00:00,10{n}] [INFO] [launch.py:256:main] process 500{n} spawned with command: "
    spawn += "['python3', '-u', 'train.py', '--local_rank={n}']\n"
    kill = "[2026-11-20 10:05:00,200] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 500{n}\n"
    top = last or str(workers - 1)
    return (
        "".join(spawn.format(n=n) for n in range(workers))
        + traceback
        + "".join(kill.format(n=n) for n in range(workers))
        + "[2026-11-20 10:05:00,300] [ERROR] [launch.py:325:sigkill_handler] "
        + f"['python3', '-u', 'train.py', '--local_rank={top}'] exits with return code = {code}\n"
    )
