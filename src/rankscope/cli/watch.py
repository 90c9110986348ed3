"""`rankscope watch`: run (or attach to) a job, and capture it when it stalls, straggles or loses a rank.

The watching is rankscope.watch's; this module reads the command line into :class:`WatchOptions`,
starts the job (the one child meant to outlive rankscope: ``lifetime.start_detached``), and picks
the capture command from the verbs this rankscope has.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.exit_help import epilog
from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, MissingToolError
from rankscope.watch.capture import STACKS, WHY
from rankscope.watch.model import WatchOptions

HELP = """Run a job (or watch a running one) and capture it the moment it stalls,
straggles or loses a rank, before a collective timeout or the launcher kills it.

\b
Examples:
  rankscope watch -- torchrun --nproc-per-node 8 train.py   # run the job under watch
  rankscope watch --stall 120 --out caps/ -- srun python train.py
  rankscope watch --pid 4242                # watch a running launcher (or worker)
  rankscope watch --jobid 81234             # a SLURM job: its ranks here, captures of every node
  rankscope watch --jobid "$SLURM_JOB_ID" -- srun python train.py   # in an sbatch script
  rankscope watch --inproc -- torchrun ...  # + every rank's stacks at its teardown
  rankscope watch --then kill -- torchrun ...  # end the job after a stall, straggler or death capture

A stall is noticed from the ranks' progress markers (rankscope.progress(step=...)),
or, in a job that records none, from its output files going silent, or, with
neither, from the ranks' flight recorders (--inproc) showing no new collective; it is then
confirmed by two non-blocking stack samples (py-spy --nonblocking: no rank is
stopped) before a capture (`rankscope why`) is written into a new timestamped
directory under --out. Each capture prints one line on stderr and appends one
JSON line to OUT/index.jsonl. Until something looks wrong the watcher only reads
/proc and small files (about 0.1% of one core for 16 ranks). The job's output goes
straight to the terminal (never through the watcher), SIGINT and SIGTERM are passed
on to it, its exit code is the watcher's, and it keeps running if the watcher dies.
SIGUSR1 to the watcher captures at once (rankscope launch --watch wires SLURM's
time-limit warning to it). See docs/watch.md.
"""


def capture_verb() -> str:
    """``why`` when this rankscope has it (its verb table, read once), else ``stacks``."""
    from rankscope.cli.main import VERBS

    return WHY if WHY in VERBS else STACKS


def _job_env(inproc: bool) -> Optional[dict[str, str]]:
    if not inproc:
        return None
    return {**os.environ, "RANKSCOPE_INPROC": "1"}


@click.command(help=HELP, epilog=epilog("watch"), context_settings={"ignore_unknown_options": False})
@click.option(
    "--stall",
    type=click.FloatRange(1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds without progress (markers, else output files, else flight recorders) that make a stall.",
)
@click.option(
    "--straggler-steps",
    type=click.IntRange(0),
    default=20,
    show_default=True,
    metavar="N",
    help="A rank this many steps behind the most advanced one is a straggler (0: off).",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.05),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between looks at the job (exits are noticed at once).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("rankscope-watch"),
    show_default=True,
    metavar="DIR",
    help="Where captures and index.jsonl go (created 0700).",
)
@click.option(
    "--max-captures",
    type=click.IntRange(0),
    default=10,
    show_default=True,
    metavar="N",
    help="Captures at most (bounded disk); later triggers are only noted.",
)
@click.option(
    "--then",
    type=click.Choice(["watch", "kill"]),
    default="watch",
    show_default=True,
    help="After a stall, straggler or death capture: go on watching, or SIGTERM the job.",
)
@click.option(
    "--capture-timeout",
    type=click.FloatRange(1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Deadline of one capture.",
)
@click.option("--pid", type=int, default=None, metavar="PID", help="Watch this running launcher or worker.")
@click.option(
    "--jobid",
    default=None,
    metavar="JOBID",
    help="A SLURM job: watch its ranks on this node and capture every node (why --jobid); alone it attaches, with -- LAUNCHER ARGS it also runs them.",
)
@click.option(
    "--inproc",
    is_flag=True,
    help="Start the job with RANKSCOPE_INPROC=1 (each rank dumps its stacks on SIGTERM and fatal signals).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def watch(**params: Any) -> int:
    command: tuple[str, ...] = params["command"]
    if (params["pid"] is not None) + (params["jobid"] is not None) + bool(command) != 1 and not (
        params["jobid"] is not None and command and params["pid"] is None
    ):
        raise click.UsageError(
            "give -- LAUNCHER ARGS..., or --pid PID, or --jobid JOBID (with or without -- LAUNCHER ARGS...)"
        )
    options = from_params(WatchOptions, params)
    from rankscope.watch.index import private_dir
    from rankscope.watch.loop import JobHandle, Watcher

    try:
        out = private_dir(params["out"])
    except OSError as exc:
        raise BadInputError(
            f"cannot use --out {params['out']}: {exc.strerror or exc}", "pass a directory of yours"
        ) from exc
    if params["pid"] is not None:
        from rankscope.watch.collect import alive

        if not alive(params["pid"]):
            raise BadInputError(f"no process with pid {params['pid']}", "check the pid with ps or pgrep")
        job = JobHandle([params["pid"]])
    elif params["jobid"] is not None and not command:
        from rankscope.cluster.slurm_local import slurm_job_pids

        job = JobHandle(slurm_job_pids(params["jobid"]), jobid=params["jobid"])
    else:
        from rankscope import lifetime

        try:
            process = lifetime.start_detached(list(command), env=_job_env(params["inproc"]))
        except FileNotFoundError as exc:
            raise MissingToolError(command[0], "check the command's name, or give its path") from exc
        except OSError as exc:
            raise BadInputError(
                f"cannot run {command[0]}: {exc.strerror or exc}", "check the command"
            ) from exc
        job = JobHandle([process.pid], process, params["jobid"])

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    code = Watcher(job, out, capture_verb(), options, say).run()
    from rankscope.cli.daily_prune import after_report

    after_report()  # once a day, when the watching is over (docs/inproc.md, "Pruning")
    return code
