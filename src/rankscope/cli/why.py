"""`rankscope why`: one verdict from every signal of a job (docs/why.md).

The command line becomes one frozen :class:`WhyRequest`; this node's pass is rankscope.why.collect,
`--from DIR` rankscope.why.saved, and a multi-node run derives every node's command line
(``why --local --json ...``) from the same WhyOptions, as `stacks` does.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import click

from rankscope.cli.cluster_options import cluster_options, cluster_requested, cluster_target, node_argv
from rankscope.cli.exit_help import epilog
from rankscope.cli.outfiles import FORCE_OPTION, check_out_dir
from rankscope.cli.params import from_params
from rankscope.cli.pictures import HTML_OPTION, WHY_FOLDED_OPTION, check_page_path
from rankscope.cli.stacks_cluster import REMOTE_RANKSCOPE_OPTION
from rankscope.why.options import DEFAULT_TIMEOUT, WhyOptions

if TYPE_CHECKING:
    from rankscope.cluster.run import ClusterTarget
    from rankscope.why.report import WhyReport
    from rankscope.why.signals import Gathered


@dataclass(frozen=True)
class WhyRequest:
    options: WhyOptions
    cluster: Optional[ClusterTarget] = None
    as_json: bool = False
    out_dir: Optional[Path] = None
    force: bool = False
    local: bool = False
    remote_rankscope: str = "rankscope"
    from_dir: Optional[Path] = None
    #: --html FILE: also write the report as a page; --folded: print collapsed stacks instead.
    html: Optional[Path] = None
    folded: bool = False

    def node_argv(self) -> list[str]:
        """The command line every node of a multi-node run gets, derived from :attr:`options`."""
        assert self.cluster is not None
        return node_argv(self.remote_rankscope, self.options, self.cluster)


def read_request(params: Mapping[str, Any]) -> WhyRequest:
    cluster = cluster_target(params) if cluster_requested(params) and not params["local"] else None
    return from_params(WhyRequest, params, options=from_params(WhyOptions, params), cluster=cluster)


def _log_from(values: tuple[str, ...]) -> tuple[str, ...]:
    from rankscope.why.output import log_starts

    try:
        log_starts(values)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--log-from") from None
    return values


HELP = """Why is the job stuck or dead? One verdict from every signal: the culprit
rank(s), the cause, the line of your code, and the evidence, each line naming its source.

With no target, looks at the distributed job on this node. In one pass, within
--timeout: every rank's stacks (py-spy, or the in-process handler where py-spy is
refused), the flight recorders (live from ranks started with RANKSCOPE_INPROC=1,
or --fr dumps), progress markers, the node's GPUs (utilisation, memory, ECC
errors, their processes), the ranks that already ended (exit status) and their
crash/SIGTERM dumps, torchelastic error files, the job's output (found without
asking: the launcher's stdout/stderr when they are files, torchrun --log-dir,
SLURM's StdOut/StdErr; or --log) with the scheduler's words in it, kernel
messages (OOM kills, segfaults, NVIDIA Xid), cores written since the job started
(or --cores DIR) and trace rings (those the ranks hold open and the ones written
beside them; or --trace DIR). A signal that is absent or refused is a line of
the report, never a failure.

\b
Examples:
  rankscope why                              # the job on this node
  rankscope why --pid 4242                   # a launcher (its workers) or one worker
  rankscope why --log job.log                # a job that is gone: its output
  rankscope why --log job.log --fr /tmp/fr/ --cores /var/crash/
  rankscope why --log job.log --trace traces/  # + where each rank's trace ring last was
  rankscope why --json | jq .verdict         # schema rankscope.why/1 (docs/why.md)
  rankscope why --out bundle/                # every raw signal kept (private; secrets removed)
  rankscope why --from bundle/               # weigh a kept bundle (or a stacks --out dir) again
  rankscope why --hosts node[1-4]            # every node (each runs why --local --json)
  rankscope why --html why.html              # + one self-contained page with the pictures
  rankscope why --from bundle/ --html why.html
  rankscope why --folded | flamegraph.pl > hang.svg  # collapsed stacks of the ranks

Exit code 15 means a cause was named, 0 that nothing wrong was seen, 4 that the
evidence is too partial to judge.
"""

COLLECTING = {
    "pids": "--pid", "logs": "--log", "log_from": "--log-from", "since": "--since", "fr": "--fr", "cores": "--cores", "trace": "--trace", "out_dir": "--out",
}  # fmt: skip


@click.command(help=HELP, epilog=epilog("why"))
@click.option(
    "--pid", "pids", type=int, multiple=True, metavar="PID", help="A launcher or worker pid (repeatable)."
)
@click.option(
    "--log", "logs", multiple=True, metavar="FILE", help="The job's output: a file or directory (repeatable)."
)
@click.option(
    "--log-from",
    "log_from",
    multiple=True,
    metavar="FILE:BYTES",
    callback=lambda _ctx, _param, value: _log_from(value),
    help="Read the output file FILE from byte BYTES on (what `watch` passes after an elastic restart; repeatable).",
)
@click.option(
    "--since",
    type=float,
    default=None,
    metavar="EPOCH",
    help="Skip what the job left before this time (seconds since the epoch): rank dumps, error files, "
    "cores, output files not written since (what `watch` passes after an elastic restart).",
)
@click.option("--fr", metavar="DUMPS", default=None, help="Flight-recorder dumps (a directory or PREFIX).")
@click.option("--cores", metavar="DIR", default=None, help="A directory of the job's core files.")
@click.option(
    "--trace", metavar="DIR", default=None, help="The job's trace rings (`rankscope trace run --out DIR`)."
)
@click.option(
    "--from",
    "from_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    default=None,
    help="Weigh a `why --out` bundle, a `stacks --out` directory or a capture again, instead of collecting.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.5),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="One deadline for the whole pass.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema rankscope.why/1).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Keep every raw signal here as a bundle (mode 0700/0600; secret-looking variables removed).",
)
@FORCE_OPTION
@HTML_OPTION
@WHY_FOLDED_OPTION
@click.option("--local", is_flag=True, help="Only this node (the default without --hosts/--jobid).")
@cluster_options
@REMOTE_RANKSCOPE_OPTION
@click.option(
    "--slurm-job", metavar="JOBID", hidden=True, help="Only processes of SLURM job JOBID on this node."
)
def why(**params: Any) -> int:
    from rankscope.stacks.local import process_started

    started = process_started() or time.monotonic()
    request = read_request(params)
    if request.folded and request.as_json:
        raise click.UsageError(
            "--folded prints collapsed stacks instead of the report; --json cannot be used with it"
        )
    check_page_path(request.html)
    if request.from_dir is not None:
        given = [flag for name, flag in COLLECTING.items() if params.get(name)]
        if given or cluster_requested(params):
            raise click.UsageError(
                f"--from reads a kept bundle; {', '.join(given) or '--hosts'} cannot be used with it"
            )
        from rankscope.why.saved import read_from

        gathered = read_from(request.from_dir)
        return finish(request, gathered, started)
    check_out_dir(request.out_dir, request.force)
    if request.cluster is not None:
        from rankscope.cli.why_cluster import run_cluster_why

        gathered, signum = run_cluster_why(request)
        code = finish(request, gathered, started)
        return 128 + signum if signum else code
    from rankscope.cli.progress import tty_progress
    from rankscope.lifetime import StopSignals
    from rankscope.why.collect import gather_local

    progress = tty_progress()
    from rankscope.cli.why_jobs import several_jobs

    several = several_jobs(request)
    try:
        with StopSignals() as stop:
            if several:
                from rankscope.why.several import gather_each

                collected = gather_each(several, request.options, progress, stop)
            else:
                gathered = gather_local(
                    request.options, progress, stop, for_head=request.local and request.as_json
                )
    finally:
        if progress is not None:
            progress.clear()
    if several:
        from rankscope.cli.why_jobs import show_each

        code = show_each(request, several, collected, started)
        return 128 + stop.signum if stop.signum else code
    gone = bad_pids(request, gathered)
    if gone:
        from rankscope.errors import BadInputError

        raise BadInputError(f"{gone}: no such process (it exited or never existed)",
                            "a job that is gone: rankscope why --log ITS_OUTPUT (--fr DUMPS, --cores DIR)")  # fmt: skip
    code = finish(request, gathered, started)
    from rankscope.cli.daily_prune import after_report

    after_report()  # once a day, after the report (docs/inproc.md, "Pruning")
    if stop.signum:
        sys.stderr.write(f"rankscope: interrupted by {stop.name}: the report covers what was collected\n")
        return 128 + stop.signum
    return code


def bad_pids(request: WhyRequest, gathered: Gathered) -> str:
    """Every --pid named is gone and nothing else was named: the pids, for one error line; "" otherwise."""
    from rankscope.model import FailureKind

    stacks = gathered.stacks
    if not request.options.pids or request.options.post_mortem_only or request.options.logs:
        return ""
    if stacks is None or stacks.processes or not stacks.failures:
        return ""
    if all(f.kind == FailureKind.GONE for f in stacks.failures):
        return ", ".join(f.target for f in stacks.failures)
    return ""


def finish(request: WhyRequest, gathered: Gathered, started: float) -> int:
    """Weigh, print (text or JSON), keep the bundle (--out); the exit code."""
    from rankscope.why.render import render_text
    from rankscope.why.report import exit_code, report_document
    from rankscope.why.weigh import weigh

    if request.out_dir is not None and gathered.environ:
        from rankscope.why.secrets import without_secrets

        removed = without_secrets(gathered.environ)[1]
        if removed:
            gathered.notes.append(
                f"bundle: secret-looking variables removed from environment.txt: {', '.join(removed)}"
            )
    report = weigh(gathered, time.monotonic() - started)
    document = report_document(report)
    text = render_text(report) if not request.as_json or request.out_dir is not None else ""
    if request.out_dir is not None:
        from rankscope.cli.why_out import write_bundle

        write_bundle(request.out_dir, gathered, document, text, request.force)
    if request.as_json:
        sys.stdout.write(json.dumps(document, indent=None if request.local else 2) + "\n")
    elif request.folded:
        print_folded(report, request.out_dir)
    else:
        sys.stdout.write(text)
        if request.out_dir is not None:
            sys.stdout.write(f"\nbundle: {request.out_dir}/\n")
    sys.stdout.flush()
    if request.html is not None:  # after the report: a page that cannot be written loses nothing printed
        from rankscope.cli.pictures import write_why_page

        write_why_page(request.html, report)
    return exit_code(report)


def print_folded(report: WhyReport, out_dir: Optional[Path]) -> None:
    """--folded: the collapsed stacks alone on stdout; what else there is to say goes to stderr."""
    from rankscope.cli.pictures import folded_text

    if report.stacks is not None and report.stacks.groups:
        sys.stdout.write(folded_text(report.stacks, full=False))
    else:
        sys.stderr.write("rankscope: --folded: no stacks were read, nothing to fold (see `rankscope why`)\n")
    if out_dir is not None:
        sys.stderr.write(f"rankscope: bundle: {out_dir}/\n")
