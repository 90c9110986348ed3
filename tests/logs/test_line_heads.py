"""The heads a log's transport puts before each line (containers, Kubernetes, the journal), and the
line rules added for formats of public threads: watchdog wordings, a CUDA error of the watchdog
thread, InfiniBand completion errors, launcher scripts in a traceback. Pure functions, no jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.line_findings import line_findings
from tests.support.torchrun_text import failure_summary

from rankscope.evidence import CULPRIT, VICTIM, Finding, Kind, decide
from rankscope.logs.heads import sniff_head
from rankscope.logs.line_evidence import LineEvidence
from rankscope.logs.prefixes import PLAIN, SourceLabels, sniff_dialect, split_line, tally_lines
from rankscope.logs.roles import is_user_frame
from rankscope.logs.tracebacks import FrameLine


def _strip(data: bytes) -> bytes:
    head = sniff_head(data)
    assert head is not None
    return head.strip(data)


def test_kubectl_timestamps_are_removed_before_the_prefix() -> None:
    data = b"2025-03-04T07:12:01.482913201Z [default1]:step 1\n2025-03-04T07:12:01.5Z [default0]:step 1\n"
    assert sniff_head(data).name == "kubectl-timestamps"  # type: ignore[union-attr]
    assert _strip(data) == b"[default1]:step 1\n[default0]:step 1\n"


def test_cri_lines_lose_their_head_and_partial_lines_are_joined() -> None:
    data = (
        b"2024-08-21T13:02:47.9+00:00 stdout P [default0]:loss 0.\n"
        b"2024-08-21T13:02:47.9+00:00 stdout F 876\n"
        b"2024-08-21T13:02:48.0Z stderr F [default1]:Traceback (most recent call last):\n"
        b"2024-08-21T13:02:48.1Z stdout P [default0]:cut at the end of the block"
    )
    assert sniff_head(data).name == "cri"  # type: ignore[union-attr]
    assert _strip(data) == (
        b"[default0]:loss 0.876\n[default1]:Traceback (most recent call last):\n"
        b"[default0]:cut at the end of the block"
    )
    # a block ends a line: a partial line last in the block keeps its newline
    assert _strip(b"2024-08-21T13:02:48.1Z stdout P [default0]:x\n") == b"[default0]:x\n"


def test_docker_json_entries_are_decoded_and_split_lines_joined() -> None:
    entries = [
        {"log": "[default1]:\x1b[31mValueError\x1b[0m: bad\n", "stream": "stderr", "time": "t"},
        {"log": "[default0]:a long line split by the dae", "stream": "stdout", "time": "t"},
        {"log": "mon\n", "stream": "stdout", "time": "t"},
    ]
    data = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in entries)
    data += b'{"log": not json}\n'
    assert sniff_head(data).name == "docker-json"  # type: ignore[union-attr]
    assert _strip(data) == (
        b"[default1]:\x1b[31mValueError\x1b[0m: bad\n[default0]:a long line split by the daemon\n"
        b'{"log": not json}\n'
    )


@pytest.mark.parametrize(
    "line",
    [
        b"Nov 26 03:14:05 gpu-a3 torchrun[81700]: [default1]:text\n",
        b"Nov  6 03:14:05 gpu-a3 kernel: [default1]:text\n",
        b"2026-11-26T03:14:05+0000 gpu-a3 python3[7]: [default1]:text\n",
    ],
)
def test_journal_heads_are_removed(line: bytes) -> None:
    assert sniff_head(line * 3).name == "journal"  # type: ignore[union-attr]
    assert _strip(line) == b"[default1]:text\n"


@pytest.mark.parametrize(
    "data",
    [
        b"[default0]:2024-05-01T10:00:01.000Z step 1\n",  # a time after the prefix is the line's own
        b"Fri Aug 11 12:31:45 2023[1,0]<stdout>:x\n",  # Open MPI --timestamp-output: read elsewhere
        b"2024-05-01 10:00:01,000 INFO step 1\n",  # a logger's time: no T, no zone
        b"",
    ],
)
def test_lines_without_a_transport_head_are_left_alone(data: bytes) -> None:
    assert sniff_head(data) is None


def test_a_head_on_a_minority_of_lines_is_not_taken() -> None:
    data = b"2025-03-04T07:12:01Z one stamped line\n[default0]:a\n[default1]:b\n"
    assert sniff_head(data) is None


def _errors(tmp_path: Path, text: str) -> dict[str, Any]:
    """``logs errors --json`` of a log holding ``text``."""
    log = tmp_path / "job.log"
    log.write_text(text)
    data: dict[str, Any] = run_cli("logs", "errors", str(log), "--json").json()
    return data


def _said(data: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    return tuple(data["verdict"][key] for key in keys)


def _evidence(text: str) -> list[Finding]:
    return line_findings(text)


def test_timeout_at_nccl_work_is_a_watchdog_timeout_with_its_sequence_number() -> None:
    findings = _evidence(
        "[rank1]:[E0611 22:40:31.770 ProcessGroupNCCL.cpp:1709] [PG 2 Rank 1] Timeout at NCCL work: 308, "
        "last enqueued NCCL work: 309, last completed NCCL work: 307.\n"
        "[rank3]:[E0611 22:40:31.771 ProcessGroupNCCL.cpp:1709] [PG 2 Rank 3] Timeout at NCCL work: 308, "
        "last enqueued NCCL work: 309, last completed NCCL work: 307.\n"
    )
    verdict = decide(findings)
    assert verdict is not None
    assert (verdict.cause, verdict.ranks, verdict.where) == ("watchdog_timeout", "1,3", "SeqNum=308")


def test_a_line_naming_the_collective_completes_one_that_did_not_and_is_no_desync() -> None:
    findings = _evidence(
        "[rank1]:[E0611 22:40:31.770 ProcessGroupNCCL.cpp:1709] [PG 0 Rank 1] Timeout at NCCL work: 8, x\n"
        "[rank1]:[E0611 22:40:31.771 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for x\n"
        "[rank0]:[E0611 22:40:31.772 ProcessGroupNCCL.cpp:1709] [PG 0 Rank 0] Timeout at NCCL work: 8, x\n"
    )
    verdict = decide(findings)
    assert verdict is not None
    assert (verdict.cause, verdict.where, verdict.ranks) == ("watchdog_timeout", "SeqNum=8 ALLREDUCE", "0-1")


def test_a_cuda_error_of_the_watchdog_thread_is_the_rank_s_own_error_and_beats_the_timeouts() -> None:
    findings = _evidence(
        "[default3]:[rank3]:[E0917 03:44:09.1 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
        "Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
        "encountered\n"
        "[default3]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated "
        "with exception: CUDA error: an illegal memory access was encountered\n"
        "[default0]:[rank0]:[E0917 03:54:09.5 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=6) ran for x\n"
    )
    cuda = [f for f in findings if f.cause == "cuda_error"]
    assert len(cuda) == 1  # what(): repeats it
    verdict = decide(findings)
    assert verdict is not None
    assert (verdict.who, verdict.global_rank, verdict.cause, verdict.role) == ("3", 3, "cuda_error", CULPRIT)
    assert "illegal memory access" in verdict.what


def test_an_unprefixed_watchdog_cuda_error_names_torch_s_rank() -> None:
    findings = _evidence(
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with "
        "exception: CUDA error: unspecified launch failure\n"
    )
    assert [(f.who, f.cause) for f in findings] == [("2", "cuda_error")]


_IB = (
    "[{who}]:h:1:2 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4> "
    "with status={status} opcode=0 len=0 vendor err 129 (Recv) localGid ::1 remoteGids::2\n"
)


def test_ib_completion_errors_are_network_findings_a_flushed_request_a_victim() -> None:
    findings = _evidence(_IB.format(who="h:1", status=12) + _IB.format(who="h:2", status=5))
    got = sorted((f.who, f.kind, f.cause, f.role) for f in findings)
    assert got == [
        ("h:1", Kind.NETWORK, "nccl:ib_completion_12", CULPRIT),
        ("h:2", Kind.NETWORK, "nccl:ib_completion_5", VICTIM),
    ]


def test_a_network_error_loses_to_a_rank_s_own_error_and_beats_the_timeouts_it_causes() -> None:
    network = _evidence(_IB.format(who="h:1", status=12))[0]
    base = dict(role=CULPRIT, what="x", where=None, source="job.log", line=1)
    traceback = Finding(Kind.TRACEBACK, "python_exception", who="h:0", order=9, **base)  # type: ignore[arg-type]
    timeout = Finding(Kind.WATCHDOG, "watchdog_timeout", who=None, order=0, **base)  # type: ignore[arg-type]
    assert decide([network, traceback, timeout]) is traceback
    assert decide([network, timeout]) is network


@pytest.mark.parametrize(
    ("filename", "user"),
    [
        ("/usr/local/bin/torchrun", False),
        ("/home/u/.venv/bin/accelerate", False),
        ("/opt/conda/bin/deepspeed", False),
        ("/home/u/bin/train.py", True),
        ("/srv/ft/train.py", True),
    ],
)
def test_a_launcher_s_console_script_is_no_user_code(filename: str, user: bool) -> None:
    assert is_user_frame(FrameLine(filename, 8, "<module>")) is user


@pytest.mark.parametrize(
    ("line", "label", "text"),
    [
        (b"[rank: 1] Seed set to 1234", b"1", b"Seed set to 1234"),
        (b"[rank: 12]x", b"12", b"x"),
        (b"[rank: x] not a number", None, None),
    ],
)
def test_lightning_s_rank_prefix_is_a_rank_label(
    line: bytes, label: bytes | None, text: bytes | None
) -> None:
    split = split_line(line)
    assert split.label == label
    if text is not None:
        assert split.text == text
    # the fast count of lines without a prefix agrees with the line parser
    assert tally_lines(line + b"\n", PLAIN).unlabelled == (1 if label is None else 0)


@pytest.mark.parametrize(("code", "cause"), [(137, "sigkill"), (134, "sigabrt"), (139, "sigsegv"), (2, None)])
def test_a_shell_s_exit_code_for_a_signal_is_that_signal(code: int, cause: str | None) -> None:
    findings = _evidence(
        f"E0402 16:20:46.2 52190 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: {code}) "
        "local_rank: 1 (pid: 52216) of binary: /bin/bash\n"
    )
    assert [(f.who, f.cause) for f in findings] == [("1", cause or "tracebacks_elsewhere")]


def test_docker_compose_s_service_prefix_is_a_host_with_torchrun_s_local_rank() -> None:
    sample = b"trainer-0-1  | [default0]:step 1\ntrainer-10-1 | [default1]:x\ntrainer-0-1  | plain\n"
    dialect = sniff_dialect(sample)
    assert dialect is not None and dialect.name == "compose"
    labels = [split_line(line, dialect=dialect).label for line in sample.splitlines()]
    assert labels == [b"trainer-0-1:0", b"trainer-10-1:1", b"trainer-0-1"]


def test_ray_s_driver_traceback_names_the_worker_and_its_frames(tmp_path: Path) -> None:
    data = _errors(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "/py/ray/_private/worker.py", line 2772, in get\n'
        "    raise value.as_instanceof_cause()\n"
        "ray.exceptions.RayTaskError(KeyError): ray::Trainer.fit() (pid=71, ip=10.0.0.9, actor_id=ab)\n"
        '  File "/job/fit.py", line 12, in fit\n'
        "    row = table[key]\n"
        "KeyError: 'k'\n",
    )
    assert _said(data, "who", "exception", "where") == ("10.0.0.9,pid=71", "KeyError", "/job/fit.py:12")


def test_the_lines_between_the_parts_of_a_chain_are_not_lines_the_rank_lived_on(tmp_path: Path) -> None:
    """A logger-like ERROR line before a chained traceback: the blank lines and the chain marker
    are the traceback's own, so the rank did not write on after it: fatal, not caught."""
    data = _errors(
        tmp_path,
        "[w:2]:ERROR: Unexpected bus error encountered in worker.\n"
        "[w:2]:Traceback (most recent call last):\n"
        '[w:2]:  File "/py/torch/utils/data/dataloader.py", line 1243, in _try_get_data\n'
        "[w:2]:RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error.\n"
        "[w:2]:\n"
        "[w:2]:The above exception was the direct cause of the following exception:\n"
        "[w:2]:\n"
        "[w:2]:Traceback (most recent call last):\n"
        '[w:2]:  File "/job/train.py", line 88, in <module>\n'
        "[w:2]:RuntimeError: DataLoader worker (pid(s) 7) exited unexpectedly\n",
    )
    assert [g["role"] for g in data["groups"]] == ["culprit"]
    assert data["verdict"]["where"] == "/job/train.py:88"


def test_torchrun_s_summary_with_a_shell_s_exit_code_names_the_signal(tmp_path: Path) -> None:
    data = _errors(
        tmp_path,
        "train.py FAILED\nFailures:\n  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n"
        "  time      : 2024-04-02_16:20:46\n  host      : n7\n  rank      : 5 (local_rank: 1)\n"
        "  exitcode  : 137 (pid: 52216)\n  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n",
    )
    assert _said(data, "who", "cause") == ("5", "sigkill")


def test_mp_spawn_s_parent_quotes_the_child_s_traceback_which_is_the_root_cause(tmp_path: Path) -> None:
    data = _errors(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "/job/main.py", line 130, in <module>\n'
        '  File "/py/torch/multiprocessing/spawn.py", line 160, in join\n'
        "torch.multiprocessing.spawn.ProcessRaisedException: \n\n"
        "-- Process 3 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/job/main.py", line 97, in worker\n'
        "IndexError: list index out of range\n",
    )
    assert _said(data, "who", "exception", "where") == ("3", "IndexError", "/job/main.py:97")
    assert {g["exception_type"]: g["role"] for g in data["groups"] + data["unprefixed_groups"]} == {
        "torch.multiprocessing.spawn.ProcessRaisedException": "victim",
        "IndexError": "culprit",
    }


@pytest.mark.parametrize(
    ("tail", "cause"), [("signal SIGKILL", "sigkill"), ("exit code 1", "tracebacks_elsewhere")]
)
def test_mp_spawn_s_child_death_is_a_launcher_report(tail: str, cause: str) -> None:
    findings = _evidence(
        f"torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with {tail}\n"
    )
    assert [(f.who, f.cause) for f in findings] == [("1", cause)]


@pytest.mark.parametrize(
    ("line", "who"),
    [
        (
            b"E0730 14:02:20.077000 412 torch/distributed/elastic/multiprocessing/api.py:869] failed "
            b"(exitcode: -11) local_rank: 2 (pid: 8841) of binary: /usr/bin/python3",
            "worker-1:2",
        ),
        # DeepSpeed's launcher names the last worker it built: local rank 0 only when it runs one
        (
            b"[2024-07-30 14:02:20,077] [ERROR] [launch.py:325:sigkill_handler] ['python3', '-u', "
            b"'t.py', '--local_rank=0'] exits with return code = -11",
            "worker-1:0",
        ),
    ],
)
def test_a_launcher_s_local_rank_is_qualified_by_the_node_its_line_came_from(line: bytes, who: str) -> None:
    found = LineEvidence()
    found.start_source("job.log", SourceLabels(dialect=sniff_dialect(b"worker-1: x\nworker-0: y\n")))
    found.feed(b"worker-1: " + line + b"\n", 1)
    assert [(f.who, f.cause) for f in found.findings(set())] == [(who, "sigsegv")]


def test_a_pod_kubectl_lists_as_oomkilled_is_an_oom_kill_of_that_pod() -> None:
    findings = _evidence(
        "NAME              READY   STATUS      RESTARTS   AGE\n"
        "ft-master-0       0/1     Error       0          5h\n"
        "ft-worker-1       0/1     OOMKilled   2          5h\n"
        "the word OOMKilled in a sentence is no pod\n"
    )
    assert [(f.who, f.cause, f.role) for f in findings] == [("ft-worker-1", "oom_kill", CULPRIT)]


@pytest.mark.parametrize(
    "stamp",
    ["2025-10-30 22:41:58,303 - trainer - INFO - ", "10/30/2025 22:41:58 - INFO - __main__ - "],
)
def test_python_logging_s_head_before_every_line_is_removed(tmp_path: Path, stamp: str) -> None:
    """A trainer that sends its ranks' output through Python's logging (Hugging Face's format, as
    seen in a public thread): the head hid every rank prefix, and the verdict was a launcher's exit
    line with "no traceback of it in this output". Its own records alone are left as they are."""
    lines = [
        "Loading states from /data/ckpt-600",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/srv/tune/train.py", line 61, in <module>',
        "[rank1]:     trainer.run()",
        "[rank1]: ValueError: optimizer state has 3 groups, the model 4",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/srv/tune/train.py", line 70, in <module>',
        "[rank0]:     dist.barrier()",
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.1.0.4]:2211",
    ]
    data = _errors(tmp_path, "".join(stamp + line + "\n" for line in lines))
    assert data["root_cause"]["label"] == "1" and data["root_cause"]["exception"].startswith("ValueError")
    assert {g["role"] for g in data["groups"]} == {"culprit", "victim"}
    records = f"{stamp}step 1 loss 2.3\n{stamp}step 2 loss 2.2\n".encode()
    assert sniff_head(records) is None  # a logger's records, not output put through it


def _timeouts(ranks: range, world_line: str) -> str:
    out = [world_line]
    for rank in ranks:
        out.append(
            f"[rank{rank}]:[E1204 03:11:40.512 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
            "ran for 1800000 milliseconds before timing out."
        )
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    "world_line",
    [
        "All distributed processes registered. Starting with 4 processes",
        "gpu-c-12:3310549:3310702 [1] NCCL INFO ncclCommInitRank comm 0x551e1c0a7b0 rank 1 nranks 4 cudaDev 1 "
        "nvmlDev 1 busId 41000 commId 0x9f12aa07c3d4e5f6 - Init COMPLETE",
    ],
)
def test_the_one_rank_of_a_known_world_that_reported_no_timeout_is_named(world_line: str) -> None:
    """Ranks 1-3 of 4 time out in a broadcast (a public Lightning thread's shape: rank 0 was still in
    its data setup); the job's size is in the log (Lightning's count, NCCL's nranks): rank 0, the one
    that reported no timeout, is named (it was `who: null`). Two absent, or no size: nobody."""
    verdict = decide(_evidence(_timeouts(range(1, 4), world_line)))
    assert verdict is not None and verdict.cause == "watchdog_timeout"
    assert verdict.who == "0" and "rank 0 is the one rank of the 4" in verdict.what, verdict
    assert verdict.ranks == "1-3"
    two = decide(_evidence(_timeouts(range(2, 4), world_line)))
    assert two is not None and two.who is None
    unknown = decide(_evidence(_timeouts(range(1, 4), "step 1")))
    assert unknown is not None and unknown.who is None


def test_why_says_the_absent_rank_never_joined(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(_timeouts(range(1, 4), "All distributed processes registered. Starting with 4 processes"))
    verdict = run_cli("why", "--log", str(log), "--json").json()["verdict"]
    assert verdict["text"].startswith("rank 0 reported no timeout, the likely rank that never joined"), (
        verdict
    )


def test_a_worker_s_death_after_its_own_ib_error_is_that_error_s_consequence() -> None:
    """Ray's raylet reports the worker that died (IP and PID) after that worker's own NCCL NET/IB
    completion error (a public OpenRLHF thread's shape): the IB error is the verdict, the death its
    consequence (the death was the verdict). Another worker's death stays a culprit."""
    ib = (
        "(LLMRayActor pid=90738, ip=10.9.0.4) h:90738:93311 [3] transport/net_ib.cc:1689 NCCL WARN NET/IB : "
        "Got completion from peer 10.9.0.7<47711> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
    )
    died = (
        "(raylet, ip=10.9.0.4) A worker died or was killed while executing a task by an unexpected system "
        "error. To troubleshoot the problem, check the logs for the dead worker. Worker IP address: 10.9.0.4 "
        "Worker port: 10011 Worker PID: {pid} Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
        "unexpectedly exits with a connection error code 2. End of file.\n"
    )
    verdict = decide(_evidence("step 1\n" + ib + died.format(pid=90738)))
    assert verdict is not None and verdict.cause == "nccl:ib_completion_12", verdict
    findings = _evidence("step 1\n" + ib + died.format(pid=90738))
    (death,) = [f for f in findings if f.cause == "worker_died"]
    assert death.role == VICTIM and "after its own network error" in death.what
    other = _evidence("step 1\n" + ib + died.format(pid=555))
    assert [f.role for f in other if f.cause == "worker_died"] == [CULPRIT]


NCCL_OOM_WITH_SUMMARY = (
    "gpu7:51201:51300 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer gpu7-ib<38811>\n"
    "gpu7:51204:51320 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
    "gpu7:51204:51320 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"
) + failure_summary(0, 0, "gpu7", 51201, "2024-03-12_14:20:52", other=(3, 3, 51204))


def test_an_nccl_line_s_pid_gets_its_rank_from_torchrun_s_summary(tmp_path: Path) -> None:
    """NCCL's WARN lines name their process (`host:pid:tid`), torchrun's summary the same pid's rank
    (a public NCCL thread's shape: the out-of-memory process was rank 3, the summary's root cause rank
    0): the verdict names rank 3 (it named the pid only)."""
    log = tmp_path / "job.log"
    log.write_text(NCCL_OOM_WITH_SUMMARY)
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["global_rank"]) == ("gpu7,pid=51204", 3), verdict
    why = run_cli("why", "--log", str(log), "--json").json()["verdict"]
    assert why["text"] == "rank 3: NCCL WARN Cuda failure 'out of memory'", why
    log.write_text(NCCL_OOM_WITH_SUMMARY.replace("gpu7:", "gpu8:"))  # the same pid on another node
    assert run_cli("logs", "errors", str(log), "--json").json()["verdict"]["global_rank"] is None
