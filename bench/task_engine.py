"""rankscope with ClusterShell's Task as its fan-out engine, to measure it beside the hand-written one.

    .venv/bin/python bench/task_engine.py exec --hosts node[01-32] --via ssh -- date

Runs the rankscope CLI unchanged except for ``run_on_nodes``: the same per-node argv (our ssh
with ``-v`` and the start/exit markers, ``--`` before the node), the same classifier, but the
processes are started, read, timed out and reaped by ClusterShell's engine (one ExecWorker, one
client per node, ``fanout`` and per-node ``timeout`` from the Task). ClusterShell's ExecWorker runs
a *string* through ``sh -c`` with ``%h`` replaced; ``_build_cmd`` is overridden here to hand it our
argv list instead (no local shell). Used by bench/bench_multinode.py (``--engines``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ClusterShell.Task import task_self
from ClusterShell.Worker.Exec import ExecClient, ExecWorker

import rankscope.cluster.run
from rankscope.cluster.classify import NodeResult, classify
from rankscope.cluster.fanout import NodeTransport


class _ArgvClient(ExecClient):  # type: ignore[misc]
    def _build_cmd(self) -> tuple[list[str], Optional[dict[str, str]]]:
        return self.worker.argv[self.key], self.worker.env_changes


class _ArgvWorker(ExecWorker):  # type: ignore[misc]
    SHELL_CLASS = _ArgvClient

    def __init__(self, argv: dict[str, list[str]], env_changes: Optional[dict[str, str]], **kwargs: Any):
        self.argv = argv
        self.env_changes = env_changes
        super().__init__(",".join(argv), handler=None, command="%h", stderr=True, **kwargs)


def _text(buffer: Any) -> str:
    # Task keeps lines without their newline; put them back as the transport printed them.
    text = bytes(buffer).decode(errors="replace") if buffer else ""
    return text + "\n" if text else ""


def run_on_nodes_with_task(
    transport: NodeTransport, nodes: Sequence[str], script: str, **options: Any
) -> list[NodeResult]:
    """rankscope.cluster.fanout.run_on_nodes (same arguments), on ClusterShell's engine."""
    budget = min(options["node_timeout"], options.get("overall_timeout") or float("inf"))
    progress: Optional[Callable[[str], None]] = options.get("progress")
    task = task_self()
    task.set_info("fanout", options["fanout"])
    env = transport.env()
    argv = {node: transport.node_argv(node, script) for node in nodes}
    began = time.monotonic()
    worker = _ArgvWorker(argv, env, timeout=budget)
    worker.set_write_eof()  # stdin: nothing to send
    task.schedule(worker)
    task.resume()
    elapsed = time.monotonic() - began
    timed_out = {str(node) for node in worker.iter_keys_timeout()}
    results = []
    for node in nodes:
        if node in timed_out:
            rc = None
        else:
            rc = worker.node_retcode(node)
        stdout = _text(worker.node_buffer(node))
        stderr = _text(worker.node_error_buffer(node))
        results.append(classify(node, rc, stdout, stderr, node in timed_out, budget, elapsed))
    if progress is not None:
        progress(f"{len(results)}/{len(nodes)} nodes")
    on_result: Optional[Callable[[NodeResult], NodeResult]] = options.get("on_result")
    return [on_result(r) for r in results] if on_result is not None else results


def main() -> None:
    rankscope.cluster.run.run_on_nodes = run_on_nodes_with_task  # type: ignore[assignment]
    from rankscope.cli.node import main as cli_main  # the console script's entry

    sys.argv[0] = "rankscope"
    sys.exit(cli_main())


if __name__ == "__main__":
    main()
