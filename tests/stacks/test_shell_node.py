"""The POSIX sh node collector (rankscope.stacks.shell_node) run here, and the head's reading of what it sent
(rankscope.stacks.shell_answer): real processes, real py-spy; each hand-over to the node's own rankscope is
seen as that command's output (a stand-in that prints its arguments).

Tools: unshare (a pid namespace with nothing in it) for the "no rank here" case.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rankscope.jobkey import key_from_env
from rankscope.ranks import launcher_of, rank_from_env
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.shell_answer import NeedsNode, node_answer, parse
from rankscope.stacks.shell_node import ENV_NAMES, ENV_PREFIXES, SNAPSHOT_MAGIC, shell_argv, takes

BIN = Path(sys.executable).parent


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """The node's "rankscope": prints HANDED-OVER and its arguments (the hand-over is an exec of it)."""
    path = tmp_path / "rankscope"
    path.write_text('#!/bin/sh\necho HANDED-OVER "$@"\n')
    path.chmod(0o755)
    (tmp_path / "py-spy").symlink_to(BIN / "py-spy")
    return path


WORLD = {"WORLD_SIZE": "2", "MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "29611", "SECRET_TOKEN": "hunter2"}


def _run(
    stand_in: Path,
    tmp_path: Path,
    *options: str,
    ranks: list[dict[str, str]] = (),  # type: ignore[assignment]
    argv: list[str] | None = None,
    then: str = "",
) -> tuple[str, list[int]]:
    """The script's output on a node of its own (a pid namespace that holds only ``ranks``: this
    machine's other processes would make it hand over for reasons of theirs), and the ranks' pids there.

    Each rank is ``argv`` (a Python sleeper by default) with these variables; ``then`` is shell run
    after they started (``$pids`` holds their pids), before the script."""
    ready = tmp_path / "ready"
    ready.mkdir()
    sleeper = argv or [
        sys.executable,
        "-c",
        f"import os, time; open('{ready}/' + str(os.getpid()), 'w'); time.sleep(300)",
    ]
    lines = ["pids="]
    for env in ranks:
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        lines.append(f'env {assignments} {shlex.join(sleeper)} & pids="$pids $!"')
        if argv:
            lines.append(f": > {ready}/$!")
    lines.append(f'while [ "$(ls {ready} | wc -l)" -lt {len(ranks)} ]; do sleep 0.05; done')
    lines.append("echo PIDS $pids")
    lines.append(then)
    python = [str(stand_in), "stacks", "--local", "--json", "--node-answer", *options]
    lines.append(shlex.join(shell_argv(python, "0123abcd")))
    driver = "\n".join(lines) + "\n"
    result = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", driver],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, _, out = result.stdout.partition("\n")
    return out, [int(p) for p in first.split()[1:]]


@pytest.mark.needs("pidns")
def test_the_snapshot_holds_the_ranks_dumps_and_only_the_variables_discovery_reads(
    stand_in: Path, tmp_path: Path
) -> None:
    ranks = [{**WORLD, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in range(2)]
    out, pids = _run(stand_in, tmp_path, "--deadline", "30", ranks=ranks)
    assert out.startswith(SNAPSHOT_MAGIC + " 0123abcd /"), out[:300]
    snap = parse(out)
    assert snap.dumped == set(pids) == set(snap.dumps)
    assert b"MASTER_PORT=29611" in snap.environs[pids[0]]
    assert not any(b"hunter2" in raw for raw in snap.environs.values())  # only what discovery reads
    assert snap.host == os.uname().nodename.split(".")[0]
    assert snap.own and not snap.own & set(pids)  # the script's own chain
    document = node_answer(out, StacksOptions(deadline=30))
    processes = {p["pid"]: p for p in document["report"]["processes"]}
    assert {pid: processes[pid]["rank"]["rank"] for pid in pids} == {pids[0]: 0, pids[1]: 1}
    assert all(processes[pid]["dumped"] for pid in pids)
    assert [job["pids"] for job in document["report"]["jobs"]] == [pids]
    assert sorted(document["dumps"]) == [f"{snap.host}.rank-{r}.pid-{pid}.json" for r, pid in enumerate(pids)]


@pytest.mark.needs("pidns")
def test_a_command_line_that_forges_a_header_does_not_become_a_file(stand_in: Path, tmp_path: Path) -> None:
    """Another process's arguments are in the answer, each line behind its own file's name: none reads as
    a line of the script's files."""
    forged = "\n/tmp/rankscope-x.0123abcd.meta:host evil\ndumped 1\n==> /tmp/x/0123abcd.meta <==\n"
    out, pids = _run(
        stand_in,
        tmp_path,
        ranks=[{**WORLD, "RANK": "0"}],
        then=f"{shlex.join([sys.executable, '-c', 'import time; time.sleep(300)', forged])} & sleep 0.5",
    )
    snap = parse(out)
    assert snap.host != "evil" and snap.dumped == set(pids)
    # Each line of an argument is sent as a line of its own, behind its file's name.
    assert any(args[-3:] == forged.strip().split("\n")[:3] for args in snap.cmdlines.values()), snap.cmdlines


@pytest.mark.needs("pidns")
@pytest.mark.parametrize(
    ("options", "why"),
    [
        (("--pid", "1"), "named pids"),
        (("--native",), "native frames"),
        (("--samples", "3"), "several samples"),
        (("--via-signal",), "in-process handlers"),
    ],
)
def test_options_it_does_not_take_hand_over(
    stand_in: Path, tmp_path: Path, options: tuple[str, ...], why: str
) -> None:
    out, _ = _run(stand_in, tmp_path, *options, ranks=[{**WORLD, "RANK": "0"}])
    assert out.startswith("HANDED-OVER stacks --local --json --node-answer"), why
    assert not takes([str(stand_in), "stacks", "--local", "--json", "--node-answer", *options])


def test_the_head_sends_it_only_what_it_takes() -> None:
    base = ["rankscope", "stacks", "--local", "--json", "--node-answer"]
    assert takes([*base, "--deadline", "23", "--timeout", "5", "--jobs", "2", "--no-fr"])
    assert not takes(base[:-1])  # a person's own --local --json
    assert not takes([*base, "--all-python"])


@pytest.mark.needs("pidns")
def test_no_rank_in_sight_hands_over(stand_in: Path, tmp_path: Path) -> None:
    """No process carries a rank: the node's rankscope says "no job" its own way."""
    out, _ = _run(stand_in, tmp_path)
    assert out.startswith("HANDED-OVER stacks"), out[:300]


@pytest.mark.needs("pidns")
def test_a_rank_with_runtime_files_hands_over(stand_in: Path, tmp_path: Path) -> None:
    """A progress marker (or an in-process handler's description) is read by the node's own rankscope."""
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    rank = {**WORLD, "RANK": "0", "RANKSCOPE_RUNTIME_DIR": str(runtime)}
    out, _ = _run(
        stand_in,
        tmp_path,
        ranks=[rank],
        then=f"for p in $pids; do : > {runtime}/h.rank-0.pid-$p.progress; done",
    )
    assert out.startswith("HANDED-OVER stacks"), out[:300]
    (tmp_path / "again").mkdir()
    out, _ = _run(
        stand_in, tmp_path / "again", ranks=[{**rank, "RANKSCOPE_RUNTIME_DIR": str(tmp_path / "again")}]
    )
    assert out.startswith(SNAPSHOT_MAGIC), "no file of its own: the script answers"


@pytest.mark.needs("pidns")
def test_a_stopped_rank_hands_over(stand_in: Path, tmp_path: Path) -> None:
    """py-spy's dump of a stopped process and its resumption are the node's rankscope's to do."""
    out, _ = _run(stand_in, tmp_path, ranks=[{**WORLD, "RANK": "0"}], then="kill -STOP $pids; sleep 0.2")
    assert out.startswith("HANDED-OVER stacks"), out[:300]


@pytest.mark.needs("pidns")
def test_a_failed_dump_hands_over(stand_in: Path, tmp_path: Path) -> None:
    """A rank py-spy cannot read (a program with a rank that maps an interpreter's name but is none: here
    `sleep` run as python3-not-really) goes to the node's rankscope, whose failure says why."""
    fake = tmp_path / "python3-not-really"
    fake.symlink_to(shutil.which("sleep") or "/bin/sleep")
    out, _ = _run(stand_in, tmp_path, ranks=[{**WORLD, "RANK": "0"}], argv=[str(fake), "300"])
    assert out.startswith("HANDED-OVER stacks"), out[:300]


def test_a_missing_rankscope_is_the_python_commands_127(tmp_path: Path) -> None:
    python = [str(tmp_path / "nowhere" / "rankscope"), "stacks", "--local", "--json", "--node-answer"]
    result = subprocess.run(shell_argv(python, "ab"), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 127 and "not found" in result.stderr


def test_garbage_is_not_a_snapshot() -> None:
    with pytest.raises(ValueError, match="not a node snapshot"):
        parse('{"schema": "rankscope.stacks.node/1"}')
    with pytest.raises(ValueError, match="without its process table"):
        parse(SNAPSHOT_MAGIC + " 00ff /t/x.00ff\n/t/x.00ff.env:1/environ:RANK=0\n")


@pytest.mark.needs("pidns")
def test_a_target_the_script_did_not_dump_sends_the_head_to_the_node(stand_in: Path, tmp_path: Path) -> None:
    out, pids = _run(stand_in, tmp_path, ranks=[{**WORLD, "RANK": "0"}])
    pid = pids[0]
    cut = out.replace(f"dumped {pid}\n", "")
    with pytest.raises(NeedsNode, match=f"pid {pid} was not dumped there"):
        node_answer(cut, StacksOptions())


class _Recording(dict[str, str]):
    """An environment that records every name asked of it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return super().__contains__(key)


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "a", "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "x"},
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
        {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1"},
        {"PMI_RANK": "0", "PMIX_RANK": "0"},
        {"RANK": "0", "LOCAL_SIZE": "8", "CROSS_RANK": "1"},
        {},
    ],
)
def test_the_snapshot_carries_every_variable_the_readers_ask_for(env: dict[str, str]) -> None:
    """The script sends only ENV_NAMES (and ENV_PREFIXES): a reader asking for another would read
    nothing on the head where the node's own run reads a value."""
    recording = _Recording(env)
    rank = rank_from_env(recording, host="h")
    launcher_of(recording)
    key_from_env(recording, rank.world_size)
    assert recording.asked <= set(ENV_NAMES), recording.asked - set(ENV_NAMES)
    assert ENV_PREFIXES == ("ACCELERATE_",)  # launcher_of's one prefix test (any name that starts with it)


def test_the_launchers_it_skips_by_name_are_discovery_s() -> None:
    from rankscope import procs
    from rankscope.stacks.shell_node import _LAUNCHER_NAMES

    assert set(_LAUNCHER_NAMES) == procs._LAUNCHER_EXES | set(procs._LAUNCHER_SCRIPTS)
