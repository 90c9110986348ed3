"""One options object per verb, the node command line derived from it, one exit-code policy, one --out writer."""

from __future__ import annotations

import os
import stat
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from rankscope.cli.cluster_options import cluster_target
from rankscope.cli.exec import exec_cmd
from rankscope.cli.nodefiles import write_node_files
from rankscope.cli.outcome import exit_code
from rankscope.cli.outfiles import OutDir
from rankscope.cli.stacks import StacksRequest, read_request, stacks
from rankscope.cluster.classify import NodeResult
from rankscope.cluster.run import ClusterTarget
from rankscope.cluster.transports import SshOptions
from rankscope.errors import BadInputError, ExitCode
from rankscope.model import Failure, FailureKind, RankId, Stage
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.report import Diagnosis, ProcessInfo, StacksReport

#: Every field away from its default, so a field without a flag (or a flag that reads back
#: differently) breaks the round trip below.
EVERYTHING = StacksOptions(
    pids=(4242, 17),
    all_python=True,
    native=True,
    native_all=True,
    with_locals=True,
    samples=3,
    interval=0.25,
    timeout=2.5,
    deadline=12.125,
    parallelism=7,
    slurm_job="2180718",
    via_signal=True,
    no_fr=True,
)


def parse_stacks(argv: list[str]) -> StacksRequest:
    """``rankscope stacks ARGV`` read by the real click command, without running it."""
    with stacks.make_context("stacks", list(argv)) as ctx:
        return read_request(ctx.params)


def test_the_sample_sets_every_option() -> None:
    assert all(getattr(EVERYTHING, f.name) != f.default for f in fields(StacksOptions))


@pytest.mark.parametrize("options", [StacksOptions(), EVERYTHING, StacksOptions(interval=1 / 3, pids=(1,))])
def test_to_argv_reads_back_to_the_same_options(options: StacksOptions) -> None:
    argv = options.to_argv()
    assert argv[:3] == ["stacks", "--local", "--json"]
    request = parse_stacks(argv[1:])
    assert request.options == options
    assert request.local and request.as_json and request.cluster is None
    assert request.node_answer  # the head asks for the raw answer (rankscope.stacks.node)
    # ... and so does the light entry every node runs (rankscope.cli.node), without click.
    assert StacksOptions.from_argv(argv) == options
    from rankscope.cli.stacks_request import read_plain

    usage_error = options.via_signal and options.native  # the light reader leaves it to click
    assert read_plain(argv) == (None if usage_error else request)


@pytest.mark.parametrize(
    "argv",
    [
        ["stacks", "--json"],
        ["stacks", "--local", "--json", "--hosts", "n[1-2]"],
        ["stacks", "--local", "--json", "--samples"],
        ["stacks", "--local", "--json", "--samples", "many"],
        ["stacks", "--local", "--json", "--via-signal", "--native"],
    ],
)
def test_any_other_command_line_takes_the_full_path(argv: list[str]) -> None:
    from rankscope.cli.node import node_options

    assert node_options(argv) is None


def test_a_node_answers_the_same_document_without_click() -> None:
    """`stacks --local --json` through the light entry and through click: the same document."""
    import json
    import re
    import subprocess
    import sys

    target = subprocess.Popen(["sleep", "60"], start_new_session=True)
    argv = ["stacks", "--local", "--json", "--pid", str(target.pid), "--no-fr"]
    try:
        light = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "rankscope", *argv], capture_output=True, text=True
        )
        full = subprocess.run(
            [sys.executable, "-c", f"from rankscope.cli.main import main; main({argv!r})"],
            capture_output=True,
            text=True,
        )
    finally:
        os.killpg(target.pid, 9)
        target.wait()
    imports_click = re.compile(r"\| +click$", re.MULTILINE)
    assert not imports_click.search(light.stderr)
    assert imports_click.search(
        subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import rankscope.cli.main"],
            capture_output=True,
            text=True,
        ).stderr
    )
    assert light.returncode == full.returncode
    documents = [json.loads(run.stdout) for run in (light, full)]
    for document in documents:
        document.pop("seconds")  # how long each run took
    assert documents[0] == documents[1]


def test_node_argv_is_derived_from_the_same_options() -> None:
    request = parse_stacks(
        [
            "--jobid",
            "99",
            "--node-timeout",
            "20",
            "--native",
            "--pid",
            "5",
            "--remote-rankscope",
            "/v/rankscope",
        ]
    )
    argv = request.node_argv()
    assert argv[0] == "/v/rankscope"
    on_node = parse_stacks(argv[2:])
    # The node finishes before the caller's per-node deadline (0.8 x 20 - 1 s) and keeps to the job.
    assert on_node.options == replace(request.options, deadline=15.0, slurm_job="99")
    assert on_node.local and on_node.as_json


def test_node_deadline_never_exceeds_the_run_deadline() -> None:
    assert StacksOptions(deadline=3.0).for_node(60.0).deadline == 3.0
    assert StacksOptions().for_node(1.0).deadline == 1.0


def test_cluster_options_are_read_by_name() -> None:
    argv = ["--hosts", "n[1-2]", "--fanout", "3", "--node-timeout", "5", "--ssh-option", "A=1"]
    argv += [
        "--ssh-option",
        "B=2",
        "--via",
        "ssh",
        "--insecure-no-host-key-check",
        "--deadline",
        "9",
        "--",
        "date",
    ]
    with exec_cmd.make_context("exec", argv) as ctx:
        target = cluster_target(ctx.params)
    assert target == ClusterTarget(
        hosts="n[1-2]",
        via="ssh",
        fanout=3,
        node_timeout=5.0,
        overall_timeout=9.0,
        ssh=SshOptions(options=("A=1", "B=2"), connect_timeout=6.0, insecure_no_host_key_check=True),
    )


def test_stacks_reads_the_cluster_options_too() -> None:
    request = parse_stacks(["--hostfile", "hf", "--remote-setup", ". ~/.pdshrc", "--ssh-config", "cfg"])
    assert request.cluster == ClusterTarget(
        hostfile=Path("hf"),
        remote_setup=". ~/.pdshrc",
        ssh=SshOptions(config_file="cfg", connect_timeout=10.0),
    )
    assert parse_stacks(["--hostfile", "hf", "--local"]).cluster is None


def _failure(stage: Stage, kind: FailureKind = FailureKind.OTHER) -> Failure:
    return Failure("t", stage, "why", kind=kind)


@pytest.mark.parametrize(
    ("targets", "done", "failures", "missing", "code"),
    [
        (4, 4, [], [], ExitCode.OK),
        (4, 3, [_failure(Stage.DUMP)], [], ExitCode.PARTIAL),
        (3, 3, [], [1], ExitCode.PARTIAL),  # world size 4, rank 1 exited before discovery: nothing failed
        (4, 3, [_failure(Stage.DUMP)], [1], ExitCode.PARTIAL),
        (0, 0, [], [], ExitCode.NOTHING_FOUND),
        (2, 0, [_failure(Stage.NO_JOB), _failure(Stage.NO_JOB)], [], ExitCode.NOTHING_FOUND),
        (2, 0, [_failure(Stage.NO_JOB), _failure(Stage.UNREACHABLE)], [], ExitCode.ALL_FAILED),
        (2, 0, [_failure(Stage.ATTACH, FailureKind.PERMISSION)] * 2, [], ExitCode.PERMISSION_DENIED),
        (2, 0, [_failure(Stage.ATTACH, FailureKind.PERMISSION)] * 2, [2], ExitCode.PERMISSION_DENIED),
        (0, 0, [_failure(Stage.DISCOVER, FailureKind.GONE)], [], ExitCode.BAD_INPUT),
        (
            1,
            0,
            [_failure(Stage.DISCOVER, FailureKind.GONE)],
            [],
            ExitCode.ALL_FAILED,
        ),  # it exited while we looked
        (3, 0, [_failure(Stage.COMMAND_FAILED)], [], ExitCode.ALL_FAILED),
    ],
)
def test_one_exit_code_policy(
    targets: int, done: int, failures: list[Failure], missing: list[int], code: ExitCode
) -> None:
    assert exit_code(targets, done, failures, missing) == code


def test_ranks_gone_before_discovery_make_a_partial_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """World size 4, only ranks 0, 2, 3 found and dumped: exit 4 and the report names rank 1."""
    from rankscope.cli import stacks_report
    from rankscope.stacks.local import LocalResult

    report = StacksReport(hosts=["n1"])
    report.processes = [ProcessInfo(100 + r, RankId("n1", r, r, 4, 0, 4)) for r in (0, 2, 3)]
    monkeypatch.setattr(
        stacks_report, "run_local", lambda options, progress, started, stop: LocalResult(report)
    )
    code = stacks_report.report_local(StacksOptions(), StacksRequest(StacksOptions(), color=False))
    assert code == ExitCode.PARTIAL
    out = capsys.readouterr().out
    assert "note: rank 1 of world size 4 was not found" in out


def test_ranks_on_other_nodes_do_not_make_a_partial_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node 1 of a 2-node job (4 ranks a node): all of its ranks 4-7 dumped is a whole answer."""
    from rankscope.cli import stacks_report
    from rankscope.stacks.local import LocalResult

    report = StacksReport(hosts=["n2"])
    report.processes = [ProcessInfo(100 + r, RankId("n2", r, r - 4, 8, 1, 4)) for r in range(4, 8)]
    monkeypatch.setattr(
        stacks_report, "run_local", lambda options, progress, started, stop: LocalResult(report)
    )
    code = stacks_report.report_local(StacksOptions(), StacksRequest(StacksOptions(), color=False))
    assert code == ExitCode.OK
    assert "ranks 0-3 of world size 8 were not found" in capsys.readouterr().out


def test_json_runs_render_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankscope.cli import stacks_report
    from rankscope.stacks import render

    def refuse(*_: Any, **__: Any) -> str:
        raise AssertionError("render_text ran for --json")

    monkeypatch.setattr(render, "render_text", refuse)
    request = StacksRequest(StacksOptions(), as_json=True)
    assert stacks_report.render_for(request, StacksReport(), Diagnosis(headline="")) == (None, None)


def test_node_files_are_private_and_say_the_stage(tmp_path: Path) -> None:
    results = [
        NodeResult("n1", Stage.OK, 0, "{}", ""),
        NodeResult("n2", Stage.UNREACHABLE, None, "", "ssh: no route", reason="never answered"),
    ]
    out = tmp_path / "out"
    write_node_files(out, results, {"schema": "x"}, "exec.json", extra={"report.txt": "text"})
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert sorted(p.name for p in out.iterdir()) == ["exec.json", "n1.out", "n2.err", "n2.out", "report.txt"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in out.iterdir())
    assert (out / "n2.err").read_text() == "# stage: unreachable: never answered\nssh: no route"


@pytest.mark.parametrize(("force", "refusal"), [(False, "not empty"), (True, "symbolic link")])
def test_node_files_are_never_written_through_a_link(tmp_path: Path, force: bool, refusal: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "n1.out")
    with pytest.raises(BadInputError, match=refusal):
        write_node_files(out, [NodeResult("n1", Stage.OK, 0, "new", "")], {}, "exec.json", force=force)
    assert victim.read_text() == "keep" and (out / "n1.out").is_symlink()


def test_out_dir_refuses_a_non_empty_directory_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o755)
    (out / "theirs.txt").write_text("keep")
    with pytest.raises(BadInputError) as caught:
        OutDir(out)
    assert "is not empty" in str(caught.value) and "--force" in caught.value.hint
    with OutDir(out, force=True) as forced:
        forced.write("mine.txt", "new")
    assert (out / "theirs.txt").read_text() == "keep"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755  # not created here: never chmodded


def test_forced_out_dir_replaces_a_file_and_makes_it_private(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    old = out / "n1.out"
    old.write_text("old text that is longer than the new one")
    old.chmod(0o644)
    other_link = tmp_path / "hard"
    os.link(old, other_link)  # the old inode lives on elsewhere: it must not be written
    write_node_files(out, [NodeResult("n1", Stage.OK, 0, "new", "")], {}, "exec.json", force=True)
    assert old.read_text() == "new"
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    assert other_link.read_text() == "old text that is longer than the new one"


def test_out_dir_under_a_file_is_one_clear_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for path in (afile / "sub", afile / "sub" / "deeper"):
        with pytest.raises(BadInputError, match="cannot write .*afile.*not a directory|Not a directory"):
            OutDir(path)
    assert afile.read_text() == "x"


def test_reopen_appends_to_the_same_file_and_refuses_a_replacement(tmp_path: Path) -> None:
    with OutDir(tmp_path / "out") as out:
        os.write(fd := out.open("r.log"), b"one\n")
        os.close(fd)
        os.write(fd := out.reopen("r.log"), b"two\n")
        os.close(fd)
        assert (tmp_path / "out" / "r.log").read_bytes() == b"one\ntwo\n"
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious\n")
        os.unlink(tmp_path / "out" / "r.log")
        os.link(victim, tmp_path / "out" / "r.log")  # a hard link to someone else's file
        with pytest.raises(BadInputError, match="replaced"):
            out.reopen("r.log")
        with pytest.raises(BadInputError, match="did not create"):
            out.reopen("other.log")
    assert victim.read_bytes() == b"precious\n"


@pytest.mark.parametrize("verb", [["stacks"], ["exec", "--hosts", "n1", "--", "true"]])
def test_every_out_verb_refuses_a_non_empty_directory_before_it_starts(
    tmp_path: Path, verb: list[str]
) -> None:
    from tests.support.cli import run_cli

    (tmp_path / "theirs").write_text("keep")
    result = run_cli(*verb[:1], "--out", str(tmp_path), *verb[1:])
    assert result.returncode == ExitCode.BAD_INPUT
    assert result.stderr.count("\n") == 1 and "--force" in result.stderr, result.stderr
    assert result.stdout == ""


def test_small_verbs_read_their_options_by_name() -> None:
    from rankscope.cli.params import from_params
    from rankscope.cli.prefix import PrefixRequest, prefix
    from rankscope.cli.whoami import WhoamiRequest, whoami

    with prefix.make_context("prefix", ["--short-host", "--rank", "3", "--", "ls", "-l"]) as ctx:
        assert from_params(PrefixRequest, ctx.params) == PrefixRequest(("ls", "-l"), True, 3)
    with whoami.make_context("whoami", ["--pid", "7", "--json"]) as ctx:
        assert from_params(WhoamiRequest, ctx.params) == WhoamiRequest(7, True)


@pytest.mark.parametrize("as_json", [False, True])
def test_nothing_found_on_this_node(
    as_json: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rankscope.cli import stacks_report
    from rankscope.stacks.local import LocalResult

    monkeypatch.setattr(
        stacks_report, "run_local", lambda options, progress, started, stop: LocalResult(StacksReport())
    )
    code = stacks_report.report_local(StacksOptions(), StacksRequest(StacksOptions(), as_json=as_json))
    assert code == ExitCode.NOTHING_FOUND
    out, err = capsys.readouterr()
    if as_json:
        assert '"schema": "rankscope.stacks/1"' in out and err == ""
    else:
        assert out == "" and err.startswith("rankscope: error: no distributed job found on this node")


def test_a_run_that_writes_nothing_leaves_no_new_out_directory(tmp_path: Path) -> None:
    """The --out directory rankscope made for a run that found nothing is gone; one that existed stays."""
    from tests.support.cli import run_cli

    new = tmp_path / "new" / "out"
    result = run_cli("exec", "--hosts", "bad/name", "--out", str(new), "--", "true")
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert not (tmp_path / "new").exists()  # nor the parent it made for it
    existing = tmp_path / "existing"
    existing.mkdir()
    run_cli("exec", "--hosts", "bad/name", "--out", str(existing / "out"), "--", "true")
    assert list(tmp_path.iterdir()) == [existing]
    assert list(existing.iterdir()) == []
    # A run that wrote its report keeps it.
    kept = tmp_path / "kept"
    run_cli("stacks", "--pid", "999999", "--out", str(kept))
    assert (kept / "report.txt").is_file()
