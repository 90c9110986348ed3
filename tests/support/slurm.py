"""A real single-node SLURM cluster (munge + slurmctld + slurmd) in a scratch directory.

Clients (sbatch, squeue, srun, rankscope) need :attr:`SlurmCluster.env` (it carries
``SLURM_CONF``). :meth:`SlurmCluster.stop` cancels jobs, then kills the daemons by process
group and every process that still carries this cluster's ``SLURM_CONF`` (job steps,
slurmstepd): nothing is found by name, so another test's cluster is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import psutil
from tests.support.sshd import free_port


@dataclass
class SlurmCluster:
    workdir: Path
    conf: Path
    env: dict[str, str]
    node: str = "localhost"
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *argv: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def sbatch(self, script: Path, *args: str) -> str:
        out = self.run("sbatch", "--parsable", *args, str(script)).stdout.strip()
        return out.split(";", 1)[0]

    def job_state(self, jobid: str) -> str:
        return self.run("squeue", "-h", "-j", jobid, "-o", "%T", check=False).stdout.strip()

    def wait_state(self, jobid: str, state: str = "RUNNING", timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while (current := self.job_state(jobid)) != state:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {jobid} is {current!r}, not {state}: {self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log"):
            with contextlib.suppress(OSError):
                tails.append(name + ": " + " | ".join((self.workdir / name).read_text().splitlines()[-5:]))
        return "\n".join(tails)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--user", "root", timeout=10, check=False)
            time.sleep(0.5)
        for daemon in reversed(self.daemons):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in reversed(self.daemons):
            try:
                daemon.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait(5)
        self.kill_leftovers()

    def kill_leftovers(self) -> None:
        marker = f"SLURM_CONF={self.conf}"
        for proc in psutil.process_iter(["pid"]):
            if proc.pid == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in environ:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc.pid, signal.SIGKILL)


def _wait(predicate: object, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def start_slurm(workdir: Path, cpus: int = 2, env: Optional[dict[str, str]] = None) -> SlurmCluster:
    workdir.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (workdir / sub).mkdir(exist_ok=True)
    munge_dir = workdir / "munge"
    munge_dir.chmod(0o755)  # munged refuses a socket directory not executable by all
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = munge_dir / "munge.socket"
    conf = workdir / "slurm.conf"
    ctld_port, slurmd_port = free_port(), free_port()
    conf.write_text(
        "\n".join(
            [
                "ClusterName=rankscope-test",
                "SlurmctldHost=localhost(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={socket_path}",
                f"StateSaveLocation={workdir / 'state'}",
                f"SlurmdSpoolDir={workdir / 'spool'}",
                f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
                f"SlurmdPidFile={workdir / 'slurmd.pid'}",
                f"SlurmctldLogFile={workdir / 'slurmctld.log'}",
                f"SlurmdLogFile={workdir / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=none",
                "ReturnToService=2",
                f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
                "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    cluster_env = dict(os.environ if env is None else env)
    cluster_env["SLURM_CONF"] = str(conf)
    cluster = SlurmCluster(workdir=workdir, conf=conf, env=cluster_env)

    def daemon(*argv: str) -> None:
        log = open(workdir / f"{Path(argv[0]).name}.out", "wb")  # noqa: SIM115 - owned by the child
        cluster.daemons.append(
            subprocess.Popen(
                list(argv), env=cluster_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        log.close()

    try:
        daemon(
            "munged", "-F", "--force", f"--socket={socket_path}", f"--key-file={key}",
            f"--log-file={munge_dir / 'munged.log'}", f"--pid-file={munge_dir / 'munged.pid'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
        )  # fmt: skip
        _wait(socket_path.exists, f"munged did not start: {(workdir / 'munged.out')}")
        daemon("slurmctld", "-D", "-f", str(conf))
        daemon("slurmd", "-D", "-f", str(conf), "-N", "localhost")

        def idle() -> bool:
            for proc in cluster.daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args} exited with {proc.returncode}: {cluster.log_tail()}")
            state = cluster.run("sinfo", "-h", "-o", "%t", check=False, timeout=10).stdout.strip()
            return state.startswith("idle")

        _wait(idle, "SLURM did not become idle", timeout=60)
    except BaseException:
        cluster.stop()
        raise
    return cluster
