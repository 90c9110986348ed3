"""`net probe` and `net listen` on 127.0.0.0/8: open, refused, a name that does not resolve; `net check --master`."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from tests.support.cli import run_cli

from rankscope.errors import BadInputError
from rankscope.net.probe import Target, open_listener, parse_target, probe
from rankscope.net.verdicts import Verdict


@pytest.fixture
def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock
    sock.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once closed


def test_open_refused_and_unresolved_in_one_pass(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    shut = closed_port()
    results = probe(
        [Target("127.0.0.1", port), Target("127.0.0.2", shut), Target("no-such-node.invalid", port)],
        timeout=3,
    )
    assert [r.verdict for r in results] == [Verdict.OPEN, Verdict.REFUSED, Verdict.UNRESOLVED]
    assert results[0].address == "127.0.0.1" and results[1].detail == "Connection refused"
    assert results[2].address == "" and results[2].detail
    assert "nothing listens" in results[1].meaning()


def test_retry_refused_finds_a_listener_that_starts_late() -> None:
    port = closed_port()
    late = subprocess.Popen(
        [sys.executable, "-c", f"import socket,time; time.sleep(0.6); s=socket.socket(); "
         f"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port})); "
         "s.listen(); c,_=s.accept(); c.close()"],
    )  # fmt: skip
    try:
        [once] = probe([Target("127.0.0.1", port)], timeout=5)
        assert once.verdict is Verdict.REFUSED  # without retries: the first answer counts
        [retried] = probe([Target("127.0.0.1", port)], timeout=5, retry_refused=True)
        assert retried.verdict is Verdict.OPEN
    finally:
        late.wait(timeout=10)


def test_peers_that_keep_showing_up_stretch_the_window(listener: socket.socket) -> None:
    """net check's nodes when logins are slow: each new peer (a connection from a new address) gives
    the missing ones another window, so a listener that starts after the first window is found."""
    ours, port = listener.getsockname()[1], closed_port()
    peers = subprocess.Popen(
        [sys.executable, "-c", "import socket, time\nstart = time.monotonic()\n"
         f"for at, source in ((1.5, '127.0.0.2'), (3.5, '127.0.0.3')):\n"
         "    time.sleep(max(0, start + at - time.monotonic()))\n"
         f"    socket.create_connection(('127.0.0.1', {ours}), source_address=(source, 0)).close()\n"
         "time.sleep(max(0, start + 5.5 - time.monotonic()))\n"
         "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         f"s.bind(('127.0.0.1', {port})); s.listen(); s.settimeout(10)\n"
         "try:\n    s.accept()[0].close()\nexcept OSError:\n    pass\n"],
    )  # fmt: skip
    accepted: list[str] = []
    try:
        [late] = probe(
            [Target("127.0.0.1", port)], timeout=3, retry_refused=True, listener=listener,
            on_accept=accepted.append, latest=time.monotonic() + 60,
        )  # fmt: skip
    finally:
        peers.wait(timeout=30)
    assert late.verdict is Verdict.OPEN  # without the stretch: refused at the end of the 3 s window
    assert sorted(peer.rpartition(":")[0] for peer in accepted) == ["127.0.0.2", "127.0.0.3"]


def test_refused_until_the_end_stays_refused() -> None:
    [result] = probe([Target("127.0.0.1", closed_port())], timeout=0.6, retry_refused=True)
    assert result.verdict is Verdict.REFUSED


def test_parse_target() -> None:
    assert parse_target("node02:29500") == Target("node02", 29500)
    assert parse_target("[fd00::2]:6000") == Target("fd00::2", 6000)
    assert parse_target("node02", 29500) == Target("node02", 29500)
    for bad in ("node02", "node02:0", "node02:http", ":80"):
        with pytest.raises(BadInputError):
            parse_target(bad)


def test_listener_binds_loopback_by_default() -> None:
    with open_listener("127.0.0.1", 0) as sock:
        assert sock.getsockname()[0] == "127.0.0.1"


def test_cli_listen_then_probe() -> None:
    listen = subprocess.Popen(
        [sys.executable, "-m", "rankscope", "net", "listen", "0", "--count", "1", "--timeout", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listen.stdout is not None
        first = listen.stdout.readline()
        assert first.startswith("listening on 127.0.0.1:"), first
        port = int(first.split(":")[1].split()[0])
        result = run_cli("net", "probe", f"127.0.0.1:{port}", f"127.0.0.3:{closed_port()}", "--timeout", "3")
        assert result.returncode == 4, result.stdout + result.stderr
        assert f"127.0.0.1:{port}" in result.stdout and " open " in result.stdout
        assert "refused: 127.0.0.3 answered with a reset" in result.stdout
        rest, _ = listen.communicate(timeout=20)
        assert "connection from 127.0.0.1:" in rest and "1 connection(s)" in rest
        assert listen.returncode == 0
    finally:
        listen.kill()


def test_cli_listen_gives_up_at_its_timeout() -> None:
    result = run_cli("net", "listen", "0", "--count", "1", "--timeout", "0.5", timeout=60)  # ends by itself
    assert result.returncode == 5
    assert "listening on 127.0.0.1:" in result.stdout and "0 connection(s)" in result.stdout


def test_cli_probe_json_serving_meanwhile() -> None:
    port = closed_port()
    result = run_cli(
        "net", "probe", "--json", "--serve", str(port), "--timeout", "2", f"127.0.0.1:{port}", "no-such.invalid:1"
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.net.probe/1"
    assert document["listening"] == f"127.0.0.1:{port}"
    assert [r["verdict"] for r in document["results"]] == ["open", "name does not resolve"]
    assert len(document["accepted"]) == 1


def test_cli_probe_exit_codes(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert run_cli("net", "probe", f"127.0.0.1:{port}").returncode == 0
    refused = run_cli("net", "probe", f"127.0.0.1:{closed_port()}", "nosuchhost.invalid:1")
    assert refused.returncode == 5
    # one place for a failure: the report says it, stderr does not say it again
    assert "refused" in refused.stdout and "name does not resolve" in refused.stdout
    assert refused.stderr == ""
    bad = run_cli("net", "probe", "node02")
    assert bad.returncode == 8 and "not a HOST:PORT" in bad.stderr


def master_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    env.update(values)
    return env


def test_master_loopback_on_a_multi_node_job_fails() -> None:
    result = run_cli(
        "net", "check", "--master", env=master_env(MASTER_ADDR="localhost", MASTER_PORT=str(closed_port()),
                                                    WORLD_SIZE="16", LOCAL_WORLD_SIZE="8"),
    )  # fmt: skip
    assert result.returncode == 5, result.stdout + result.stderr
    assert "FAIL  MASTER_ADDR=localhost is a loopback address on a multi-node job" in result.stdout


def test_master_single_node_free_port_passes_and_busy_port_warns(listener: socket.socket) -> None:
    free = run_cli("net", "check", "--master", "--nnodes", "1",
                   env=master_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(closed_port())))  # fmt: skip
    assert free.returncode == 0, free.stdout
    assert "is free here" in free.stdout
    busy = run_cli("net", "check", "--master", "--master-addr", "127.0.0.1",
                   "--master-port", str(listener.getsockname()[1]), "--nnodes", "1", env=master_env())  # fmt: skip
    assert busy.returncode == 0 and "WARN  port" in busy.stdout and "already in use" in busy.stdout


def test_master_unset_or_unresolvable() -> None:
    unset = run_cli("net", "check", "--master", env=master_env())
    assert unset.returncode == 5 and "MASTER_ADDR is not set" in unset.stdout
    # the options it suggests are the ones the command accepts: filled in, they run
    suggested = re.search(r"pass (--master-addr HOST --master-port PORT)\b", unset.stdout)
    assert suggested, unset.stdout
    argv = suggested[1].replace("HOST", "127.0.0.1").replace("PORT", str(closed_port())).split()
    filled = run_cli("net", "check", "--master", *argv, "--nnodes", "1", env=master_env())
    assert filled.returncode == 0, filled.stdout + filled.stderr
    assert "PASS  MASTER_ADDR=127.0.0.1 resolves" in filled.stdout
    bad = run_cli(
        "net", "check", "--master", "--json", env=master_env(MASTER_ADDR="no-such.invalid", MASTER_PORT="1")
    )
    assert bad.returncode == 5
    [check] = bad.json()["checks"]
    assert check["level"] == "FAIL" and "does not resolve" in check["what"]


def test_check_refuses_bad_input_before_any_node_is_asked() -> None:
    no_port = run_cli("net", "check", "--hosts", "a,b", env=master_env())
    assert no_port.returncode == 8 and "no port given" in no_port.stderr
    bad_address = run_cli("net", "check", "--hosts", "a,b", "--port", "1", "--address", "a")
    assert bad_address.returncode == 8 and "not NODE=ADDR: 'a'" in bad_address.stderr
    no_nodes = run_cli("net", "check", "--port", "1")
    assert no_nodes.returncode == 8 and "no nodes given" in no_nodes.stderr


def test_more_targets_than_sockets_at_once_all_get_their_verdict(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankscope.net import probe as probe_module

    monkeypatch.setattr(probe_module, "MAX_PARALLEL", 2)
    port, shut = listener.getsockname()[1], closed_port()
    targets = [Target(f"127.0.0.{i}", port if i % 2 else shut) for i in range(1, 8)]
    # The listener is bound to 127.0.0.1 only: the odd addresses other than .1 are refused too.
    expected = [Verdict.OPEN] + [Verdict.REFUSED] * 6
    assert [r.verdict for r in probe(targets, timeout=3)] == expected


def test_a_port_that_never_answers_is_filtered_when_the_window_ends(listener: socket.socket) -> None:
    """net check's mode (one window, a listener served meanwhile): a probe still unanswered when the
    window ends is `filtered` (it once came out as `error`: "not probed")."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # never accepted: once its queue is full, further SYNs are dropped (no answer)
    fillers = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(full.getsockname())
            fillers.append(filler)
        time.sleep(0.2)
        [result] = probe(
            [Target("127.0.0.1", full.getsockname()[1])], timeout=1, retry_refused=True, listener=listener,
        )  # fmt: skip
    finally:
        for filler in fillers:
            filler.close()
        full.close()
    assert result.verdict is Verdict.FILTERED, result


#: In a network namespace of its own (gone when it exits), with one ephemeral port P: a connect to
#: 127.0.0.1:P from port P meets itself (TCP simultaneous open) and "succeeds" with nothing listening.
#: Prints the raw connect's ends, then `rankscope net probe --json 127.0.0.1:P` run in that namespace.
SELF_CONNECT = """
import ctypes, fcntl, json, socket, struct, subprocess, sys
if ctypes.CDLL(None, use_errno=True).unshare(0x40000000) != 0:  # CLONE_NEWNET
    sys.exit("unshare(CLONE_NEWNET) failed: " + str(ctypes.get_errno()))
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:  # lo up: SIOCSIFFLAGS UP|LOOPBACK|RUNNING
    fcntl.ioctl(udp, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))
port = sys.argv[1]
with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as ports:  # this namespace's only
    ports.write(port + " " + port)
with socket.socket() as raw:
    raw.connect(("127.0.0.1", int(port)))
    ends = [list(raw.getsockname()), list(raw.getpeername())]
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # no TIME_WAIT on P
done = subprocess.run([sys.executable, "-m", "rankscope", "net", "probe", "--json", "--timeout", "2",
                       "127.0.0.1:" + port], capture_output=True, text=True)
print(json.dumps({"ends": ends, "code": done.returncode, "out": done.stdout, "err": done.stderr}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
def test_a_probe_that_connected_to_itself_is_not_open() -> None:
    # No machine-wide state changes: the namespace belongs to the child alone and dies with it.
    port = 40123
    done = subprocess.run(
        [sys.executable, "-c", SELF_CONNECT, str(port)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ends"] == [["127.0.0.1", port], ["127.0.0.1", port]]  # the kernel did self-connect
    [probed] = json.loads(result["out"])["results"]
    assert probed["verdict"] == "refused", result
    assert probed["detail"] == "connected to itself (source port = destination port): nothing listens there"
    assert result["code"] == 5, result  # as for a refused port
