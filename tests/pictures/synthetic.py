"""A large stacks report made up in memory: RANKS ranks over NODES nodes, for the size and speed of pages.

Every rank's main thread goes through the same 40 torch frames of a training step; most wait in
all_reduce, CULPRITS ranks are elsewhere (in load_batch), one node's ranks are in a barrier. Each
rank has a heartbeat thread and a progress marker. Only the page and its bench use it.
"""

from __future__ import annotations

from rankscope.fr.records import Entry, GroupStatus, RankDump
from rankscope.model import Frame, Member, RankId
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.report import ProcessInfo, StackGroup, StacksReport, StepInfo

SITE = "/venv/lib/python3.11/site-packages"


def _torch(depth: int) -> tuple[Frame, ...]:
    return tuple(
        Frame(f"layer_{i}.forward", f"{SITE}/torch/nn/modules/module.py", 1700 + i) for i in range(depth)
    )


def big_report(ranks: int = 1024, nodes: int = 8, culprits: tuple[int, ...] = (7, 300)) -> StacksReport:
    per_node = ranks // nodes
    hosts = [f"node{n:03d}" for n in range(nodes)]
    members = [Member(hosts[r // per_node], 10_000 + r, r) for r in range(ranks)]
    head = (Frame("<module>", "/home/user/job/train.py", 200), Frame("main", "/home/user/job/train.py", 190))
    step = (*head, Frame("train_step", "/home/user/job/train.py", 120), *_torch(40))
    reduce = (
        *step,
        Frame("sync_gradients", "/home/user/job/train.py", 70),
        Frame("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83),
        Frame("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 3252),
    )
    barrier = (
        *head,
        Frame("evaluate", "/home/user/job/train.py", 150),
        Frame("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83),
        Frame("barrier", f"{SITE}/torch/distributed/distributed_c10d.py", 4800),
    )
    load = (
        *step,
        Frame("load_batch", "/home/user/job/data.py", 44),
        Frame("read_shard", "/home/user/job/data.py", 12),
    )
    last_node = set(range(ranks - per_node, ranks))
    odd = set(culprits)
    groups = [
        StackGroup("MainThread", True, reduce, [m for m in members if m.rank not in odd | last_node]),
        StackGroup("MainThread", True, barrier, [m for m in members if m.rank in last_node]),
        StackGroup("MainThread", True, load, [m for m in members if m.rank in odd]),
        StackGroup(
            "heartbeat-N",
            False,
            (
                Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 995),
                Frame("heartbeat", "/home/user/job/train.py", 38),
                Frame("wait", "/usr/lib/python3.11/threading.py", 331),
            ),
            list(members),
        ),
    ]
    groups = [g for g in groups if g.members]
    processes = [
        ProcessInfo(
            pid=m.pid,
            rank=RankId(host=m.host, rank=m.rank, world_size=ranks),
            cmdline="python train.py",
            progress=StepInfo(step=41 if m.rank in odd else 42, labels={"phase": "train"}, age=3.0),
        )
        for m in members
    ]
    report = StacksReport(groups=groups, processes=processes, hosts=hosts, seconds=2.5)
    report.diagnosis = diagnose(report)
    return report


def big_fr_dumps(
    ranks: int = 1024, entries: int = 120, odd_rank: int = 7, distinct: bool = False
) -> list[RankDump]:
    """Every rank's flight recorder, in memory: ``entries`` all_reduces from one line, except
    ``odd_rank``, which issued a barrier from another line at collective ``entries - 10`` and stopped
    there; the others wait in their all_reduce of that number (bench/bench_fr.py's job, unread).
    ``distinct``: every rank issued its earlier collectives from a line of its own (no two lanes alike)."""
    odd_seq = entries - 10
    step = Frame("step", "/home/user/job/train.py", 45)
    other = Frame("main", "/home/user/job/train.py", 63)
    dumps = []
    for rank in range(ranks):
        rows = [
            Entry(
                pg="0",
                seq=seq,
                op="barrier" if rank == odd_rank and seq == odd_seq else "all_reduce",
                pg_desc="default_pg",
                sizes=((65536,),),
                dtypes=("Float",),
                state="scheduled" if seq == odd_seq else "completed",
                retired=seq != odd_seq,
                op_id=seq,
                record_id=seq - 1,
                site=other
                if rank == odd_rank and seq == odd_seq
                else Frame("step", "/home/user/job/train.py", 1000 + rank)
                if distinct and seq < odd_seq
                else step,
                frames=(other if rank == odd_rank and seq == odd_seq else step,),
            )
            for seq in range(1, odd_seq + 1)
        ]
        dumps.append(
            RankDump(
                rank,
                f"rank_{rank}",
                version="2.10",
                entries=rows,
                status=[GroupStatus("0", odd_seq, -1, odd_seq - 1)],
                group_ranks={"0": list(range(ranks))},
                group_desc={"0": "default_pg"},
            )
        )
    return dumps
