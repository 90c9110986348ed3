"""The stage classifier on what ssh and pdsh really printed (tests/cluster/data/transport_outcomes.json).

The outcomes were recorded by tests/cluster/data/record_transport_outcomes.py against a real sshd:
each keeps the transport's exit code, stdout, stderr (ssh -v lines and our markers included) and
whether the fan-out stopped it at its deadline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rankscope.cluster.classify import classify, last_line, split_markers, strip_ssh_debug
from rankscope.model import Stage

OUTCOMES: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "transport_outcomes.json").read_text()
)

#: case -> (stage, the start of the reason, the command's exit status)
EXPECTED = {
    "ssh ok": (Stage.OK, "", 0),
    "ssh command exits 3": (Stage.COMMAND_FAILED, "exit 3: no such file: /data/x", 3),
    "ssh command still running": (Stage.TIMEOUT, "command still running after 4s", None),
    "ssh connection refused": (Stage.UNREACHABLE, "ssh: connect to host 127.0.0.1 port ", None),
    "ssh login refused": (Stage.AUTH_REFUSED, "rankscope-no-such-user@127.0.0.1: Permission denied", None),
    "ssh unknown host key": (
        Stage.AUTH_REFUSED,
        "No ED25519 host key is known for rankscope-unknown-key",
        None,
    ),
    "ssh unresolvable name": (
        Stage.UNREACHABLE,
        "ssh: Could not resolve hostname rankscope-no-such-host",
        None,
    ),
    "ssh black hole": (Stage.UNREACHABLE, "never answered within 4s", None),
    "ssh no banner": (Stage.TIMEOUT, "connected, but the login had not finished after 4s", None),
    "ssh slow login shell": (Stage.TIMEOUT, "logged in, but the command had not started after 4s", None),
    "pdsh ok": (Stage.OK, "", 0),
    "pdsh command exits 3": (Stage.COMMAND_FAILED, "exit 3: no such file: /data/x", 3),
    "pdsh connection refused": (Stage.UNREACHABLE, "ssh: connect to host 127.0.0.1 port ", None),
    "pdsh login refused": (Stage.AUTH_REFUSED, "rankscope-no-such-user@127.0.0.1: Permission denied", None),
}


def classify_recorded(case: str, elapsed: float = 1.5) -> Any:
    outcome = OUTCOMES[case]
    return classify(
        outcome["node"],
        outcome["returncode"],
        outcome["stdout"],
        outcome["stderr"],
        outcome["timed_out"],
        outcome["deadline"],
        elapsed,
    )


def test_every_recorded_case_is_expected() -> None:
    assert sorted(OUTCOMES) == sorted(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_recorded_outcome_gets_its_stage(case: str) -> None:
    stage, reason, status = EXPECTED[case]
    result = classify_recorded(case)
    assert (result.node, result.stage, result.returncode) == (OUTCOMES[case]["node"], stage, status)
    assert result.reason.startswith(reason), result.reason
    assert bool(result.hint) == (stage not in (Stage.OK, Stage.COMMAND_FAILED))
    assert result.elapsed == 1.5
    # What the user sees: neither ssh's -v chatter nor our markers.
    assert "debug1:" not in result.stderr and "__rankscope_node_" not in result.stderr
    if stage in (Stage.OK, Stage.COMMAND_FAILED):
        assert result.stdout == ("hello\n" if stage is Stage.OK else "partial\n")


def test_the_recordings_hold_what_the_classifier_reads() -> None:
    # Guards the recordings themselves: each timeout case shows how far ssh got.
    assert "debug1: Connection established." not in OUTCOMES["ssh black hole"]["stderr"]
    assert "debug1: Connection established." in OUTCOMES["ssh no banner"]["stderr"]
    assert "Authenticated to " not in OUTCOMES["ssh no banner"]["stderr"]
    assert "Authenticated to " in OUTCOMES["ssh slow login shell"]["stderr"]
    # (ssh -v's "Sending command: ..." line quotes the script, markers included: not a marker line)
    assert "\n__rankscope_node_started__" not in OUTCOMES["ssh slow login shell"]["stderr"]
    assert "\n__rankscope_node_started__" in OUTCOMES["ssh command still running"]["stderr"]
    assert OUTCOMES["pdsh connection refused"]["stderr"].count("\n") >= 2  # ssh's words and pdsh's summary


def test_pdsh_summary_gives_way_to_ssh_words() -> None:
    result = classify_recorded("pdsh connection refused")
    assert "exit code 255" not in result.reason and "Connection refused" in result.reason
    assert not result.reason.startswith(("pdsh@", "closedport: "))


def test_classifier_is_a_pure_function_of_its_arguments() -> None:
    first, again = classify_recorded("ssh slow login shell"), classify_recorded("ssh slow login shell")
    assert first == again and first is not again
    # The same stderr with another deadline only changes the words about the deadline.
    outcome = OUTCOMES["ssh slow login shell"]
    longer = classify("slowlogin", None, "", outcome["stderr"], True, 30.0, 30.0)
    assert longer.reason == "logged in, but the command had not started after 30s"


def test_a_started_command_without_exit_status_failed_on_the_way() -> None:
    started = "__rankscope_node_started__ \nKilled\n"
    result = classify("n1", 137, "", started, False, 5.0, 0.1)
    assert (result.stage, result.reason, result.returncode) == (Stage.COMMAND_FAILED, "Killed", None)
    result = classify("n1", 1, "", "something odd\n", False, 5.0, 0.1)
    assert (result.stage, result.reason) == (Stage.TRANSPORT_ERROR, "something odd")
    result = classify("n1", 255, "", "", False, 5.0, 0.1)
    assert result.reason == "exited with code 255 before running the command"


def test_srun_task_status_comes_from_the_exit_marker() -> None:
    # An srun task has no transport exit code of its own (None): the marker carries it.
    stderr = "__rankscope_node_started__ n3\nboom\n__rankscope_node_exit__ 7\n"
    result = classify("n3", None, "out\n", stderr, False, 30.0, 2.0)
    assert (result.stage, result.returncode, result.reason, result.stderr) == (
        Stage.COMMAND_FAILED,
        7,
        "exit 7: boom",
        "boom\n",
    )


def test_helpers_on_recorded_stderr() -> None:
    login, rest = strip_ssh_debug(OUTCOMES["ssh ok"]["stderr"])
    assert login.connected and login.authenticated
    assert split_markers(rest) == (True, 0, "")
    assert (
        last_line("pdsh@h: n1: ssh exited with exit code 255\n")
        == "pdsh@h: n1: ssh exited with exit code 255"
    )
