"""Pure parts of the fan-out: node sets, hostfiles, classification, folding; srun option fallbacks."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.support.leftovers import kill_recorded

from rankscope.cluster.classify import classify
from rankscope.cluster.fanout import run_on_nodes, run_srun_step
from rankscope.cluster.gather import group_failures, group_outputs, render_groups, results_to_json
from rankscope.cluster.targets import expand_nodeset, parse_hostfile
from rankscope.cluster.transports import SrunStep, SshOptions, SshTransport, remote_script
from rankscope.errors import BadInputError
from rankscope.model import Stage


def test_nodesets_expand_like_clustershell() -> None:
    assert expand_nodeset("node-[5,8]") == ["node-5", "node-8"]
    assert expand_nodeset("gpu[001-003],login1") == ["gpu001", "gpu002", "gpu003", "login1"]
    for bad in ("a;b", "-oProxyCommand=x", "a b", "$(id)", "`id`", "node[1-"):
        with pytest.raises(BadInputError):
            expand_nodeset(bad)


def test_hostfiles_of_every_launcher(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text(
        "worker-1 slots=8\nworker-2:8  # MPICH\n\n# comment\nworker-3\nworker-1 slots=8 max_slots=8\n"
    )
    assert parse_hostfile(hostfile) == ["worker-1", "worker-2", "worker-3"]
    hostfile.write_text("worker-1 slots=8\nworker-2 slots 8\n")
    with pytest.raises(BadInputError, match="hosts:2"):
        parse_hostfile(hostfile)
    hostfile.write_text("# nothing\n")
    with pytest.raises(BadInputError, match="names no host"):
        parse_hostfile(hostfile)


def test_ssh_argv_never_lets_a_node_be_an_option() -> None:
    argv = SshTransport(SshOptions(config_file="/cfg", options=("User=me",))).node_argv("n1", "true")
    assert argv[argv.index("--") + 1] == "n1"
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=no" not in argv
    insecure = SshTransport(SshOptions(insecure_no_host_key_check=True)).node_argv("n1", "true")
    assert "StrictHostKeyChecking=no" in insecure


def test_classification_of_transport_messages() -> None:
    def stage(stderr: str, rc: int = 255, timed_out: bool = False) -> str:
        return classify("n1", rc, "", stderr, timed_out, 5.0, 0.1).stage

    assert stage("ssh: connect to host n1 port 22: Connection refused\n") == "unreachable"
    assert stage("ssh: Could not resolve hostname n1: Name or service not known\n") == "unreachable"
    assert stage("root@n1: Permission denied (publickey).\n") == "auth refused"
    assert stage("Host key verification failed.\n") == "auth refused"
    assert stage("", timed_out=True) == "unreachable"
    connected = "debug1: Connecting to n1 port 22.\ndebug1: Connection established.\n"
    assert stage(connected, timed_out=True) == "timeout"
    result = classify("n1", None, "", connected, True, 5.0, 5.0)
    assert result.reason == "connected, but the login had not finished after 5s"
    logged_in = connected + 'Authenticated to n1 ([10.0.0.1]:22) using "publickey".\n'
    result = classify("n1", None, "", logged_in, True, 5.0, 5.0)
    assert result.reason == "logged in, but the command had not started after 5s"
    assert result.stderr == ""  # ssh's own chatter never reaches the user


def test_folding_of_outputs_and_failures() -> None:
    results = [
        classify(f"n{i}", 0, "same\n", remote_script("x").split(";")[0] + "\n", False, 5, 0) for i in range(3)
    ]
    for result in results:  # pretend every node finished with status 0
        result.returncode, result.stage = 0, Stage.OK
    refused = classify("n9", 255, "", "ssh: connect to host n9 port 22: Connection refused\n", False, 5, 0)
    groups = group_outputs([*results, refused])
    assert [(g.nodes, g.output) for g in groups] == [("n[0-2]", "same\n")]
    assert [(f.nodes, f.stage) for f in group_failures([*results, refused])] == [("n9", "unreachable")]
    assert "Failed nodes (1 of 4):" in render_groups([*results, refused])


FAKE_SRUN = r'''#!PYTHON
"""A stand-in srun that refuses one option, as some SLURM versions do; runs each task locally."""
import os, subprocess, sys
args = sys.argv[1:]
if os.environ["REFUSE"] == "overlap" and "--overlap" in args:
    sys.stderr.write("srun: unrecognized option '--overlap'\n")
    sys.exit(1)
if os.environ["REFUSE"] == "gres" and "--gres=gpu:0" in args:
    sys.stderr.write("srun: error: Unable to create step for job 42: Invalid generic resource (gres) specification\n")
    sys.exit(1)
opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
command = args[args.index("sh"):]
for task, node in enumerate(opts["nodelist"].split(",")):
    out = opts["output"].replace("%t", str(task))
    err = opts["error"].replace("%t", str(task))
    with open(out, "w") as o, open(err, "w") as e:
        subprocess.run(command, stdout=o, stderr=e, env=dict(os.environ, SLURMD_NODENAME=node))
'''


@pytest.mark.parametrize("refused", ["overlap", "gres"])
def test_srun_retries_without_an_option_the_slurm_version_refuses(tmp_path: Path, refused: str) -> None:
    fake = tmp_path / "srun"
    fake.write_text(FAKE_SRUN.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", REFUSE=refused)
    results = run_srun_step(
        SrunStep("42"), ["n1", "n2"], remote_script('echo "on $SLURMD_NODENAME"', watch_stdin=False), 20, env
    )
    assert [(r.node, r.stage, r.stdout) for r in results] == [
        ("n1", "ok", "on n1\n"),
        ("n2", "ok", "on n2\n"),
    ]


class LocalShell:
    """A transport that runs the node's script in a local shell (no ssh): tests the fan-out alone."""

    def node_argv(self, node: str, script: str) -> list[str]:
        return ["sh", "-c", script]

    def env(self) -> dict[str, str]:
        return dict(os.environ)


@pytest.mark.timeout(25)
@pytest.mark.parametrize("exits_seen_by", ["pidfd", "polling"])
def test_a_daemonised_grandchild_holding_the_pipes_does_not_hold_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exits_seen_by: str
) -> None:
    # An ssh ControlPersist master does this: it outlives ssh and keeps its stdout/stderr open.
    if exits_seen_by == "polling":  # kernels before 5.3, or a low open-files limit
        monkeypatch.delattr(os, "pidfd_open")
    pid_file = tmp_path / "grandchild.pid"
    script = remote_script(f"setsid sleep 60 & echo $! > {pid_file}; echo done")
    try:
        [result] = run_on_nodes(LocalShell(), ["n1"], script, node_timeout=20)
        assert (result.stage, result.stdout) == ("ok", "done\n")
    finally:
        kill_recorded(pid_file)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(25)
def test_a_node_past_its_deadline_is_ended_with_its_whole_process_group(tmp_path: Path) -> None:
    # SIGTERM first (srun ends its step on it), then the group: nothing the node started survives.
    # The transport itself (here the shell the script runs in, no markers) catches the SIGTERM.
    child_pid, term_seen = tmp_path / "child.pid", tmp_path / "term"
    script = f"trap 'echo term > {term_seen}; exit 143' TERM; sleep 60 & echo $! > {child_pid}; wait"
    messages: list[str] = []
    [result] = run_on_nodes(LocalShell(), ["n1"], script, node_timeout=1, progress=messages.append)
    assert (result.stage, result.reason) == ("unreachable", "never answered within 1s")
    assert term_seen.read_text() == "term\n"
    # The group's SIGKILL is sent as the node is ended; on a loaded machine the kernel may finish the
    # child a moment after run_on_nodes returns (a CI run saw it still there).
    deadline = time.monotonic() + 5
    while not _gone(int(child_pid.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(int(child_pid.read_text()))
    assert messages == ["1/1 nodes"]


@pytest.mark.timeout(25)
def test_fanout_limit_overall_deadline_and_unstartable_transport(tmp_path: Path) -> None:
    running = tmp_path / "running"
    running.mkdir()
    # Each node notes how many nodes run beside it.
    script = remote_script(f"touch {running}/$$; ls {running} | wc -l; sleep 0.3; rm {running}/$$")
    messages: list[str] = []
    results = run_on_nodes(
        LocalShell(), [f"n{i}" for i in range(6)], script, fanout=2, progress=messages.append
    )
    assert [r.stage for r in results] == ["ok"] * 6
    assert max(int(r.stdout) for r in results) <= 2
    assert messages == [f"{i}/6 nodes" for i in range(1, 7)]
    # One at a time, one second for all: the first node uses it up, the others never start.
    slow = remote_script("sleep 30")
    first, *others = run_on_nodes(LocalShell(), ["a", "b", "c"], slow, fanout=1, overall_timeout=1)
    assert (first.stage, first.reason) == ("timeout", "command still running after 1s")
    assert {(r.stage, r.reason) for r in others} == {("timeout", "not started: overall deadline reached")}

    class Missing(LocalShell):
        def node_argv(self, node: str, script: str) -> list[str]:
            return [str(tmp_path / "no-such-transport"), script]

    [missing] = run_on_nodes(Missing(), ["n1"], "true")
    assert missing.stage == "transport error" and missing.reason.startswith("cannot start ")


def test_exec_document_keeps_its_schema_and_field_names() -> None:
    ok = classify("n1", 0, "up\n", "__rankscope_node_exit__ 0\n", False, 5, 0.12345)
    refused = classify("n2", 255, "", "ssh: connect to host n2 port 22: Connection refused\n", False, 5, 0.5)
    assert results_to_json([ok, refused]) == {
        "schema": "rankscope.exec/1",
        "nodes": [
            {"node": "n1", "stage": "ok", "returncode": 0, "stdout": "up\n", "stderr": "", "reason": "",
             "hint": "", "elapsed": 0.123},
            {"node": "n2", "stage": "unreachable", "returncode": None, "stdout": "",
             "stderr": "ssh: connect to host n2 port 22: Connection refused\n",
             "reason": "ssh: connect to host n2 port 22: Connection refused", "hint": refused.hint, "elapsed": 0.5},
        ],
        "groups": [{"nodes": "n1", "count": 1, "returncode": 0, "output": "up\n"}],
        "failures": [
            {"nodes": "n2", "count": 1, "stage": "unreachable", "reason": refused.reason, "hint": refused.hint}
        ],
    }  # fmt: skip


@pytest.mark.timeout(25)
def test_a_signal_ends_every_node_and_the_fanout_reports_them_interrupted(tmp_path: Path) -> None:
    import threading
    import time

    from rankscope.lifetime import StopSignals

    slow_pid = tmp_path / "slow.pid"

    class PerNode(LocalShell):
        def node_argv(self, node: str, script: str) -> list[str]:
            command = "echo fast" if node == "fast" else f"echo $$ > {slow_pid}; exec sleep 60"
            return ["sh", "-c", remote_script(command)]

    def interrupt_when_slow_runs() -> None:
        while not (slow_pid.exists() and slow_pid.read_text().strip()):
            time.sleep(0.02)
        time.sleep(0.5)  # the fast node is done by then
        os.kill(os.getpid(), signal.SIGINT)

    # What SIGINT did before (Python's default_int_handler, or SIG_IGN when the suite was started in
    # the background by a shell): StopSignals must put that back.
    before = signal.getsignal(signal.SIGINT)
    sender = threading.Thread(target=interrupt_when_slow_runs, daemon=True)
    sender.start()
    with StopSignals() as stop:
        results = run_on_nodes(PerNode(), ["fast", "slow", "later"], "", fanout=1, node_timeout=20, stop=stop)
    sender.join()
    assert stop.signum == signal.SIGINT
    assert [(r.node, r.stage, r.reason) for r in results] == [
        ("fast", "ok", ""),
        ("slow", "interrupted", "interrupted by SIGINT before it answered"),
        ("later", "interrupted", "not started: interrupted by SIGINT"),
    ]
    assert _gone(int(slow_pid.read_text()))
    assert signal.getsignal(signal.SIGINT) is before  # put back
