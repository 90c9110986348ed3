"""torch.distributed errors whose message names their cause, read line by line (rankscope.logs.c10d_errors).

The messages are written in the forms torch prints (ProcessGroupWrapper.cpp, socket.cpp, reducer.cpp;
the corpus README says where each was seen); the last tests run them through `logs errors` as a user
would, on small logs written here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import run_torchrun

from rankscope.evidence import CULPRIT, HANDLED, Finding, Kind
from rankscope.logs.c10d_errors import (
    DDP_MODEL,
    DDP_UNUSED,
    DESYNC,
    PORT_IN_USE,
    C10dLines,
    Fingerprint,
    Seen,
    classify,
    parse_fingerprint,
    parse_mismatch,
    port_of,
    specific_findings,
)

OPTIONS = (
    "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
    "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))"
)


def _print(seq: int, op: str, shape: str, dtype: str = "Float") -> str:
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], "
        f"TensorDtypes={dtype}, {OPTIONS})"
    )


def _mismatch(rank: int, own: str, other_rank: int, other: str) -> str:
    return (
        f"RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is running collective: "
        f"{own}, but Rank {other_rank} is running collective: {other}.Collectives differ in the following "
        "aspects:   Op type: Xvs Y"
    )


def _seen(who: str | None, line: int, rank: int | None = None) -> Seen:
    return Seen(who, rank, "job.log", line, line)


# -- parsing ---------------------------------------------------------------------------------------


def test_a_full_message_names_the_printer_and_the_rank_it_compared_with() -> None:
    found = parse_mismatch(
        _mismatch(1, _print(3104, "ALLREDUCE", "195812480"), 0, _print(3104, "ALLREDUCE", "51200"))
    )
    assert found is not None
    assert (found.rank, found.other_rank) == (1, 0)
    assert found.own == Fingerprint("3104", "ALLREDUCE", "[195812480]", "Float")
    assert found.other == Fingerprint("3104", "ALLREDUCE", "[51200]", "Float")


@pytest.mark.parametrize(
    ("text", "rank", "own", "other_rank", "other"),
    [
        # torch 1.10-1.11: the printer and its own collective only
        (
            "RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is running inconsistent "
            "collective: CollectiveFingerPrint(OpType=BARRIER)",
            3,
            Fingerprint(op="BARRIER"),
            None,
            None,
        ),
        # torch 1.12: the other rank's op alone
        (
            "Detected mismatch between collectives on ranks. Rank 0 is running collective: "
            "CollectiveFingerPrint(OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float), but Rank 1 "
            "is running collective: REDUCE.",
            0,
            Fingerprint(op="ALLREDUCE", shape="[20, 10]", dtypes="Float"),
            1,
            Fingerprint(op="REDUCE"),
        ),
        # no comma after the sequence number (a collective without tensors)
        (
            "Detected mismatch between collectives on ranks. Rank 0 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=1649OpType=BARRIER), but Rank 1 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=0OpType=GATHER).Collectives differ in the following aspects: "
            "\t Sequence number: 1649vs 0  Op type: BARRIERvs GATHER",
            0,
            Fingerprint(seq="1649", op="BARRIER"),
            1,
            Fingerprint(seq="0", op="GATHER"),
        ),
    ],
)
def test_older_and_shorter_forms(
    text: str, rank: int, own: Fingerprint, other_rank: int | None, other: Fingerprint | None
) -> None:
    found = parse_mismatch(text)
    assert found is not None
    assert (found.rank, found.own, found.other_rank, found.other) == (rank, own, other_rank, other)


def test_a_message_cut_inside_a_field_drops_that_field() -> None:
    assert parse_fingerprint("CollectiveFingerPrint(SequenceNumber=3311, OpType=ALLREDUC") == Fingerprint(
        seq="3311"
    )
    assert parse_fingerprint("CollectiveFingerPrint(SequenceNumber=7, OpType=ALLGATHER, TensorShape=[51") == (
        Fingerprint(seq="7", op="ALLGATHER")
    )
    assert parse_fingerprint("CollectiveFing") is None


@pytest.mark.parametrize(
    ("text", "port"),
    [
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            "29500",
        ),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. The server "
            "socket has failed to bind to [::]:29511 (errno: 98 - Address already in use). The server socket "
            "has failed to bind to 0.0.0.0:29511 (errno: 98 - Address already in use).",
            "29511",
        ),
        ("RuntimeError: Address already in use", None),
        (
            "DistNetworkError: The server socket has failed to listen on any local network address. port: 6000, useIp",
            "6000",
        ),
    ],
)
def test_a_port_in_use_in_each_wording(text: str, port: str | None) -> None:
    assert classify(text) == PORT_IN_USE
    assert port_of(text) == port


@pytest.mark.parametrize(
    "text",
    [
        "bootstrap.cc:45 NCCL WARN Bootstrap : Call to bind failed : Address already in use",
        "[W socket.cpp:436] [c10d] The server socket cannot be initialized on [::]:29500 (errno: 98 - Address already in use).",
        "step 10: the GPU is already in use by another process group",
        "RuntimeError: Detected collectives",
        "OSError: [Errno 98] Address already in use",
    ],
)
def test_lines_that_are_none_of_these_failures(text: str) -> None:
    """NCCL's own bind warning, torch's IPv6 warning (it may bind IPv4 next) and a Python server's
    socket error (a dashboard of the program) name no failed store."""
    assert classify(text) is None


# -- one finding per failure -----------------------------------------------------------------------


def _desync(lines: C10dLines) -> Finding:
    (found,) = lines.findings()
    assert found.cause == DESYNC and found.role == CULPRIT
    return found


def test_the_odd_rank_out_is_the_culprit_whoever_printed_first() -> None:
    lines = C10dLines()
    ar, bc = _print(214, "ALLREDUCE", "1024"), _print(214, "BROADCAST", "1")
    for line, rank in enumerate((1, 0, 3), 1):
        lines.feed(_seen(str(rank), line, rank), _mismatch(rank, ar, 2, bc))
    lines.feed(_seen("2", 4, 2), _mismatch(2, bc, 0, ar))
    found = _desync(lines)
    assert (found.who, found.global_rank, found.ranks, found.line) == ("2", 2, "2", 4)
    assert "rank 2 runs BROADCAST (sequence number 214, shape [1]" in found.what
    assert "ranks 0-1,3 run ALLREDUCE" in found.what


def test_a_garbled_copy_of_another_rank_is_not_believed() -> None:
    """torch 2.13 on gloo printed rank 2's broadcast as ``SequenceNumber=0OpType=GATHER`` in the other
    ranks' messages (recorded_gloo_desync_detail.log): only rank 2's own message says what it runs."""
    lines = C10dLines()
    garbled = "CollectiveFingerPrint(SequenceNumber=0OpType=GATHER)"
    lines.feed(_seen(None, 1), _mismatch(0, _print(9, "ALLREDUCE", "4, 5"), 2, garbled))
    lines.feed(_seen(None, 2), _mismatch(1, _print(9, "ALLREDUCE", "4, 5"), 2, garbled))
    found = _desync(lines)
    assert found.who is None  # rank 2 never said what it runs: two ranks known, no majority
    assert found.ranks == "0-2"
    assert "GATHER" not in found.what and "rank 2 something else" in found.what


def test_two_ranks_have_no_majority_and_both_are_named() -> None:
    lines = C10dLines()
    big, small = _print(3104, "ALLREDUCE", "195812480"), _print(3104, "ALLREDUCE", "51123456")
    lines.feed(_seen("1", 1, 1), _mismatch(1, big, 0, small))
    found = _desync(lines)
    assert (found.who, found.ranks) == (None, "0-1")
    assert "[195812480]" in found.what and "[51123456]" in found.what


def test_a_rank_known_only_from_another_rank_s_message_can_be_the_odd_one() -> None:
    lines = C10dLines()
    ar, red = _print(5, "ALLREDUCE", "8"), _print(5, "REDUCE", "8")
    for rank in (0, 1, 2):
        lines.feed(_seen(f"node1:{rank}", rank + 1), _mismatch(rank, ar, 3, red))
    found = _desync(lines)
    assert (found.who, found.ranks) == ("3", "3")  # it printed nothing: named by its rank


def test_ddp_names_the_parameters_and_their_ranks() -> None:
    lines = C10dLines()
    head = (
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss."
    )
    for rank in (0, 1):
        lines.feed(_seen(str(rank), 10 * rank + 1, rank), head)
        lines.feed(
            _seen(str(rank), 10 * rank + 2, rank),
            f"Parameters which did not receive grad for rank {rank}: aux.bias, aux.weight",
        )
        lines.feed(
            _seen(str(rank), 10 * rank + 3, rank),
            f"Parameter indices which did not receive grad for rank {rank}: 4 5",
        )
    (found,) = lines.findings()
    assert (found.cause, found.who, found.ranks, found.line) == (DDP_UNUSED, "0", "0-1", 1)
    assert "aux.bias, aux.weight; indices 4 5" in found.what
    assert "find_unused_parameters=True" in found.next_step
    assert "TORCH_DISTRIBUTED_DEBUG=INFO" not in found.next_step  # the names are there already


def _model(rank: int, params: int, other: int, theirs: int) -> str:
    return (
        f"RuntimeError: DDP expects same model across all ranks, but Rank {rank} has {params} params, while "
        f"rank {other} has inconsistent {theirs} params."
    )


def test_ddp_s_model_check_names_the_rank_whose_model_differs_whoever_printed_first() -> None:
    lines = C10dLines()
    lines.feed(_seen("5", 1, 5), _model(5, 8, 0, 0))  # rank 5 prints first: it compared with rank 0
    lines.feed(_seen("0", 2, 0), _model(0, 0, 1, 8))
    lines.feed(_seen("1", 3, 1), _model(1, 8, 0, 0))
    (found,) = lines.findings()
    assert (found.cause, found.who, found.global_rank, found.ranks, found.line) == (DDP_MODEL, "0", 0, "0", 1)
    assert "parameters: rank 0 has 0; ranks 1,5 have 8" in found.what
    assert classify(_model(1, 8, 0, 0)) == DDP_MODEL
    # two ranks that disagree: no majority, both named
    lines = C10dLines()
    lines.feed(_seen("0", 1, 0), _model(0, 4, 1, 6))
    lines.feed(_seen("1", 2, 1), _model(1, 6, 0, 4))
    (found,) = lines.findings()
    assert (found.who, found.ranks) == ("0", "0-1")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_job_whose_rank_builds_another_model_names_that_rank(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    job = Path(__file__).parent / "jobs" / "ddp_model_job.py"
    assert run_torchrun(tmp_path, log, script=job, timeout=240, nproc=3) != 0
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["global_rank"]) == (DDP_MODEL, "2", 2), verdict
    assert "ranks 0-1 have 4; rank 2 has 6" in verdict["what"], verdict


def test_ddp_lists_a_long_run_of_indices_with_its_count() -> None:
    lines = C10dLines()
    lines.feed(
        _seen(None, 1), "RuntimeError: Expected to have finished reduction in the prior iteration before"
    )
    lines.feed(
        _seen(None, 2),
        "Parameter indices which did not receive grad for rank 3: " + " ".join(map(str, range(40))),
    )
    (found,) = lines.findings()
    assert found.who == "3"
    assert "indices 0 1 2 3 4 5 6 7 ... (40 in all)" in found.what
    assert "TORCH_DISTRIBUTED_DEBUG=INFO names the parameters" in found.next_step


def test_the_port_is_named_in_the_finding_and_its_next_step() -> None:
    lines = C10dLines()
    lines.feed(
        _seen("worker-0", 7),
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket "
        "has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    )
    (found,) = lines.findings()
    assert (found.cause, found.who) == (PORT_IN_USE, "worker-0")
    assert "port 29500 is already in use on worker-0" in found.what
    assert "sport = :29500" in found.next_step and "--master-port" in found.next_step


# -- taking the place of the plain findings -------------------------------------------------------


def _plain(who: str, rank: int, what: str, line: int, where: str, time: str | None = None) -> Finding:
    return Finding(
        Kind.TRACEBACK, "python_exception", CULPRIT, who, what, where, "job.log", line, line,
        global_rank=rank, time=time, exception="RuntimeError",
    )  # fmt: skip


def test_the_plain_tracebacks_join_the_finding_with_the_culprit_s_frame() -> None:
    ar, bc = _print(1, "ALLREDUCE", "4, 5"), _print(1, "BROADCAST", "3")
    texts = {0: _mismatch(0, ar, 2, bc), 1: _mismatch(1, ar, 2, bc), 2: _mismatch(2, bc, 0, ar)}
    lines = C10dLines()
    plain = []
    for line, rank in ((20, 1), (38, 2), (55, 0)):
        lines.feed(_seen(str(rank), line, rank), texts[rank])
        where = "job.py:6" if rank == 2 else "job.py:8"
        plain.append(_plain(str(rank), rank, texts[rank], line - 15, where, time=f"10:00:0{rank}"))
    other = Finding(
        Kind.LAUNCHER_SUMMARY, "tracebacks_elsewhere", CULPRIT, "0", "exit 1", None, "job.log", 99
    )
    out = specific_findings([*plain, other], lines)
    assert other in out and not any(f.cause == "python_exception" for f in out)
    (found,) = [f for f in out if f.cause == DESYNC]
    assert found.kind == Kind.TRACEBACK  # as strong as the tracebacks it stands for
    assert (found.who, found.where, found.order, found.time) == ("2", "job.py:6", 5, "10:00:00")
    assert "compare the call at job.py:6" in found.next_step
    assert found.exception == "RuntimeError"


def test_a_failure_every_rank_caught_stays_caught() -> None:
    lines = C10dLines()
    text = "RuntimeError: Address already in use"
    lines.feed(_seen("0", 9, 0), text)
    caught = replace(_plain("0", 0, text, 5, "serve.py:3"), role=HANDLED)
    (found,) = specific_findings([caught], lines)
    assert (found.cause, found.role) == (PORT_IN_USE, HANDLED)


def test_other_exceptions_are_left_alone() -> None:
    plain = [_plain("3", 3, "ValueError: bad shape", 4, "x.py:1")]
    assert specific_findings(plain, C10dLines()) == plain


# -- through `logs errors`, as a user runs it ----------------------------------------------------------


def _write(tmp_path: Path, lines: list[str]) -> Path:
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_logs_errors_names_the_odd_rank_and_its_call(tmp_path: Path) -> None:
    ar, bc = _print(77, "ALLGATHER", "16, 128"), _print(77, "ALLGATHER", "16, 96")
    lines = []
    for rank in (0, 2, 1):
        p = f"[default{rank}]:[rank{rank}]: "
        mine = bc if rank == 1 else ar
        lines += [
            p + "Traceback (most recent call last):",
            p + '  File "/w/gather.py", line ' + ("31" if rank == 1 else "30") + ", in collect",
            p + "    dist.all_gather_into_tensor(out, feats)",
            p + _mismatch(rank, mine, 0 if rank == 1 else 1, ar if rank == 1 else bc),
        ]
    result = run_cli("logs", "errors", str(_write(tmp_path, lines)))
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("root cause: rank 1: collective mismatch"), first
    assert "rank 1 runs ALLGATHER (sequence number 77, shape [16, 96]" in first
    assert "at /w/gather.py:31" in first and first.endswith("[collective_desync]")
    data = run_cli("logs", "errors", str(tmp_path / "job.log"), "--json").json()
    assert (data["verdict"]["who"], data["verdict"]["ranks"]) == ("1", "1")


def test_logs_errors_on_a_port_in_use_says_which_port(tmp_path: Path) -> None:
    log = _write(
        tmp_path,
        [
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 199, in _create_c10d_store',
            "    return TCPStore(",
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29733, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        ],
    )
    result = run_cli("logs", "errors", str(log))
    assert result.returncode == 0, result.stderr
    head = result.stdout.splitlines()
    assert "port 29733 is already in use" in head[0] and head[0].endswith("[port_in_use]")
    assert head[2].startswith("  next: ") and "ss -ltnp 'sport = :29733'" in head[2]


def test_what_is_kept_is_bounded_by_the_ranks() -> None:
    """A message repeated (torchrun's summary quotes it again, a job restarted many times) is kept once
    per rank that printed it."""
    lines = C10dLines()
    text = _mismatch(1, _print(3, "ALLREDUCE", "8"), 0, _print(3, "ALLREDUCE", "9"))
    reduction = "RuntimeError: Expected to have finished reduction in the prior iteration"
    for line in range(1, 5001):
        lines.feed(_seen("1", line, 1), text)
        lines.feed(_seen("1", line, 1), reduction)
        lines.feed(_seen(None, line), "RuntimeError: Address already in use")
    assert (len(lines.mismatches), len(lines.reductions), len(lines.ports)) == (1, 1, 64)
    assert [f.line for f in lines.findings()] == [1, 1, 1]


def test_torchruns_summary_entry_names_the_rank_of_the_message_under_it() -> None:
    """Entries are read before the messages of a block (their needle comes first): each message
    takes the entry above it, not the block's last one."""
    lines = C10dLines()
    reduction = "RuntimeError: Expected to have finished reduction in the prior iteration before"
    lines.feed(_seen(None, 10), "rank      : 3 (local_rank: 3)")
    lines.feed(_seen(None, 30), "rank      : 0 (local_rank: 0)")
    lines.feed(_seen(None, 22), reduction)
    lines.feed(_seen(None, 900), "RuntimeError: Address already in use")  # far below any entry
    ddp, port = sorted(lines.findings(), key=lambda f: f.cause)
    assert (ddp.who, ddp.global_rank) == ("3", 3)
    assert "on rank 3 " in ddp.what
    assert port.who is None
