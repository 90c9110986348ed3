"""torchrun restarting its workers (``--max-restarts``): the attempt that ended the job holds the root cause.

The logs are written here in the format of torch 2.x's agent (its logger's ``I/W/E MMDD`` head);
each attempt starts the same local ranks again, so the same prefixes belong to new processes.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli_here

AGENT = "torch/distributed/elastic/agent/server/api.py:900]"


def _restart(left: int) -> str:
    return f"I1127 06:40:0{left}.100000 511 {AGENT} [default] Worker group FAILED. {left}/3 attempts left; will restart worker group\n"


def _traceback(rank: int, where: str, error: str) -> str:
    return (
        f"[default{rank}]:Traceback (most recent call last):\n"
        f'[default{rank}]:  File "/job/train.py", line 50, in <module>\n'
        f"[default{rank}]:    main()\n"
        f'[default{rank}]:  File "/job/train.py", line {where}\n'
        f"[default{rank}]:    step()\n"
        f"[default{rank}]:{error}\n"
    )


NCCL_FIRST = (
    "[default1]:gpu-3:4242:4300 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n"
    "[default1]:gpu-3:4242:4300 [1] transport/net_ib.cc:1736 NCCL WARN NET/IB : Got completion from peer "
    "10.0.0.4<59123> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.3 remoteGid ::ffff:10.0.0.4\n"
)


def _verdict(tmp_path: Path, text: str) -> dict[str, object]:
    log = tmp_path / "job.log"
    log.write_text(text)
    result = run_cli_here("logs", "errors", str(log), "--json")
    verdict: dict[str, object] = result.json()["verdict"]
    return verdict


def test_an_earlier_attempts_network_error_gives_way_to_the_error_that_ended_the_job(tmp_path: Path) -> None:
    """NCCL's lines are the strongest evidence, but this one belongs to an attempt torchrun restarted."""
    text = (
        NCCL_FIRST
        + _restart(2)
        + "[default0]:resuming from step 4000\n"
        + _traceback(0, "31, in main", "KeyError: 'optimizer'")
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict["exception"], verdict["who"], verdict["superseded"]) == ("KeyError", "0", False)


def test_without_a_culprit_in_the_last_attempt_the_earlier_one_stands(tmp_path: Path) -> None:
    """The last attempt was stopped from outside: no error of its own, so the earlier failure is the story."""
    text = (
        _traceback(1, "22, in main", "ValueError: loss is NaN")
        + _restart(2)
        + "[default0]:resuming from step 4000\n"
        + f"W1127 06:45:00.000000 511 {AGENT} Received 15 death signal, shutting down workers\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict["exception"], verdict["who"], verdict["superseded"]) == ("ValueError", "1", True)


def test_the_same_error_in_every_attempt_is_counted_once_and_the_first_attempt_is_told(
    tmp_path: Path,
) -> None:
    text = (
        _traceback(1, "22, in main", "torch.OutOfMemoryError: CUDA out of memory.")
        + _restart(2)
        + _traceback(0, "31, in main", "RuntimeError: checkpoint is corrupt")
        + _restart(1)
        + _traceback(0, "31, in main", "RuntimeError: checkpoint is corrupt")
    )
    log = tmp_path / "job.log"
    log.write_text(text)
    text_out = run_cli_here("logs", "errors", str(log)).stdout
    head = text_out.splitlines()
    assert head[0].startswith("root cause: rank 0: RuntimeError: checkpoint is corrupt"), text_out
    assert "other culprit" not in head[1], text_out  # the earlier attempts are told apart
    assert (
        "torchrun restarted the workers 2 time(s) and this ended the last attempt; the first attempt failed "
        "with torch.OutOfMemoryError at /job/train.py:22" in head[1]
    ), text_out


def test_torch_2_13s_agent_lines_count_the_restarts_where_its_info_lines_are_hidden(tmp_path: Path) -> None:
    """torch 2.13's torchrun prints no "will restart worker group" line by default (INFO); its agent's
    error line for each failed attempt is there (seen with ``--max-restarts 1``). The second attempt's
    rank failed in init_process_group, before torch marks tracebacks with ``[rankN]:``: no culprit of
    that attempt is prefixed, so the first attempt's error stands, and the restart is said."""
    agent = "E1127 06:09:3{}.670000 24476 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: {}) of binary: /venv/bin/python3\n"
    text = (
        _traceback(1, "6, in step", "ValueError: loss is NaN").replace("[default1]:", "[rank1]: ")
        + agent.format(3, 24482)
        + "[rank0]: resuming\n"
        + agent.format(6, 24508)
    )
    log = tmp_path / "job.log"
    log.write_text(text)
    head = run_cli_here("logs", "errors", str(log)).stdout.splitlines()
    assert head[0].startswith("root cause: rank 1: ValueError: loss is NaN"), head
    assert (
        "torchrun restarted the workers 1 time(s) after it, and no rank's traceback of a later attempt"
        in head[1]
    )
    # one agent line alone is no restart; nor are two agents' lines (two nodes' output in one file)
    once = tmp_path / "once.log"
    once.write_text(
        text.replace(agent.format(6, 24508), agent.format(6, 24508).replace(" 24476 ", " 31337 "))
    )
    assert "restarted" not in run_cli_here("logs", "errors", str(once)).stdout


def test_a_set_up_error_after_a_restart_whose_first_attempt_got_past_it_points_at_the_first_error() -> None:
    """A real torch 2.13 job (recorded): attempt 0's rank 1 raised ValueError in training; the restarted
    workers' gloo mesh was refused. The interface advice would mislead: attempt 0 connected."""
    log = Path(__file__).parent / "corpus" / "logs" / "recorded_torchrun_restart_gloo_refused_info.log"
    lines = run_cli_here("logs", "errors", str(log)).stdout.splitlines()
    step = next(line for line in lines if line.startswith("  next: "))
    assert "the first attempt's ranks got past this set-up with the same settings" in step, step
    assert "ValueError at /home/user/job/restart.py:12" in step and "GLOO_SOCKET_IFNAME" not in step
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["next_step"] == step.removeprefix("  next: ")


def test_restarts_are_counted_under_srun_labels_too(tmp_path: Path) -> None:
    """``srun --label`` puts its task before every line, torchrun's agent's included."""
    agent = "E1127 06:09:3{}.670000 24476 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: {} (pid: {}) of binary: /venv/bin/python3\n"
    text = (
        _traceback(1, "22, in main", "ValueError: loss is NaN").replace("[default1]:", "[rank1]: ")
        + agent.format(3, 1, 24482)
        + _traceback(0, "31, in main", "KeyError: 'optimizer'").replace("[default0]:", "[rank0]: ")
        + agent.format(6, 0, 24508)
    )
    log = tmp_path / "job.log"
    log.write_text("".join(f"0: {line}\n" for line in text.splitlines()))
    head = run_cli_here("logs", "errors", str(log)).stdout.splitlines()
    assert head[0].startswith("root cause: rank 0: KeyError: 'optimizer'"), head
    assert "torchrun restarted the workers 1 time(s) and this ended the last attempt" in head[1], head
