"""The command line every node of a multi-node `why` gets reads back to the same options."""

from __future__ import annotations

import os
from pathlib import Path

from rankscope.cli.why import read_request, why
from rankscope.why.options import WhyOptions


def _parsed(argv: list[str]) -> WhyOptions:
    context = why.make_context("why", argv)
    return read_request(context.params).options


def test_every_option_reaches_the_nodes() -> None:
    options = WhyOptions(
        pids=(4, 5),
        logs=("a.log", "b.log"),
        log_from=("/x/a:b.log:12",),
        since=1764117915.25,
        fr="/fr/",
        cores="/c",
        timeout=7.5,
        slurm_job="12",
    )
    argv = options.to_argv()
    assert argv[:3] == ["why", "--local", "--json"]
    assert _parsed(argv[1:]) == options


def test_a_node_finishes_before_the_caller_drops_it() -> None:
    assert WhyOptions(timeout=60).for_node(10).timeout == 7.0
    assert WhyOptions().to_argv() == ["why", "--local", "--json"]


def test_the_page_and_the_folded_stacks_are_made_where_why_runs(tmp_path: Path) -> None:
    page = tmp_path / "why.html"
    context = why.make_context("why", ["--hosts", "node[1-2]", "--html", str(page), "--folded", "--pid", "4"])
    request = read_request(context.params)
    assert request.html == page and request.folded and request.cluster is not None
    argv = request.node_argv()
    assert "--html" not in argv and "--folded" not in argv and str(page) not in argv, argv
    assert argv[1:] == ["why", "--local", "--json", "--pid", "4"], argv


EARLIER_ATTEMPT = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/job/train.py", line 9, in <module>
[rank1]:     bad_batch(3)
[rank1]:   File "/job/train.py", line 5, in bad_batch
[rank1]:     raise RuntimeError("bad batch at step 3")
[rank1]: RuntimeError: bad batch at step 3
"""


def test_log_from_reads_the_output_from_that_byte_and_names_it_so(tmp_path: Path) -> None:
    """What `watch` passes after an elastic restart: the earlier attempt's traceback is before the
    byte, so it is not the verdict of the workers that run now; without it, it is."""
    from rankscope.why.output import log_starts, read_logs
    from rankscope.why.signals import Gathered
    from rankscope.why.weigh import weigh

    log = tmp_path / "job.log"
    log.write_text(EARLIER_ATTEMPT + "[rank0]: step 1\n[rank1]: step 1\n")
    whole = Gathered()
    read_logs([str(log)], whole)
    verdict = weigh(whole).verdict
    assert verdict is not None and verdict.cause == "python_exception" and verdict.ranks == [1]
    since = Gathered()
    read_logs([str(log)], since, starts=log_starts([f"{log}:{len(EARLIER_ATTEMPT)}"]))
    assert weigh(since).verdict is None
    [signal] = [s for s in since.signals if s.name == "job output"]
    assert f"{log} (from byte {len(EARLIER_ATTEMPT)})" in signal.detail, signal.detail


def test_since_leaves_out_the_output_files_not_written_since(tmp_path: Path) -> None:
    """A torchrun --log-dir after a restart: attempt_0's files (the earlier attempt's traceback)
    were last written before the restart, attempt_1's after it."""
    import os

    from rankscope.why.output import read_logs
    from rankscope.why.signals import Gathered
    from rankscope.why.weigh import weigh

    run = tmp_path / "logs" / "run-1"
    earlier, current = run / "attempt_0" / "1", run / "attempt_1" / "1"
    for directory in (earlier, current):
        directory.mkdir(parents=True)
    (earlier / "stderr.log").write_text(EARLIER_ATTEMPT)
    (current / "stderr.log").write_text("[rank1]: step 1\n")
    restart = (current / "stderr.log").stat().st_mtime - 5
    os.utime(earlier / "stderr.log", (restart - 10, restart - 10))
    whole = Gathered()
    read_logs([str(tmp_path / "logs")], whole)
    verdict = weigh(whole).verdict
    assert verdict is not None and verdict.ranks == [1]  # without it, the earlier attempt's
    since = Gathered()
    read_logs([str(tmp_path / "logs")], since, since=restart)
    assert weigh(since).verdict is None
    [signal] = [s for s in since.signals if s.name == "job output"]
    assert "1 traceback" not in signal.detail, signal.detail


def test_a_log_from_without_its_byte_is_a_bad_command_line() -> None:
    import click
    import pytest

    with pytest.raises(click.BadParameter, match="is not FILE:BYTES"):
        why.make_context("why", ["--log-from", "job.log"])


AGENT_FAILED = (
    "E1127 06:30:29.590000 5801 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
    "local_rank: 1 (pid: 5805) of binary: /venv/bin/python3\n"
)


def test_a_running_jobs_output_is_read_from_torchruns_last_restart(tmp_path: Path) -> None:
    """`why` on a job that runs on after torchrun restarted its workers (seen on a real torch 2.13
    job, ``--max-restarts 1``: its agent's failed-attempt line, no INFO restart line) reads the
    output from there, as `--log-from` would: the earlier attempt's traceback is not the verdict of
    the workers that run now. A file without such a line, or a line of no agent, is read whole."""
    from rankscope.why.output import restart_starts

    log = tmp_path / "job.log"
    log.write_text(EARLIER_ATTEMPT + AGENT_FAILED + "[rank0]: resuming\n")
    plain = tmp_path / "plain.log"
    plain.write_text(EARLIER_ATTEMPT + "a line that says failed (exitcode: 1) but is nobody's agent\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # never opened: a pipe has no writer to wait for here
    starts = restart_starts([str(log), str(plain), str(tmp_path / "gone.log"), str(fifo), str(tmp_path)])
    assert starts == {str(log.resolve()): len(EARLIER_ATTEMPT) + len(AGENT_FAILED)}
    # the line may be cut across the windows the file is read in
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * ((1 << 20) - 40) + b"\n" + AGENT_FAILED.encode() + b"tail\n")
    assert restart_starts([str(big)]) == {str(big.resolve()): (1 << 20) - 39 + len(AGENT_FAILED)}


def test_an_agent_line_written_after_the_running_workers_started_is_their_own_teardown(
    tmp_path: Path,
) -> None:
    """`why --pid` while torchrun tears down the attempt that runs: its failed-attempt line is that
    attempt's, not a restart, so the traceback before it is read (seen while watching a real job)."""
    import time

    from rankscope.why.output import restart_starts

    log = tmp_path / "job.log"
    log.write_text(EARLIER_ATTEMPT + AGENT_FAILED)
    written = time.mktime((time.localtime().tm_year, 11, 27, 6, 30, 29, 0, 0, -1))
    if written > time.time() + 86400:  # the line names no year: the latest 27 Nov not after today
        written = time.mktime((time.localtime().tm_year - 1, 11, 27, 6, 30, 29, 0, 0, -1))
    assert restart_starts([str(log)], started=written + 60) == {str(log.resolve()): log.stat().st_size}
    assert restart_starts([str(log)], started=written - 60) == {}
