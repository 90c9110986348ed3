"""Grouping, merging, explaining and rendering (pure functions, synthetic stacks)."""

from __future__ import annotations

import json
import os

import pytest

from rankscope.folding import duration
from rankscope.model import Frame, ProcessSnapshot, RankId, ThreadStack
from rankscope.stacks.analyse import diagnose, not_found_here
from rankscope.stacks.collect import DumpOutcome, Target, _interpret
from rankscope.stacks.frames import locate
from rankscope.stacks.merge import build_tree, group_snapshots, merge_reports, motion
from rankscope.stacks.render import render_text
from rankscope.stacks.report import ProcessInfo, StacksReport, load_report, report_document
from rankscope.stacks.runner import Run

SITE = "/venv/lib/python3.11/site-packages/"
MAIN = Frame("<module>", "/job/train.py", 90)
LOOP = Frame("train", "/job/train.py", 57)
SYNC = Frame("sync", "/job/train.py", 30)
WRAP = Frame("_exception_logger.<locals>.wrapper", SITE + "torch/distributed/c10d_logger.py", 83)
ALL_REDUCE = Frame("all_reduce", SITE + "torch/distributed/distributed_c10d.py", 3252)
BARRIER = Frame("barrier", SITE + "torch/distributed/distributed_c10d.py", 5356)
LOAD = Frame("load_batch", "/job/data.py", 41)
SLEEP_WAIT = Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 320)


def snap(rank: int, *frames: Frame, host: str = "n1", extra: tuple[ThreadStack, ...] = ()) -> ProcessSnapshot:
    main = ThreadStack(thread_id=100 + rank, name="MainThread", frames=tuple(frames), is_main=True)
    return ProcessSnapshot(pid=100 + rank, rank=RankId(host, rank, rank % 8, 4), threads=[main, *extra])


def report_of(*snaps: ProcessSnapshot, world: int = 4) -> StacksReport:
    report = StacksReport(groups=group_snapshots(snaps), hosts=sorted({s.rank.host for s in snaps}))
    report.processes = [ProcessInfo(s.pid, RankId(s.rank.host, s.rank.rank, world_size=world)) for s in snaps]
    return report


def hung(*ranks: int) -> list[ProcessSnapshot]:
    return [snap(r, MAIN, LOOP, SYNC, WRAP, ALL_REDUCE) for r in ranks]


def test_majority_in_collective_and_one_rank_elsewhere() -> None:
    report = report_of(*hung(0, 1, 3), snap(2, MAIN, LOOP, LOAD))
    diagnosis = diagnose(report)
    assert diagnosis.divergent_ranks == [2]
    assert diagnosis.headline == (
        "ranks 0-1,3 wait in all_reduce (torch.distributed) called from sync (train.py:30); "
        "rank 2 is elsewhere: load_batch (data.py:41)"
    )


def test_everyone_in_the_same_collective_points_elsewhere() -> None:
    diagnosis = diagnose(report_of(*hung(0, 1, 2, 3)))
    assert diagnosis.divergent_ranks == []
    assert diagnosis.headline.startswith("all 4 ranks (ranks 0-3) wait in all_reduce")
    assert "another node" in diagnosis.headline


def test_mismatched_collectives() -> None:
    barrier = [snap(r, MAIN, LOOP, BARRIER) for r in (2, 3)]
    diagnosis = diagnose(report_of(*hung(0, 1, 4), *barrier, world=5))
    assert diagnosis.divergent_ranks == [2, 3]
    assert any("mismatched" in n for n in diagnosis.notes)


def test_library_wait_is_shown_with_its_user_caller() -> None:
    place = locate((MAIN, LOAD, SLEEP_WAIT))
    assert place.collective is None
    assert place.where() == "Condition.wait (threading.py:320) called from load_batch (data.py:41)"
    assert place.text(plural=False) == "is in " + place.where()


def test_missing_ranks() -> None:
    report = report_of(*hung(0, 2, 3))
    diagnosis = diagnose(report)
    assert diagnosis.missing_ranks == [1]
    assert any(n.startswith("rank 1 of world size 4 was not found: ") for n in diagnosis.notes)
    assert diagnosis.headline.endswith("; missing: rank 1")
    assert not_found_here(report, diagnosis.missing_ranks) == [1]  # no local world size: every one counts
    several = diagnose(report_of(*hung(0, 3)))
    assert any(n.startswith("ranks 1-2 of world size 4 were not found: ") for n in several.notes)
    assert several.headline.endswith("; missing: ranks 1-2")


def test_only_ranks_of_the_nodes_examined_count_as_vanished() -> None:
    """16 ranks, 4 a node: on node 1 (ranks 4-7) rank 5 vanished; ranks 0-3 and 8-15 run elsewhere."""
    report = report_of(*hung(4, 6, 7), world=16)
    for process in report.processes:
        process.rank = RankId("n1", process.rank.rank, world_size=16, local_world_size=4)
    missing = diagnose(report).missing_ranks
    assert missing == [0, 1, 2, 3, 5, *range(8, 16)]
    assert not_found_here(report, missing) == [5]
    assert not_found_here(report, [0, 1, 2, 3, *range(8, 16)]) == []


def no_frames(rank: int) -> ProcessSnapshot:
    """A rank whose main thread has no Python frame (py-spy without --native, in C code)."""
    return snap(rank)


@pytest.mark.parametrize(
    ("snaps", "headline"),
    [
        ([*hung(1, 2, 3), no_frames(0)], "rank 0 is elsewhere: it has no Python frames"),
        ([*hung(0, 3), no_frames(1), no_frames(2)], "ranks 1-2 are elsewhere: they have no Python frames"),
        ([no_frames(0)], "rank 0 has no Python frames"),
        ([no_frames(0), no_frames(1)], "all 2 ranks (ranks 0-1) have no Python frames"),
        ([*hung(0)], "rank 0 waits in all_reduce (torch.distributed) called from sync (train.py:30)"),
        ([snap(0, MAIN, LOAD)], "rank 0 is in load_batch (data.py:41)"),
        (
            [snap(0, MAIN, LOAD), snap(1, MAIN, LOAD)],
            "all 2 ranks (ranks 0-1) are in load_batch (data.py:41)",
        ),
        (
            [*hung(0), snap(1, MAIN, LOAD), snap(2, MAIN, LOAD)],
            "ranks 1-2 are elsewhere: load_batch (data.py:41)",
        ),
    ],
)
def test_the_verb_agrees_with_the_ranks(snaps: list[ProcessSnapshot], headline: str) -> None:
    diagnosis = diagnose(report_of(*snaps, world=len(snaps)))
    assert headline in [finding.text for finding in diagnosis.findings]


def test_one_rank_in_a_collective_waits_for_a_rank_not_here() -> None:
    headline = diagnose(report_of(*hung(0), world=1)).headline
    assert "the rank it waits for is missing" in headline


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.149147, "0.15"),
        (0.1, "0.1"),
        (2.0, "2"),
        (2.5, "2.5"),
        (9.999, "10"),
        (12.34, "12.3"),
        (123.4, "123"),
    ],
)
def test_durations_read_as_people_write_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_header_says_the_wall_time_rounded() -> None:
    report = report_of(*hung(0, 1))
    report.seconds = 0.149147
    header = render_text(report, diagnose(report)).splitlines()[0]
    assert header.endswith("2 of 2 processes dumped, 1 sample, took 0.15s")


def timed_out_run(given: float) -> Run:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    run = Run(("py-spy",), 0, (read, write), given)
    run.timed_out = True
    return run


def test_a_dump_timeout_is_rounded_and_says_which_limit_cut_it() -> None:
    outcome = DumpOutcome(Target(7, RankId("n1", 0)))
    _interpret(outcome, timed_out_run(0.149147), None, {}, timeout=10.0)
    assert outcome.failure is not None
    assert outcome.failure.reason == "py-spy did not finish within 0.15s, what was left of --deadline"
    assert "--deadline" in outcome.failure.hint
    _interpret(outcome, timed_out_run(0.5), None, {}, timeout=0.5)
    assert outcome.failure.reason == "py-spy did not finish within 0.5s"
    assert "--timeout" in outcome.failure.hint


def _rank_1_elsewhere(*frames: Frame) -> str:
    """The headline of three ranks: 0 and 2 at ``frames`` (below the job's loop), rank 1 in its data
    loader, which the diagnosis singles out."""
    waiting = [snap(r, MAIN, LOOP, *frames) for r in (0, 2)]
    diagnosis = diagnose(report_of(*waiting, snap(1, MAIN, LOOP, LOAD), world=3))
    assert diagnosis.divergent_ranks == [1]
    return diagnosis.headline


DDP = SITE + "torch/nn/parallel/distributed.py"
DDP_FORWARD = Frame("DistributedDataParallel.forward", DDP, 1695)
DDP_PRE = Frame("DistributedDataParallel._pre_forward", DDP, 1775)
DDP_BUFFERS = Frame("DistributedDataParallel._distributed_broadcast_coalesced", DDP, 2363)


def test_ranks_inside_ddp_s_forward_collectives_wait_and_the_one_elsewhere_is_named() -> None:
    """DDP calls these collectives from C++ (seen on real jobs: torch 2.11 on an H100, 2.13 here): the
    innermost Python frame is DDP's own, and the stacks of the ranks that wait there used to read as
    "elsewhere" beside the rank that really was."""
    assert _rank_1_elsewhere(DDP_FORWARD, DDP_PRE) == (
        "ranks 0,2 wait in forward (DDP: the bucket rebuild of its second iteration is a collective) "
        "called from train (train.py:57); rank 1 is elsewhere: load_batch (data.py:41)"
    )
    buffers = locate((MAIN, LOOP, DDP_FORWARD, DDP_PRE, DDP_BUFFERS))
    assert buffers.collective == "broadcast (DDP: the module buffers from rank 0, before each forward)"
    # the same names in another file are the job's own, not DDP's
    assert locate((MAIN, Frame("Model._pre_forward", "/job/model.py", 12))).collective is None


FSDP2 = SITE + "torch/distributed/fsdp/_fully_shard/"
C10D = SITE + "torch/distributed/distributed_c10d.py"
FSDP2_PRE = Frame("FSDPParamGroup.pre_forward", FSDP2 + "_fsdp_param_group.py", 551)
FSDP2_GATHER = Frame("foreach_all_gather", FSDP2 + "_fsdp_collectives.py", 364)
FSDP2_POST = Frame("FSDPParamGroup.post_backward", FSDP2 + "_fsdp_param_group.py", 688)
FSDP2_REDUCE = Frame("foreach_reduce", FSDP2 + "_fsdp_collectives.py", 619)


def test_ranks_in_fsdp2_s_all_gather_and_reduce_scatter_wait() -> None:
    """FSDP2 (``fully_shard``, torch 2.13, gloo) gathers its parameters with ``all_gather_single`` and
    reduces its gradients with ``reduce_scatter_single``, torch 2.13's names: the ranks that waited in
    them used to read as "elsewhere", and ``why`` said nothing was wrong."""
    gather = (FSDP2_PRE, FSDP2_GATHER, WRAP, Frame("all_gather_single", C10D, 4394))
    assert _rank_1_elsewhere(*gather) == (
        "ranks 0,2 wait in all_gather_single (torch.distributed) called from train (train.py:57); "
        "rank 1 is elsewhere: load_batch (data.py:41)"
    )
    reduce = locate((MAIN, LOOP, FSDP2_POST, FSDP2_REDUCE, WRAP, Frame("reduce_scatter_single", C10D, 4943)))
    assert reduce.collective == "reduce_scatter_single (torch.distributed)"


FUNCOL = SITE + "torch/distributed/_functional_collectives.py"
WAIT_TENSOR = (
    Frame("AsyncCollectiveTensor.__torch_dispatch__", FUNCOL, 1155),
    Frame("AsyncCollectiveTensor.__torch_dispatch__.<locals>.unwrap", FUNCOL, 1143),
    Frame("AsyncCollectiveTensor.trigger_wait", FUNCOL, 1115),
    Frame("wait_tensor", FUNCOL, 142),
    Frame("OpOverloadPacket.__call__", SITE + "torch/_ops.py", 1279),
)


def test_ranks_waiting_for_a_functional_collective_wait_in_wait_tensor() -> None:
    """DTensor and tensor parallelism (``parallelize_module``, ``clip_grad_norm_`` of FSDP2's parameters)
    issue functional collectives and wait for them when the result is used: the innermost Python frame
    is torch's op call (torch 2.13, gloo), so the ranks waiting there read as "elsewhere"."""
    loss = Frame("compute_loss", "/job/train.py", 24)
    assert _rank_1_elsewhere(loss, *WAIT_TENSOR) == (
        "ranks 0,2 wait in wait_tensor (torch.distributed) called from compute_loss (train.py:24); "
        "rank 1 is elsewhere: load_batch (data.py:41)"
    )


PIPELINING = SITE + "torch/distributed/pipelining/schedules.py"


def test_pipeline_stages_waiting_for_their_sends_and_receives_wait() -> None:
    """torch.distributed.pipelining's schedules wait for their batched sends and receives in
    ``_wait_batch_p2p``, which calls the works' wait in C++ (torch 2.13, gloo, GPipe and 1F1B)."""
    schedule = (
        Frame("PipelineScheduleSingle.step", PIPELINING, 785),
        Frame("Schedule1F1B._step_microbatches", PIPELINING, 1067),
        Frame("_wait_batch_p2p", PIPELINING, 683),
    )
    assert _rank_1_elsewhere(*schedule) == (
        "ranks 0,2 wait in send/recv (pipelining: the schedule waits for its stage's sends and receives) "
        "called from train (train.py:57); rank 1 is elsewhere: load_batch (data.py:41)"
    )
    # a function of that name in the job's own code is not the schedule's wait
    assert locate((MAIN, Frame("_wait_batch_p2p", "/job/pipe.py", 8))).collective is None


def test_ranks_in_elastic_s_store_synchronize_wait() -> None:
    """``torch.distributed.elastic.utils.store.synchronize`` waits for every rank's key with the store's
    multi_get, from ``get_all`` (torch 2.13)."""
    store = SITE + "torch/distributed/elastic/utils/store.py"
    sync = (Frame("synchronize", store, 100), Frame("get_all", store, 65))
    assert _rank_1_elsewhere(*sync) == (
        "ranks 0,2 wait in synchronize (torch.distributed.elastic: it waits for every rank's key in the "
        "store) called from train (train.py:57); rank 1 is elsewhere: load_batch (data.py:41)"
    )


def test_a_distributed_checkpoint_step_is_labelled_as_dcp_s_not_as_torch_distributed_s() -> None:
    """DCP names its steps after collectives; its reduce_scatter is a gather and a scatter."""
    dcp = Frame("_DistWrapper.reduce_scatter", SITE + "torch/distributed/checkpoint/utils.py", 260)
    gather = Frame("gather_object", SITE + "torch/distributed/distributed_c10d.py", 3300)
    place = locate((MAIN, LOOP, dcp, gather))
    assert place.collective == "reduce_scatter (torch.distributed.checkpoint)"


def test_native_collective_without_python_frames() -> None:
    frames = (
        Frame("??", "libc.so.6", 0, "/lib/libc.so.6"),
        Frame("c10d::ProcessGroupNCCL::WorkNCCL::wait", "libtorch_cuda.so", 0, "/t/libtorch_cuda.so"),
    )
    assert locate(frames).collective == "wait (NCCL)"


def test_grouping_merges_threads_by_role_and_ignores_thread_numbers() -> None:
    def worker(rank: int) -> ThreadStack:
        return ThreadStack(
            thread_id=rank, name=f"Thread-{rank} (pin)", frames=(Frame("pin", "/job/x.py", 3),)
        )

    snaps = [snap(r, MAIN, LOOP, extra=(worker(r),)) for r in range(3)]
    groups = group_snapshots(snaps)
    assert [(g.thread, len(g.members)) for g in groups] == [("MainThread", 3), ("Thread-N (pin)", 3)]


def test_tree_compresses_shared_chains() -> None:
    report = report_of(*hung(0, 1, 3), snap(2, MAIN, LOOP, LOAD))
    (root,) = build_tree(report.main_groups())
    assert root.frames == [MAIN, LOOP] and len(root.members) == 4
    assert [len(c.members) for c in root.children] == [3, 1]


def test_merge_reports_of_two_nodes() -> None:
    node1 = report_of(*[snap(r, MAIN, LOOP, SYNC, WRAP, ALL_REDUCE, host="n1") for r in (0, 1)], world=4)
    node2 = report_of(
        snap(2, MAIN, LOOP, SYNC, WRAP, ALL_REDUCE, host="n2"), snap(3, MAIN, LOOP, LOAD, host="n2")
    )
    merged = merge_reports([node1, node2])
    assert merged.hosts == ["n1", "n2"]
    assert len(merged.main_groups()) == 2 and len(merged.main_groups()[0].members) == 3
    diagnosis = diagnose(merged)
    assert diagnosis.divergent_ranks == [3]
    assert "rank 3 on n2 is elsewhere" in diagnosis.headline


def test_json_round_trip() -> None:
    report = report_of(*hung(0, 1, 3), snap(2, MAIN, LOOP, LOAD))
    report.diagnosis = diagnose(report)
    text = json.dumps(report_document(report))
    again = load_report(json.loads(text))
    assert report_document(again) == report_document(report)
    assert again.diagnosis is not None and again.diagnosis.divergent_ranks == [2]
    assert diagnose(again).headline == diagnose(report).headline
    assert again.groups[0].frames == report.groups[0].frames  # Frames come back as Frames


def test_loading_a_foreign_document_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="not a rankscope.stacks document"):
        load_report({"schema": "rankscope.exec/1"})
    with pytest.raises(ValueError, match=r"groups\[0\].*missing field 'thread'"):
        load_report({"schema": "rankscope.stacks/1", "groups": [{"frames": []}]})


def test_motion_marks_stuck_and_moving() -> None:
    first = [snap(0, MAIN, LOOP), snap(1, MAIN, LOAD)]
    second = [snap(0, MAIN, LOOP), snap(1, MAIN, SYNC)]
    assert motion([first, second]) == {100: "stuck", 101: "moving"}


def test_render_is_short_and_names_the_culprit() -> None:
    snaps = [*hung(*range(15)), snap(15, MAIN, LOOP, LOAD)]
    report = report_of(*snaps, world=16)
    text = render_text(report, diagnose(report))
    assert "rank 15 is elsewhere: load_batch (data.py:41)" in text
    assert "ranks 0-14" in text
    assert len(text.splitlines()) < 20


def test_a_stack_inside_torch_compile_says_it_is_compiling() -> None:
    """A rank whose first step runs torch.compile (Inductor building C++ in a subprocess) while the
    others wait in a collective: its place said only `Popen.communicate (subprocess.py:1196)` with 65
    frames of torch folded away (a real 2-rank gloo job); it now says it is compiling. A stack in the
    user's own loop says nothing of it."""
    from rankscope.model import Frame
    from rankscope.stacks.frames import locate

    site = "/venv/lib/python3.11/site-packages/torch"
    frames = [
        Frame("<module>", "/job/compile_job.py", 23),
        Frame("main", "/job/compile_job.py", 16),
        Frame("_fn", f"{site}/_dynamo/eval_frame.py", 655),
        Frame("compile_fx", f"{site}/_inductor/compile_fx.py", 1500),
        Frame("check_call", "/usr/lib/python3.11/subprocess.py", 408),
        Frame("communicate", "/usr/lib/python3.11/subprocess.py", 1196),
    ]
    where = locate(frames).where()
    assert where.startswith("communicate (subprocess.py:1196) called from main (compile_job.py:16)"), where
    assert ", inside torch.compile: compiling" in where, where
    assert "torch.compile" not in locate(frames[:2]).where()
