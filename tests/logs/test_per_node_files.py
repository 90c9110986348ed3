"""Per-node log files whose prefixes carry no host (torchrun --tee without --role on each node)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

TB = ["Traceback (most recent call last):", '  File "/w/t.py", line 1, in <module>']


def _node_log(path: Path, odd: int = -1) -> Path:
    lines = [f"[default{r}]:hello {r}" for r in range(4)]
    for line in TB:
        lines += [f"[default{r}]:[rank{r}]: {line}" for r in range(4)]
    lines += [
        f"[default{r}]:[rank{r}]: " + ("KeyError: 'x'" if r == odd else f"ValueError: step {r}")
        for r in range(4)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_host_from_filename_keeps_nodes_apart(tmp_path: Path) -> None:
    a = _node_log(tmp_path / "node1.log")
    b = _node_log(tmp_path / "node2.log", odd=2)
    data = run_cli("logs", "errors", "--host-from-filename", str(a), str(b), "--json").json()
    assert [(g["exception_type"], g["ranks"]) for g in data["groups"]] == [
        ("ValueError", "node1:[0-3] node2:[0-1,3]"),
        ("KeyError", "node2:2"),
    ]
    # without the flag, local ranks of both nodes collapse into 0-3
    plain = run_cli("logs", "errors", str(a), str(b), "--json").json()
    assert plain["groups"][0]["ranks"] == "0-3"
    ranks = run_cli("logs", "ranks", "--host-from-filename", str(a), str(b), "--json").json()
    assert [r["label"] for r in ranks["ranks"]] == [f"node{n}:{r}" for n in (1, 2) for r in range(4)]
    grep = run_cli("logs", "grep", "--host-from-filename", "--rank", "node2:2", str(a), str(b))
    assert grep.stdout.splitlines()[0] == "hello 2" and grep.stdout.splitlines()[-1] == "KeyError: 'x'"
    out = tmp_path / "split"
    run_cli("logs", "split", "--host-from-filename", str(a), str(b), "--out", str(out))
    assert sorted(p.name for p in out.iterdir()) == [f"node{n}_rank{r}.log" for n in (1, 2) for r in range(4)]


def test_log_dir_tree_error_json_is_listed_not_dropped(tmp_path: Path) -> None:
    for rank in range(2):
        leaf = tmp_path / "tl" / "none_abc" / "attempt_0" / str(rank)
        leaf.mkdir(parents=True)
        (leaf / "stdout.log").write_text(f"hello {rank}\n")
        (leaf / "stderr.log").write_text("\n".join([*TB, "OSError: disk full"]) + "\n")
        (leaf / "error.json").write_text('{"message": {"message": "OSError: disk full"}}')
    result = run_cli("logs", "errors", str(tmp_path / "tl"))
    assert "error 1 of 1 — culprit, the root cause, 2 rank(s): 0-1" in result.stdout
    assert result.stdout.count("error.json: torchrun error file, not read") == 2
    data = run_cli("logs", "errors", str(tmp_path / "tl"), "--json").json()
    assert len(data["read"]["skipped"]) == 2


def test_grep_accepts_a_folded_rank_set(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text("".join(f"[n{h}:{r}]:line {h}/{r}\n" for h in (1, 2) for r in range(3)))
    result = run_cli("logs", "grep", "--rank", "n[1-2]:[1-2]", "--rank", "n1:0", str(path))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["line 1/0", "line 1/1", "line 1/2", "line 2/1", "line 2/2"]
    bad = run_cli("logs", "grep", "--rank", "n[1-", str(path))
    assert bad.returncode == 8 and bad.stderr.startswith("rankscope: error: cannot read rank")


def _rank_file(path: Path, error: str, step: int = 118) -> Path:
    """One rank's own output (``python train.py > logs/rank_${RANK}.log``): no rank prefix anywhere."""
    frames = ['  File "/home/u/train.py", line 140, in <module>', "    train()"]
    path.write_text(
        "\n".join([f"step {step} loss 2.3", "Traceback (most recent call last):", *frames, error]) + "\n"
    )
    return path


LOST_PEER = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.12]:41873"


def test_one_file_per_rank_named_after_it_labels_its_lines(tmp_path: Path) -> None:
    """Files named after their rank (rank_0.log, rank_1.log, ...) and holding no prefix: each file's
    lines are its rank's, so the culprit is named (it was "-", every traceback "no rank prefix"). A
    file whose lines carry prefixes keeps them; a node's file (node_rank1.log) names no rank."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _rank_file(logs / "rank_0.log", LOST_PEER)
    _rank_file(
        logs / "rank_1.log", "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x512 and 768x512)"
    )
    _rank_file(logs / "rank_2.log", LOST_PEER)
    data = run_cli("logs", "errors", str(logs), "--json").json()
    assert [(g["exception_type"], g["ranks"], g["role"]) for g in data["groups"]] == [
        ("RuntimeError", "1", "culprit"),
        ("RuntimeError", "0,2", "victim"),
    ], data["groups"]
    why = run_cli(
        "why", "--log", str(logs / "rank_1.log"), "--log", str(logs / "rank_0.log"), "--json"
    ).json()
    assert why["verdict"]["text"].startswith("rank 1 raised RuntimeError: mat1 and mat2"), why["verdict"]
    # a file named after rank 5 whose lines name their own ranks (a node's output): the prefixes win
    mixed = tmp_path / "rank5.log"
    mixed.write_text("[rank2]: Traceback (most recent call last):\n[rank2]: KeyError: 'x'\n")
    assert run_cli("logs", "errors", str(mixed), "--json").json()["groups"][0]["ranks"] == "2"
    node = _rank_file(tmp_path / "node_rank1.log", "KeyError: 'y'")
    assert run_cli("logs", "errors", str(node), "--json").json()["groups"][0]["ranks"] == "-"
