"""`rankscope launch` as a user runs it: node names, JSON, errors in one line."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli


def test_hosts_set_node_count_and_hostfiles(tmp_path: Path) -> None:
    result = run_cli("launch", "train.py", "--hosts", "gpu[01-03]", "--gpus", "8", "--format", "mpirun")
    assert result.returncode == 0, result.stderr
    assert "gpu01 slots=8\ngpu02 slots=8\ngpu03 slots=8\n" in result.stdout
    assert (
        "mpirun -np 24 --hostfile hostfile --map-by ppr:8:node --tag-output -x MASTER_ADDR=gpu01"
        in result.stdout
    )
    assert "placeholders" not in result.stdout


def test_hostfile_and_json(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=8\nb slots=8\n")
    result = run_cli(
        "launch", "train.py", "--hostfile", str(hostfile), "--gpus", "8", "--json", "--", "--lr", "0.1"
    )
    assert result.returncode == 0, result.stderr
    doc = result.json()
    assert doc["schema"] == "rankscope.launch/1"
    assert doc["plan"]["hosts"] == ["a", "b"] and doc["plan"]["args"] == ["--lr", "0.1"]
    torchrun = next(r for r in doc["recipes"] if r["launcher"] == "torchrun")
    assert [c["where"] for c in torchrun["commands"]] == ["a (node rank 0)", "b (node rank 1)"]
    assert "--node-rank 1 --master-addr a" in torchrun["commands"][1]["command"]
    pdsh = next(r for r in doc["recipes"] if r["launcher"] == "pdsh")
    assert "pdsh -f 2 -w a,b" in pdsh["commands"][0]["command"]


def test_placeholders_are_named() -> None:
    result = run_cli("launch", "train.py", "--nodes", "2", "--format", "deepspeed")
    assert "node1 slots=1\nnode2 slots=1\n" in result.stdout
    assert "placeholders" in result.stdout


def test_bad_input_is_one_line() -> None:
    result = run_cli("launch", "train.py", "--nodes", "3", "--hosts", "a,b")
    assert result.returncode == 8
    assert result.stderr.strip() == (
        "rankscope: error: --nodes 3 but 2 host(s) named — leave out --nodes (it follows the hosts)"
        " or name as many hosts as nodes"
    )
    assert run_cli("launch", "t.py", "--hosts", "-oProxyCommand=x").returncode == 8
    assert run_cli("launch", "t.py", "--job-name", "a\nb").returncode == 8


def test_a_hostfile_slot_count_that_is_not_a_number_is_one_error_naming_file_and_line(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    for bad in ("b slots=abc", "b slots=0", "b max_slots=-1", "b slots="):
        hostfile.write_text(f"# two nodes\na slots=8\n{bad}\n")
        result = run_cli("launch", "train.py", "--hostfile", str(hostfile), "--gpus", "8")
        assert result.returncode == 8, (bad, result.stdout, result.stderr)
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"rankscope: error: {hostfile}:3: "), line
        assert repr(bad.split()[1]) in line and "a whole number of slots" in line, line
    hostfile.write_text("a slots=8 max_slots=8\nb:4\n")
    assert run_cli("launch", "train.py", "--hostfile", str(hostfile)).returncode == 0
