"""rankscope.breakpoint() on rank 1 of a real 2-rank torchrun job (gloo), typed at through a terminal.

torchrun shows only rank 0's output (--local-ranks-filter=0): pdb on rank 1 talks to the terminal
itself, so the filter that hides rank 1's prints does not hide its prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tests.debug.conftest import Terminal, job_argv, job_env

PROMPT = "(Pdb rank 1) "


def test_rank_1_stops_in_pdb_on_the_terminal_while_rank_0_waits(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    flags = tmp_path / "flags"
    job = terminal(
        job_argv("--early", launcher=("--local-ranks-filter=0", "--tee=3", f"--log-dir={tmp_path / 'logs'}")),
        {**job_env(), "RANKSCOPE_BREAKPOINT_DIR": str(flags)},
    )

    # Before torch is imported (the ranks meet through a file): stopped in the caller's
    # frame, on the line after the call, not inside rankscope.
    first = job.expect(PROMPT)
    assert "bp_job.py(13)<module>()\n-> step = rank + 100" in first
    job.send("p rank")
    assert job.expect(PROMPT).split("\n")[1] == "1"
    job.send("n")  # one line of the caller; the other rank still waits
    assert "-> print(" in job.expect(PROMPT)
    job.send("p step")
    assert job.expect(PROMPT).split("\n")[1] == "101"
    assert "rank 0 passed" not in job.seen
    job.send("c")

    # torch imported, no process group yet: the ranks meet in torchrun's store.
    assert '-> print(f"rank {rank} passed the second breakpoint"' in job.expect(PROMPT)
    job.shown("rank 0 passed the first breakpoint, step=100")
    assert "rank 0 passed the second" not in job.seen
    job.send("c")

    # After init_process_group(timeout=5 s): rank 0 waits in no collective, so a session longer
    # than the group's timeout does not end the job. `q` detaches and releases rank 0.
    assert "-> value = torch.tensor([rank + 1])" in job.expect(PROMPT)
    job.shown("rank 0 passed the second breakpoint")
    job.send("import time; time.sleep(7)")
    job.expect(PROMPT, timeout=30)
    assert "done" not in job.seen
    job.send("q")
    job.expect("detached; the program goes on")
    assert job.wait(60) == 0, job.seen
    assert "rank 0 done, sum=3" in job.seen
    # torchrun's filter hid rank 1's own output from the console, never its pdb prompt.
    assert "rank 1 done" not in job.seen
    (rank_1_log,) = (tmp_path / "logs").glob("*/attempt_0/1/stdout.log")
    assert "rank 1 done, sum=3" in rank_1_log.read_text()
    assert [flag.name.rsplit("-", 1)[1] for flag in flags.iterdir()] == ["1.released"]  # the others: stores
