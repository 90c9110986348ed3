"""Pid 1 of one simulated node of bench/bench_multinode.py: starts the node's job and reaps what ends up under it.

    unshare --pid --fork --mount-proc --kill-child python -I -S node_init.py python fake_job.py --node-rank 3 ...

The init of a PID namespace inherits every orphan in it: here rankscope's guardian, which by
design may outlive the rankscope that started it. Without a reaper each would stay a zombie (the
job's launcher waits only for its own workers). Exits with the job's status when the job ends, at
once on SIGTERM, SIGINT or SIGHUP; the kernel then kills whatever is left in the namespace.
Standard library only, no site (``-I -S``): nothing of the job's or rankscope's is loaded here.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    argv = sys.argv[1:]
    if not argv:
        print("usage: node_init.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    job = os.fork()
    if job == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # pid 1 of a namespace gets no signal its handlers do not ask for: these must be handled.
        signal.signal(signum, lambda *_: os._exit(0))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == job:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code  # killed by a signal: 128 + its number


if __name__ == "__main__":
    sys.exit(main())
