"""`rankscope stacks --hosts/--hostfile/--jobid`: every node collects, the caller merges.

Each node answers with its raw material (``rankscope.stacks.node/1``: its processes, failures and
py-spy's dumps; rankscope.cluster.node_answer derives its groups), or with the whole
``rankscope.stacks/1`` document (a node that ran the full pipeline, or an older rankscope);
:func:`merge_reports` joins them and the caller diagnoses once. A node that does
not answer with stacks becomes a :class:`Failure` whose ``stage`` is how far it got,
the rungs of the manual "date, then pgrep, then py-spy" ladder:

    unreachable -> auth refused -> no rankscope there -> no job found -> dump failed
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from rankscope.cluster.classify import NodeResult, clean_reason, last_line
from rankscope.cluster.gather import group_failures
from rankscope.cluster.run import ClusterTarget, run_remote
from rankscope.lifetime import StopSignals
from rankscope.model import Failure, NodeStatus, Stage

if TYPE_CHECKING:  # the reading of answers is imported once the nodes run (rankscope.cli.stacks_cluster)
    from rankscope.stacks.options import StacksOptions
    from rankscope.stacks.report import StacksReport

#: The remote rankscope's exit code (docs/exit-codes.md) -> (stage, reason, hint) when it sent no stacks.
_REMOTE_EXIT: dict[int, tuple[Stage, str, str]] = {
    3: (
        Stage.NO_JOB,
        "no distributed job on this node",
        "is the job running here? try `rankscope exec ... -- pgrep -a python`",
    ),
    5: (
        Stage.DUMP_FAILED,
        "every dump failed",
        "see the node's failures above, or run `rankscope stacks` there",
    ),
    6: (
        Stage.DUMP_FAILED,
        "py-spy is not installed there",
        "pip install py-spy on the node (or fix PATH with --remote-setup)",
    ),
    7: (
        Stage.DUMP_FAILED,
        "permission denied (ptrace)",
        "run as the job's user or root; see ptrace_scope in docs/stacks.md",
    ),
    126: (
        Stage.NO_RANKSCOPE,
        "rankscope is there but cannot run",
        "check --remote-rankscope points to an executable",
    ),
    127: (
        Stage.NO_RANKSCOPE,
        "rankscope not found",
        "install it there, or pass --remote-rankscope PATH / --remote-setup",
    ),
}


@dataclass
class ClusterStacks:
    report: StacksReport
    nodes: list[NodeResult]
    node_failures: list[Failure]
    #: Every answering node's ranks' flight-recorder entries (``fr_records`` of its document).
    fr_records: list[Any] = field(default_factory=list)

    @property
    def answered(self) -> list[str]:
        return [r.node for r in self.nodes if r.stage is Stage.OK]

    def node_statuses(self) -> list[NodeStatus]:
        return [NodeStatus(r.node, r.stage, r.returncode, r.reason, r.elapsed) for r in self.nodes]


def _parse_report(stdout: str) -> Optional[StacksReport]:
    from rankscope.cluster.node_answer import load_answer

    text = stdout.strip()
    if not text:
        return None
    try:
        return load_answer(json.loads(text))
    except (ValueError, KeyError, TypeError):
        # A login banner or an rc-file echo may come first: try from the first "{" at a line start.
        match = re.search(r"^\{", text, re.MULTILINE)
        if match and match.start() > 0:
            try:
                return load_answer(json.loads(text[match.start() :]))
            except (ValueError, KeyError, TypeError):
                return None
        return None


def classify_node(result: NodeResult) -> tuple[NodeResult, Optional[StacksReport]]:
    """A node's stacks answer -> (its result with the stage refined by the remote exit code, its report).

    Pure: ``result`` is not changed. A node whose transport failed or timed out keeps its stage.
    """
    if result.returncode is None:
        return result, None
    report = _parse_report(result.stdout)
    status = result.returncode
    stderr_tail = clean_reason(last_line(result.stderr), result.node)

    def refined(stage: Stage, reason: str = "", hint: str = "") -> NodeResult:
        return replace(result, stage=stage, reason=reason, hint=hint)

    # 126/127 from sh; other shells (csh: exit 1, "Command not found.") are recognised by their words,
    # but never when rankscope itself answered with one of its own exit codes (6: py-spy not found).
    not_found_words = re.search(r"not found|No such file", stderr_tail) and status not in _REMOTE_EXIT
    if status in (126, 127) or (report is None and not_found_words):
        stage, reason, hint = _REMOTE_EXIT[126 if status == 126 else 127]
        return refined(stage, f"{reason}: {stderr_tail}" if stderr_tail else reason, hint), None
    if report is not None and any(p.dumped for p in report.processes):
        return refined(Stage.OK), report
    if status in _REMOTE_EXIT:
        stage, reason, hint = _REMOTE_EXIT[status]
        if report is not None and report.failures and status != 3:
            # The node's rankscope read the cause there (another tracer, another user's job, yama
            # scope): its words and its fix say more than the exit code does.
            first = report.failures[0]
            reason += f": {first.reason}"
            hint = first.hint or hint
        return refined(stage, reason, hint), None
    if report is None:
        reason = (
            f"exit {status}: {stderr_tail}" if stderr_tail else f"exit {status} and no stacks JSON on stdout"
        )
        hint = "is the remote rankscope the same version? run `rankscope stacks --local --json` there"
        return refined(Stage.BAD_ANSWER if status == 0 else Stage.COMMAND_FAILED, reason, hint), None
    return refined(Stage.OK), report


def relabel_host(report: StacksReport, node: str) -> StacksReport:
    """Name every rank of a node's report by the node name the user gave (node01, not node01.ib.local).

    Also keeps ranks apart when several nodes report the same host name (containers, aliases):
    pids are only unique per node, and the merge tells members apart by host.
    """
    report.hosts = [node]
    for process in report.processes:
        process.rank = replace(process.rank, host=node)
    for group in report.groups:
        group.members = [replace(m, host=node) for m in group.members]
    for job in report.jobs:
        job.host = node
    for stray in report.strays or []:
        stray.host = node
    report.failures = [
        replace(f, rank=replace(f.rank, host=node) if f.rank else None, target=f"{node}: {f.target}")
        for f in report.failures
    ]
    return report


def node_failures(results: Sequence[NodeResult]) -> list[Failure]:
    """One Failure per (stage, reason) with the folded node list as its target."""
    return [
        Failure(target=group.nodes, stage=group.stage, reason=group.reason, hint=group.hint)
        for group in group_failures(results)
    ]


def stacks_remote(
    target: ClusterTarget,
    argv: Sequence[str],
    progress: Optional[Callable[[str], None]] = None,
    stop: Optional[StopSignals] = None,
    shell: bool = True,
    keep: bool = False,
) -> ClusterStacks:
    """Run ``argv`` (a ``rankscope stacks --local --json`` command line) on every node and merge the answers.

    ``shell``: where the options allow it, every node runs the POSIX sh collector
    (rankscope.stacks.shell_node) instead, which hands over to ``argv`` itself where it must; a node
    whose snapshot cannot say it all (rankscope.stacks.shell_answer.NeedsNode) is asked again with
    ``argv``, within what is left of the run's time (``keep``: each node's output is that answer's
    JSON, for --out). Failed nodes are listed last with their stage;
    after a signal recorded by ``stop``, the nodes that had not answered are ``interrupted`` and the
    others are merged as usual.
    """
    from rankscope.stacks.options import StacksOptions
    from rankscope.stacks.shell_node import new_nonce, shell_argv, takes

    options = StacksOptions.from_argv(list(argv[1:]))
    if not shell or options is None or not takes(list(argv)):
        return join_answers(run_remote(target, list(argv), progress, stop))
    began = time.monotonic()
    command = shell_argv(list(argv), new_nonce())
    known: dict[str, StacksReport] = {}
    again: list[str] = []

    def read(result: NodeResult) -> NodeResult:  # as each node ends, while the others run
        read_result, report, needs = read_snapshot(result, options, keep)
        if report is not None:
            known[result.node] = report
        if needs:
            again.append(result.node)
        return read_result

    results = run_remote(target, command, progress, stop, on_result=read)
    answers = {r.node: r for r in results}
    again = [r.node for r in results if r.node in again]  # in node order, each once
    if again and not (stop is not None and stop.signum):
        left = target.overall_timeout
        if left is not None:
            left = max(1.0, left - (time.monotonic() - began))
        subset = replace(target, hosts=",".join(again), hostfile=None, overall_timeout=left)
        for result in run_remote(subset, list(argv), progress, stop):
            answers[result.node] = result
    return join_answers([answers[r.node] for r in results], known)


def read_snapshot(
    result: NodeResult, options: StacksOptions, keep: bool = False
) -> tuple[NodeResult, Optional[StacksReport], bool]:
    """A node's shell answer read as the Python node's answer would be: its result (the exit code that
    answer would have had; with ``keep``, that answer's JSON as its output, which --out writes), its
    report, and whether only that node's own rankscope can answer. Other answers are left as they are."""
    from rankscope.stacks.node import node_document
    from rankscope.stacks.shell_answer import NeedsNode, is_snapshot, node_report, node_run

    if result.returncode != 0 or not is_snapshot(result.stdout):
        return result, None, False
    from rankscope.errors import ExitCode

    try:
        local = node_run(result.stdout, options)
        if not any(o.snapshot is not None for _, o in local.outcomes):
            return result, None, True  # every dump ran out of time: the node's own exit code and words say so
        stdout = json.dumps(node_document(local), separators=(",", ":")) if keep else result.stdout
        # What the node's `stacks --local --json --node-answer` exits with when a dump succeeded
        # (rankscope.cli.outcome.exit_code: a node's answer leaves missing ranks to the head).
        code = int(ExitCode.PARTIAL if local.report.failures else ExitCode.OK)
        report = node_report(local)
    except NeedsNode:
        return result, None, True
    except Exception:  # noqa: BLE001 - a snapshot cut short or misread costs a second connection, never the run
        return result, None, True
    return replace(result, stage=Stage.OK, stdout=stdout, returncode=code), report, False


def join_answers(
    node_results: Sequence[NodeResult], known: Optional[dict[str, StacksReport]] = None
) -> ClusterStacks:
    """Every node's answer read (its raw material or its whole document; ``known``: the reports of
    nodes already read, by node), relabelled and merged; the failed nodes listed last with their stage."""
    from rankscope.stacks.merge import merge_reports

    known = known or {}
    answers = [
        (result, known[result.node]) if result.node in known else classify_node(result)
        for result in node_results
    ]
    results = [result for result, _ in answers]
    reports = [relabel_host(report, result.node) for result, report in answers if report is not None]
    merged = merge_reports(reports)
    failures = node_failures(results)
    merged.failures.extend(failures)
    records = [r.fr_records for r in reports if r.fr_records is not None]
    merged.fr_records = None
    return ClusterStacks(report=merged, nodes=results, node_failures=failures, fr_records=records)
