"""`logs errors` details on small hand-made logs: timestamps, chains, normalisation."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

from rankscope.logs.grouping import normalise_message


def test_first_failure_by_timestamp_across_files(tmp_path: Path) -> None:
    """Per-node files: log order says nothing across files, the timestamps do."""
    (tmp_path / "a.log").write_text(
        "[a:0]:2024-05-01 10:00:05,000 INFO step 9\n"
        "[a:0]:Traceback (most recent call last):\n"
        '[a:0]:  File "x.py", line 1, in f\n'
        "[a:0]:ValueError: late\n"
    )
    (tmp_path / "b.log").write_text(
        "[b:1]:2024-05-01T10:00:01.000 INFO step 9\n"
        "[b:1]:some line without a time\n"
        "[b:1]:Traceback (most recent call last):\n"
        '[b:1]:  File "x.py", line 2, in g\n'
        "[b:1]:KeyError: 'early'\n"
    )
    data = run_cli("logs", "errors", str(tmp_path / "a.log"), str(tmp_path / "b.log"), "--json").json()
    assert data["first_failure"]["label"] == "a:0"
    assert data["first_failure_by_time"]["label"] == "b:1"
    assert data["first_failure_by_time"]["time"] == "2024-05-01T10:00:01.000"
    text = run_cli("logs", "errors", str(tmp_path / "a.log"), str(tmp_path / "b.log")).stdout
    assert text.startswith(
        "root cause: b:1: KeyError: 'early' at x.py:2 in g — the first fatal error by timestamp"
    )
    assert data["root_cause"]["chosen_by"] == "timestamp"


def test_chained_exception_is_one_error_with_its_cause(tmp_path: Path) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "io.py", line 3, in read',
        "FileNotFoundError: ckpt-7.pt",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in resume',
        "RuntimeError: cannot resume from ckpt-7.pt",
    ]
    path = tmp_path / "job.log"
    path.write_text("".join(f"[n:{r}]:{line}\n" for r in range(3) for line in lines))
    data = run_cli("logs", "errors", str(path), "--json").json()
    assert len(data["groups"]) == 1
    group = data["groups"][0]
    assert (group["exception_type"], group["ranks"]) == ("RuntimeError", "n:[0-2]")
    assert group["chained"] == ["FileNotFoundError: ckpt-7.pt"]
    assert [f["function"] for f in group["frames"]] == ["resume"]


def test_normalisation_of_varying_parts() -> None:
    message = (
        "connect to 10.1.2.3:29500 failed on gpu017 at 0x7ffde000 "
        "(/opt/conda/lib/python3.11/site-packages/torch/x.py, /tmp/tmpab12/f)"
    )
    assert normalise_message(message, hosts=["gpu017"]) == (
        "connect to <ip> failed on <host> at <addr> (torch/x.py, <tmp>)"
    )


def test_a_space_after_the_prefix_colon_is_read_like_torch_s_own(tmp_path: Path) -> None:
    """`print(f"[{host}:{rank}]: ...")` style: the traceback, its frames and its exception are read."""
    path = tmp_path / "job.log"
    lines = []
    for rank in (2, 5):
        prefix = f"[n1:{rank}]: "
        lines += [
            f"{prefix}step 7",
            f"{prefix}Traceback (most recent call last):",
            f'{prefix}  File "/w/train.py", line 3, in <module>',
            f"{prefix}    1/0",
            f"{prefix}ZeroDivisionError: division by zero",
        ]
    path.write_text("\n".join(lines) + "\n")
    data = run_cli("logs", "errors", str(path), "--json").json()
    (group,) = data["groups"]
    assert sorted(group["labels"]) == ["n1:2", "n1:5"]
    assert (group["exception_type"], group["message"]) == ("ZeroDivisionError", "division by zero")
    assert [f["line"] for f in group["frames"]] == [3]
    assert data["root_cause"]["where"] == "/w/train.py:3"


FULL = """\
[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/srv/job/train.py", line 88, in <module>
[rank{r}]:     main()
[rank{r}]:   File "/srv/job/train.py", line 61, in main
[rank{r}]:     model = build(cfg)
[rank{r}]:   File "/srv/job/model.py", line 12, in build
[rank{r}]:     return Net(cfg.width)
[rank{r}]: TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'
"""


def test_a_copy_that_lost_its_outer_frames_is_the_same_error(tmp_path: Path) -> None:
    """Rank 3's copy of the error came through without its two outer frames (a paste cut, lines
    interleaved away): it is the same error as ranks 0-1's, not a second one."""
    cut = "".join(
        line + "\n" for line in FULL.format(r=3).splitlines() if "train.py" not in line and "main" not in line
    )
    other = FULL.format(r=0).replace("in build", "in build_head")  # another function: another error
    log = tmp_path / "job.log"
    log.write_text(FULL.format(r=0) + cut + FULL.format(r=1) + other.replace("[rank0]", "[rank2]"))
    data = run_cli("logs", "errors", str(log), "--json").json()
    groups = [(g["ranks"], len(g["frames"])) for g in data["groups"]]
    assert groups == [("0-1,3", 3), ("2", 3)], groups
    assert data["verdict"]["ranks"] == "0-1,3", data["verdict"]
