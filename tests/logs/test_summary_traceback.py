"""torchrun's failure summary quoting a rank's error file (its main wrapped in ``@record``): the
``traceback :`` field's lines are that rank's traceback, read as one (the rank from the entry's
``rank :`` field). Before, `logs errors` said no traceback was in the log and advised ``@record``.
Logs written here in the form torch.distributed.elastic prints; through the command line."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli, run_cli_here
from tests.support.torchrun_text import failure_summary

SUMMARY = failure_summary(
    3,
    3,
    "node-a",
    4421,
    "2025-12-04_10:02:13",
    error_file="/tmp/torchelastic_x/none_y/attempt_0/3/error.json",
    traceback="""Traceback (most recent call last):
    File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper
      return f(*args, **kwargs)
    File "/job/train.py", line 70, in main
      shard = shards[rank]
  IndexError: list index out of range

""",
)


def test_the_summary_s_traceback_is_the_rank_s_error(tmp_path: Path) -> None:
    log = tmp_path / "launcher.log"
    log.write_text(SUMMARY)
    data = run_cli("logs", "errors", str(log), "--json").json()
    root = data["root_cause"]
    assert (root["exception"], root["where"], root["global_rank"]) == (
        "IndexError: list index out of range",
        "/job/train.py:70",
        3,
    )
    # the verdict's identity too, for a reader of the JSON that looks at `who` alone
    assert (data["verdict"]["who"], data["verdict"]["global_rank"]) == ("3", 3)
    text = run_cli("logs", "errors", str(log)).stdout
    assert text.startswith("root cause: rank 3 (torchrun's summary quotes its error file): IndexError")
    why = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert why["text"] == "rank 3 raised IndexError: list index out of range"
    assert why["location"] == "main (train.py:70)"


def test_the_rank_s_own_traceback_stays_the_root_cause(tmp_path: Path) -> None:
    own = (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/job/train.py", line 70, in main\n'
        "[rank3]:     shard = shards[rank]\n"
        "[rank3]: IndexError: list index out of range\n"
    )
    log = tmp_path / "job.log"
    log.write_text(own + SUMMARY)
    data = run_cli("logs", "errors", str(log), "--json").json()
    assert (data["root_cause"]["label"], data["root_cause"]["line"]) == ("3", 1)


def test_a_summary_cut_inside_the_traceback_still_names_the_rank(tmp_path: Path) -> None:
    log = tmp_path / "launcher.log"
    log.write_text(SUMMARY.split("      shard = shards[rank]")[0])  # the paste ends in the frames
    root = run_cli("logs", "errors", str(log), "--json").json()["root_cause"]
    assert (root["global_rank"], root["where"]) == (3, "/job/train.py:70")
