"""Deaths on other nodes, read from the new bytes of the job's output file as launchers write them.

The lines are written here in the forms srun, torch, torchrun and mpirun print (the same forms the
`logs` tests read); the file is a real file that grows between looks, as a job's output does. A
real job whose output carries another node's failure is in test_watch_jobs.py.
"""

from __future__ import annotations

from pathlib import Path

from rankscope.watch.elsewhere import READ_MAX, Elsewhere
from rankscope.watch.model import RankSample, Reason, Snapshot, Trigger


class Job:
    """The output file and the watcher's view of it: one look after each write."""

    def __init__(self, path: Path, local: tuple[int, ...] = (0, 1)) -> None:
        self.path = path
        path.write_bytes(b"starting\n")
        self.local = set(local)
        self.elsewhere = Elsewhere()
        self.look()  # the first look: what is there already is not news

    def write(self, text: str) -> list[Trigger]:
        with self.path.open("ab") as f:
            f.write(text.encode())
        return self.look()

    def look(self, triggers: tuple[Trigger, ...] = (), alive: int = 2) -> list[Trigger]:
        size = self.path.stat().st_size
        ranks = tuple(RankSample(100 + i, i) for i in range(alive))
        snap = Snapshot(0.0, ranks, (), ((str(self.path), size, 0.0),))
        return self.elsewhere.look(snap, self.local, list(triggers))


SRUN_TRACEBACK = """3: step 10 loss 0.5
3: Traceback (most recent call last):
3:   File "/work/train.py", line 40, in <module>
3:     main()
3:   File "/work/train.py", line 31, in main
3:     loss = step(batch)
3: RuntimeError: CUDA error: an illegal memory access was encountered
"""


def test_a_rank_prefixed_traceback_of_another_node_is_a_death_once(tmp_path: Path) -> None:
    job = Job(tmp_path / "slurm-81.out")
    assert job.write("0: step 10 loss 0.5\n1: step 10 loss 0.5\n" * 20) == []
    triggers = job.write(SRUN_TRACEBACK)
    assert len(triggers) == 1, triggers
    trigger = triggers[0]
    assert trigger.reason == Reason.DEATH and trigger.ranks == (3,)
    assert "rank 3: RuntimeError: CUDA error" in trigger.text and "slurm-81.out" in trigger.text
    assert "2 ranks here still ran" in trigger.text
    # srun's own report of the same failure, later: one capture per failure
    assert job.write("srun: error: node2: task 3: Exited with exit code 1\n") == []


def test_a_traceback_cut_between_two_looks_is_read_when_its_exception_line_comes(tmp_path: Path) -> None:
    job = Job(tmp_path / "out.log")
    head, tail = SRUN_TRACEBACK.split("3:     loss")
    assert job.write(head) == []
    triggers = job.write("3:     loss" + tail)
    assert [t.ranks for t in triggers] == [(3,)]


def test_torchs_rank_marker_names_the_global_rank(tmp_path: Path) -> None:
    job = Job(tmp_path / "out.log")
    triggers = job.write(
        "[rank5]: Traceback (most recent call last):\n"
        '[rank5]:   File "/work/train.py", line 12, in <module>\n'
        "[rank5]:     bad()\n"
        "[rank5]: ValueError: bad batch\n"
    )
    assert [t.ranks for t in triggers] == [(5,)]
    assert "rank 5: ValueError: bad batch" in triggers[0].text


def test_launcher_reports_without_tracebacks(tmp_path: Path) -> None:
    srun = Job(tmp_path / "srun.out")
    triggers = srun.write("srun: error: node3: task 6: Exited with exit code 2\n")
    # a task is not a rank (under `srun torchrun` it is a node's launcher): named, not taken for one
    assert [t.ranks for t in triggers] == [()] and "srun: task 6 exited with code 2" in triggers[0].text
    summary = Job(tmp_path / "torchrun.out")
    triggers = summary.write(
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-11-26_03:40:01\n"
        "  host      : node4\n"
        "  rank      : 9 (local_rank: 1)\n"
        "  exitcode  : 1 (pid: 4242)\n"
        "  error_file: <N/A>\n"
        "============================================================\n"
    )
    assert [t.ranks for t in triggers] == [(9,)] and "rank 9 on node4 failed (exit 1)" in triggers[0].text
    mpirun = Job(tmp_path / "mpirun.out")
    triggers = mpirun.write(
        "-------------------------------------------------------\n"
        "Primary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n"
        "-------------------------------------------------------\n"
        "--------------------------------------------------------------------------\n"
        "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "the job to be terminated. The first process to do so was:\n"
        "\n"
        "  Process name: [[4711,1],7]\n"
        "  Exit code:    3\n"
        "--------------------------------------------------------------------------\n"
    )
    assert [t.ranks for t in triggers] == [(7,)] and "rank 7 exited with code 3" in triggers[0].text


def test_what_is_not_another_nodes_death(tmp_path: Path) -> None:
    job = Job(tmp_path / "out.log", local=(0, 1))
    # a rank of this node: its pidfd reports it
    assert job.write(SRUN_TRACEBACK.replace("3:", "1:")) == []
    # a traceback the program logged (logging.exception): caught
    assert (
        job.write(
            "2: ERROR:trainer:batch skipped\n"
            "2: Traceback (most recent call last):\n"
            '2:   File "/work/train.py", line 31, in main\n'
            "2: KeyError: 'label'\n"
        )
        == []
    )
    # the scheduler's SIGTERM to another node's ranks (srun ends them): they were told to stop
    assert job.write("srun: error: node2: task 2: Terminated\n") == []
    # the watcher's own line in a shared stderr file
    assert job.write("rankscope watch: death (srun: error: node2: task 3: Exited with exit code 1)\n") == []
    # no rank prefix: anyone's
    assert job.write('Traceback (most recent call last):\n  File "x.py", line 1\nOSError: x\n') == []


def test_this_nodes_death_disarms_and_a_restart_arms_again(tmp_path: Path) -> None:
    job = Job(tmp_path / "out.log")
    local = Trigger(Reason.DEATH, "rank 1 (pid 101) exited with code 1 while another rank still ran", (1,))
    with job.path.open("ab") as f:
        f.write(b"srun: error: node2: task 3: Exited with exit code 1\n")
    assert job.look((local,)) == []  # the capture of this node's death is the one
    job.write("srun: error: node2: task 4: Exited with exit code 1\n")  # the same failure, later
    job.elsewhere.restarted({str(job.path): job.path.stat().st_size})
    assert len(job.write("srun: error: node2: task 3: Exited with exit code 1\n")) == 1


def test_no_trigger_without_live_ranks_here_and_a_flood_is_read_from_its_end(tmp_path: Path) -> None:
    job = Job(tmp_path / "out.log")
    with job.path.open("ab") as f:
        f.write(b"srun: error: node2: task 3: Exited with exit code 1\n")
    assert job.look(alive=0) == []
    flood = Job(tmp_path / "flood.log")
    with flood.path.open("ab") as f:
        f.write(b"srun: error: node2: task 5: Exited with exit code 1\n")  # lost in the flood
        f.write(b"0: step\n" * (READ_MAX // 8 + 10))
        f.write(b"srun: error: node2: task 6: Exited with exit code 1\n")
    [trigger] = flood.look()
    assert "task 6" in trigger.text and "task 5" not in trigger.text
    assert flood.elsewhere.reader.files[str(flood.path)].skipped > 0
