"""Start a real torchrun job and always clean it up.

The job starts through :func:`rankscope.lifetime.start` (a session of its own, the token its
workers inherit), so it dies with whatever started it. torchrun starts each worker as its own
session leader, so killing torchrun's process group does not reach them: :meth:`LaunchedJob.stop`
sends SIGTERM to torchrun (which forwards it) and to every process that carries the job's token
(workers and what they started, re-parented or not), then SIGKILL to what is left after the grace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Optional

from rankscope import lifetime
from rankscope.folding import RankSet
from rankscope.procs import ProcessTable

HANG_JOB = Path(__file__).with_name("hang_job.py")


@dataclass
class LaunchedJob:
    process: subprocess.Popen[bytes]
    workdir: Path
    nproc: int
    log_path: Path
    _seen: set[int] = field(default_factory=set)
    #: The launcher as :func:`rankscope.lifetime.start` started it: it and its workers carry its token,
    #: so they die with the process that started them, however it ends.
    child: Optional[lifetime.Child] = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def worker_pids(self) -> list[int]:
        """Direct children of the launcher: one per local rank."""
        pids = sorted(ProcessTable().children.get(self.pid, []))
        self._seen.update(pids)
        return pids

    def ready_ranks(self) -> list[int]:
        return sorted(int(p.name.split(".")[1]) for p in self.workdir.glob("ready.*"))

    def wait_ready(self, timeout: float = 120.0, settle: float = 0.5) -> None:
        """Wait until every rank reached its hang point, then ``settle`` more seconds."""
        deadline = time.monotonic() + timeout
        while len(self.ready_ranks()) < self.nproc:
            self.worker_pids()
            if self.process.poll() is not None:
                raise RuntimeError(f"job exited early with code {self.process.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                ready = RankSet.of(self.ready_ranks())
                raise TimeoutError(
                    f"only {ready.phrase() if ready else 'no rank'} became ready: {self.log_tail()}"
                )
            time.sleep(0.1)
        self.worker_pids()
        time.sleep(settle)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 5.0) -> None:
        """Terminate the job and everything it started. Safe to call twice."""
        if self.child is not None:  # SIGTERM to torchrun's group and to every process with its token
            self.child.end(grace)
        else:
            kill_tree(self.process, grace, known=self._seen)

    def __enter__(self) -> LaunchedJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def kill_tree(process: subprocess.Popen[bytes], grace: float = 5.0, known: Iterable[int] = ()) -> None:
    """SIGTERM the launcher, then SIGKILL it and every descendant's group (rankscope.lifetime.kill_tree)."""
    lifetime.kill_tree(process, grace, known)


def start_torchrun(
    script: Path = HANG_JOB,
    nproc: int = 4,
    script_args: Sequence[str] = (),
    workdir: Optional[Path] = None,
    python: str = sys.executable,
    torchrun_args: Sequence[str] = (),
    env: Optional[dict[str, str]] = None,
    stdout: Optional[IO[bytes]] = None,
    launcher: Optional[Sequence[str]] = None,
) -> LaunchedJob:
    """Start ``torchrun --standalone --nproc-per-node N script ...`` in its own session.

    ``launcher`` replaces everything before the script (e.g. ``accelerate launch ...``); it
    must start ``nproc`` workers. Output goes to ``workdir/job.log`` unless ``stdout`` is given.
    """
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rankscope-job-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in workdir.glob("ready.*"):
        stale.unlink()
    job_env = dict(os.environ if env is None else env)
    job_env["RANKSCOPE_READY_DIR"] = str(workdir)
    job_env.setdefault("OMP_NUM_THREADS", "1")
    log_path = workdir / "job.log"
    if launcher is None:
        launcher = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        launcher += torchrun_args
    argv = [*launcher, str(script), *script_args]
    log = stdout if stdout is not None else open(log_path, "wb")  # noqa: SIM115 - handed to the child
    try:
        child = lifetime.start(
            argv, None, env=job_env, capture=None, cwd=workdir, stdout=log, stderr=subprocess.STDOUT
        )
    finally:
        if stdout is None:
            log.close()
    return LaunchedJob(process=child.process, workdir=workdir, nproc=nproc, log_path=log_path, child=child)
