"""torchrun's agent failing to reach the rendezvous store: its ``RendezvousConnectionError`` ("See
inner exception for details") is folded into the store-unreachable finding of its chained
``DistNetworkError``, which names the endpoint; cut from its inner exception it stays a plain
error. torch's warning at each failed try gives the errno: refused (nothing listens) or no route. Logs written here in the form torch 2.x prints; through the command line."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli, run_cli_here

INNER = """\
[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-0]:29400 (errno: 111 - Connection refused).
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 156, in _create_tcp_store
    store = TCPStore(
torch.distributed.DistNetworkError: The client socket has timed out after 60s while trying to connect to (node-0, 29400).

The above exception was the direct cause of the following exception:

"""
OUTER = """\
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 176, in _create_tcp_store
    raise RendezvousConnectionError(
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
"""


def test_the_wrapper_is_the_store_its_inner_exception_names(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(INNER + OUTER)
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["cause"] == "store_unreachable"
    assert "node-0:29400" in verdict["what"]
    why = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert why["text"] == (
        "could not connect to the rendezvous store at node-0:29400 (timed out after 60s; its last try: errno 111, "
        "Connection refused)"
    )


def test_the_last_try_s_errno_says_which_side_failed(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(INNER + OUTER)
    step = run_cli("logs", "errors", str(log), "--json").json()["verdict"]["next_step"]
    assert step.startswith("node-0 answered, but nothing listened on port 29400 (connection refused)")
    log.write_text(INNER.replace("errno: 111 - Connection refused", "errno: 113 - No route to host") + OUTER)
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["what"].endswith("(timed out after 60s; its last try: errno 113, No route to host)")
    assert verdict["next_step"].startswith("there is no route from here to node-0")
    log.write_text(INNER.split("\n", 1)[1] + OUTER)  # no warning: torch < 2.0, or a cut paste
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["next_step"].startswith("nothing answered at node-0:29400 in time")


def test_the_wrapper_cut_from_its_inner_exception_stays_a_plain_error(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(OUTER)
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["cause"] == "python_exception"
    assert verdict["what"].startswith("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError")
    assert verdict["next_step"].startswith(
        "torchrun could not connect to the rendezvous store at `--rdzv-endpoint`"
    )


#: Node 1's torchrun agent mid-run: its heartbeat's store call failed because the store's node
#: (node 0, whose torchrun hosts the c10d store) ended; the frames are those torch 2.x prints.
LOST = """\
Traceback (most recent call last):
  File "/usr/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 117, in _call_store
    return getattr(self._store, store_op)(*args, **kwargs)
torch.distributed.DistNetworkError: failed to recv, got 0 bytes

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3.10/site-packages/torch/distributed/elastic/agent/server/api.py", line 906, in _invoke_run
    num_nodes_waiting = rdzv_handler.num_nodes_waiting()
  File "/usr/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 437, in sync
    get_response = self._backend.get_state()
  File "/usr/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 75, in get_state
    base64_state: bytes = self._call_store("get", self._key)
  File "/usr/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 119, in _call_store
    raise RendezvousConnectionError(
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
"""

NODE0 = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/srv/job/train.py", line 71, in main
[rank1]:     batch = next(loader)
[rank1]:   File "/srv/job/data.py", line 40, in __next__
[rank1]:     raise KeyError(f"missing field {name!r}")
[rank1]: KeyError: "missing field 'labels'"
"""


def test_a_store_lost_mid_run_is_the_store_node_s_consequence(tmp_path: Path) -> None:
    """Alone, the agent's lost store is the error, with the step that points at the store's node; in a
    merged log where node 1's agent wrote first, node 0's rank error is the root cause and the lost
    store its victim (it used to be the root cause, first in log order)."""
    log = tmp_path / "node1.log"
    log.write_text(LOST)
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["what"].startswith("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError")
    assert verdict["next_step"].startswith("this node's torchrun lost the rendezvous store while the job ran")
    merged = tmp_path / "job.log"
    node1 = "".join(f"[node1]:{line}\n" for line in LOST.splitlines())
    node0 = "".join(f"[node0]:{line}\n" for line in NODE0.splitlines())
    merged.write_text(node1 + node0)
    report = run_cli("logs", "errors", str(merged), "--json").json()
    assert report["verdict"]["what"].startswith("KeyError: \"missing field 'labels'\""), report["verdict"]
    roles = {g["exception_type"].rsplit(".", 1)[-1]: g["role"] for g in report["groups"]}
    assert roles == {"KeyError": "culprit", "RendezvousConnectionError": "victim"}, roles
