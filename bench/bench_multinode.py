"""Multi-node stacks: 32 simulated nodes over ssh on loopback, rankscope vs the manual pdsh + py-spy line.

Every "node" is a host alias of one private sshd on 127.0.0.1 (tests/support/sshd.py) and a PID
namespace of its own with its own /proc (``unshare --pid --fork --mount-proc``), holding one small
hung job (bench/fake_job.py: a launcher and 2 workers, 64 ranks in all) under a reaping init
(bench/node_init.py). A node sees its own job and nothing else of this machine. The sshd's
ForceCommand (a small wrapper) runs every session of alias nodeNN in nodeNN's PID and mount
namespaces (``nsenter --target <its init> --pid --mount``, picked by the RANKSCOPE_NODE variable
each alias sends), in the login shell, so rankscope and the manual line reach a node the same way.
The remote rankscope is this venv's own (``--remote-rankscope``); it finds the node's job itself,
as on a real node. The manual line is what one types on such a node: ``pgrep -f`` for the
workers, ``xargs -I {} py-spy dump --pid {}``.

A black-holed node (iptables DROP on its port) measures what a dead node costs. All of it runs
inside a private network namespace, so the DROP rule touches nothing else. Everything it starts
(the namespaces and their jobs, sshd, kept ssh connections) ends with it, Ctrl-C included.

    sudo .venv/bin/python bench/bench_multinode.py [--nodes 32] [--repeat 3] [--deadline 3] [--root-rc]
        [--engines] [--baseline-src DIR] [--no-black-hole]

Rows: rankscope stacks over ssh, pdsh, ssh with kept connections (ControlPersist), and over ssh
with ``--node-python`` (the row says it is skipped where `rankscope stacks --help` does not list
that flag yet); the manual pdsh + py-spy line; `date` through rankscope exec and pdsh; the
black-hole pair. --engines adds the rankscope rows again with ClusterShell's Task as the engine
(bench/task_engine.py); --baseline-src DIR adds them with the rankscope sources in DIR (e.g. an
older checkout's src/) on this side, run in the same set-up, for a before/after comparison in one
run (the nodes run this venv's rankscope either way; a version whose help lacks --node-python
gets no such row).

A node's login shell reads a plain ~/.bashrc (Debian's /etc/skel one, which returns at once for
non-interactive shells): the sessions get a scratch HOME through sshd's SetEnv. With --root-rc
they read this machine's /root/.bashrc instead, which runs `pyenv init` on every ssh command
(about 80 ms of CPU per login, paid by rankscope and the manual line alike).

Each row gets a warm-up run ("first run s"), then the rows are run round after round, --repeat
times. Then the per-node work alone, node after node inside each node's namespaces, no ssh.
Prints a Markdown table (paste into docs/benchmarks.md) and writes bench/out/multinode.json
(every row's last stdout included). Exits 1 if a row other than the black-hole pair exits non-zero
or a rankscope stacks row does not report every rank, or the manual line does not dump every one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.sshd import add_alias, free_port, start_sshd  # noqa: E402

VENV_BIN = Path(sys.executable).parent
RANKSCOPE = VENV_BIN / "rankscope"
FAKE_JOB = ROOT / "bench" / "fake_job.py"
NODE_INIT = ROOT / "bench" / "node_init.py"
NODE_PYTHON_ROW = "rankscope stacks --via ssh, Python node command"


def timed(
    argv: list[str], env: dict[str, str], timeout: float = 300
) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CLIENT_CPU.setdefault(" ".join(argv), []).append(
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    )
    return time.perf_counter() - began, proc


#: The CPU seconds of each command line's runs on this side (the head and its ssh/pdsh clients; the
#: nodes' work runs under sshd, outside it).
CLIENT_CPU: dict[str, list[float]] = {}


def measure_rows(rows: list[tuple[str, list[str], dict[str, str]]], repeat: int) -> list[dict[str, object]]:
    """A warm-up run of every row, then ``repeat`` rounds over all rows (interleaved: a slow
    minute on a shared machine falls on every row alike, not on the rows that happened to run then)."""
    firsts = [timed(argv, env)[0] for _, argv, env in rows]  # page cache, sshd's first fork, ssh masters
    times: list[list[float]] = [[] for _ in rows]
    last: list[subprocess.CompletedProcess[str]] = []
    for _ in range(repeat):
        last = []
        for index, (_, argv, env) in enumerate(rows):
            seconds, proc = timed(argv, env)
            times[index].append(seconds)
            last.append(proc)
    return [
        {
            "name": name,
            "first_s": round(first, 2),
            "median_s": round(statistics.median(row_times), 2),
            "min_s": round(min(row_times), 2),
            "max_s": round(max(row_times), 2),
            "client_cpu_s": round(statistics.median(CLIENT_CPU[" ".join(argv)]), 2),
            "returncode": proc.returncode,
            "stdout_bytes": len(proc.stdout),
            "stdout_lines": len(proc.stdout.splitlines()),
            "stdout": proc.stdout,
            "stderr_tail": proc.stderr[-500:],
        }
        for (name, argv, _), first, row_times, proc in zip(rows, firsts, times, last)
    ]


def sequential_cost(argv_for_node: list[list[str]], env: dict[str, str]) -> dict[str, float]:
    """Run the per-node work one node after the other, without ssh: wall and CPU seconds in all."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    for argv in argv_for_node:
        subprocess.run(argv, capture_output=True, env=env, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(time.perf_counter() - began, 2), "cpu_s": round(cpu, 2)}


def children(pid: int) -> list[int]:
    """The children of ``pid`` (every thread's), from this side's /proc; none once it is gone."""
    kids: list[int] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                kids += [int(word) for word in (task / "children").read_text().split()]
    return kids


@dataclass
class Node:
    """One simulated node: ``unshare`` (this side's child), whose child is the namespace's init."""

    name: str
    unshare: subprocess.Popen[bytes]
    log: Path
    init: int = 0  # the init's pid on this side (pid 1 inside)
    pidfd: int = -1  # the init's, opened once it is known: no signal reaches a later process of its pid

    def run_inside(self, argv: list[str]) -> list[str]:
        """``argv`` run in this node's PID and mount namespaces (its /proc), as its ssh sessions are."""
        return ["nsenter", "--target", str(self.init), "--pid", "--mount", "--", *argv]

    def stop(self) -> None:
        """SIGKILL to the init: the kernel ends every process in the namespace; ``unshare`` then exits."""
        if self.pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            os.close(self.pidfd)
            self.pidfd = -1
        else:
            self.unshare.kill()  # --kill-child: its init (if any yet) dies with it
        try:
            self.unshare.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.unshare.kill()
            self.unshare.wait()


def wait_nodes(nodes: list[Node], timeout: float = 120) -> None:
    """Wait until every node's init is known and its job has 2 workers; ``NAME.init`` files written."""
    own_namespace = os.readlink("/proc/self/ns/pid")
    deadline = time.monotonic() + timeout
    waiting = list(nodes)
    while waiting:
        for node in list(waiting):
            if node.unshare.poll() is not None:
                raise RuntimeError(
                    f"{node.name} ended ({node.unshare.returncode}): {node.log.read_text()[-800:]}"
                )
            if not node.init:
                kids = children(node.unshare.pid)
                if not kids:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if os.readlink(f"/proc/{kids[0]}/ns/pid") == own_namespace:
                        continue  # forked, not yet in its namespace
                    node.pidfd = os.pidfd_open(kids[0])
                    node.init = kids[0]
                    (node.log.parent / f"{node.name}.init").write_text(f"{node.init}\n")
                if not node.init:
                    continue
            launchers = children(node.init)
            if launchers and len(children(launchers[0])) == 2:
                waiting.remove(node)
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(f"fake jobs did not start: {', '.join(n.name for n in waiting)}")
        time.sleep(0.2)


def lists_node_python(env: dict[str, str]) -> bool:
    """Whether this rankscope (``env``: the --baseline-src one) knows ``stacks --node-python``."""
    shown = subprocess.run([str(RANKSCOPE), "stacks", "--help"], capture_output=True, text=True, env=env)
    return "--node-python" in shown.stdout


def interrupted(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: once (the clean-up must not be cut short by a second one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def row_problems(run: dict[str, object], ranks: int) -> list[str]:
    """What is wrong with a row's last run: a non-zero exit, a report or dump without every rank."""
    name, stdout, code = str(run["name"]), str(run["stdout"]), run["returncode"]
    if "black hole" in name:
        return []  # a dead node fails these on purpose; checked (and warned about) apart
    problems = [] if code == 0 else [f"{name}: exit {code}: {str(run['stderr_tail'])[-300:]}"]
    if name.startswith("rankscope stacks") and f"{ranks} of {ranks} processes dumped" not in stdout:
        problems.append(f"{name}: no '{ranks} of {ranks} processes dumped': {stdout[:300]}")
    if name.startswith("manual pdsh + py-spy"):
        dumped = len(re.findall(r"^node\d+: Process \d+: ", stdout, re.MULTILINE))
        if dumped != ranks:
            problems.append(f"{name}: {dumped} of {ranks} processes dumped")
    return problems


def inner(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    scratch = Path(tempfile.mkdtemp(prefix="rankscope-bench-"))
    names = [f"node{i:02d}" for i in range(1, args.nodes + 1)]
    nodeset = f"node[01-{args.nodes:02d}]"
    ranks = 2 * len(names)
    culprit = 5
    nodes: list[Node] = []
    sshd = None
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        node_dir = scratch / "nodes"
        node_dir.mkdir()
        for index, name in enumerate(names):
            job = [sys.executable, str(FAKE_JOB), "--node-rank", str(index), "--nproc", "2"]
            job += ["--nnodes", str(len(names)), "--culprit", str(culprit)]
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"]
            argv += [sys.executable, "-I", "-S", str(NODE_INIT), *job]
            log = node_dir / f"{name}.log"
            with log.open("wb") as out:
                # A session of its own: Ctrl-C in the terminal reaches the bench, which ends the nodes.
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            nodes.append(Node(name, proc, log))
        wait_nodes(nodes)
        time.sleep(1.0)
        # Every session of alias nodeNN, whatever it runs, runs in nodeNN's namespaces, in the login
        # shell (whose bashrc, if any, ran before, outside: sshd runs ForceCommand through it).
        session = scratch / "node-session"
        session.write_text(
            "#!/bin/sh\n"
            'case "$RANKSCOPE_NODE" in node[0-9]*) ;; *)\n'
            '    echo "not a simulated node: ${RANKSCOPE_NODE:-(no RANKSCOPE_NODE)}" >&2; exit 255 ;;\n'
            "esac\n"
            f'init="$(cat {node_dir}/"$RANKSCOPE_NODE".init)" || exit 255\n'
            'exec nsenter --target "$init" --pid --mount --wd="$PWD" -- "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"\n'
        )
        session.chmod(0o755)
        if args.root_rc:
            # A SetEnv of our own: sshd takes the first, and the support's own (SHLVL=1, a nested
            # shell) would make the login shell skip /root/.bashrc.
            extra = ["SetEnv HOME=/root"]
        else:
            home = scratch / "home"
            home.mkdir()
            shutil.copy("/etc/skel/.bashrc", home / ".bashrc")
            extra = [f"SetEnv HOME={home}"]
        sshd = start_sshd(scratch / "sshd", names, extra=[*extra, f"ForceCommand {session}"])
        hole = free_port()
        subprocess.run(
            ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(hole), "-j", "DROP"], check=True
        )
        add_alias(sshd, "blackhole", Port=str(hole))
        env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=f"-F {sshd.ssh_config}")
        setup = f"export PATH={VENV_BIN}:$PATH"
        common = [
            "--ssh-config",
            str(sshd.ssh_config),
            "--remote-rankscope",
            str(RANKSCOPE),
            "--fanout",
            "32",
        ]
        # The workers of the node's only job; fake_jo[b]: the pattern does not match the shell running it.
        manual_line = f"{setup}; pgrep -f 'fake_jo[b].py --worker' | xargs -I {{}} py-spy dump --pid {{}}"
        stacks = [str(RANKSCOPE), "stacks", "--hosts", nodeset, *common]
        pdsh = ["pdsh", "-R", "ssh", "-f", "32"]
        hole_flags = ["--node-timeout", f"{args.deadline:g}"]
        pdsh_hole = ["-t", f"{args.deadline:g}", "-u", f"{args.deadline:g}"]
        exec_date = [
            str(RANKSCOPE),
            "exec",
            "--hosts",
            nodeset,
            "--via",
            "ssh",
            "--ssh-config",
            str(sshd.ssh_config),
        ]
        # %n: one master per alias (all aliases share host and port here, %C would share one master).
        # 600 s: the masters outlive a whole round over all rows.
        control = ["ControlMaster=auto", f"ControlPath={scratch}/cm-%n", "ControlPersist=600"]
        plan = [
            ("rankscope stacks --via ssh", [*stacks, "--via", "ssh"]),
            (NODE_PYTHON_ROW, [*stacks, "--via", "ssh", "--node-python"]),
            ("rankscope stacks --via pdsh", [*stacks, "--via", "pdsh"]),
            (
                "rankscope stacks --via ssh, connections kept (ControlPersist)",
                [*stacks, "--via", "ssh", *(f"--ssh-option={o}" for o in control)],
            ),
            ("manual pdsh + py-spy", [*pdsh, "-w", nodeset, manual_line]),
            ("rankscope exec -- date", [*exec_date, "--", "date +%Y"]),
            ("manual pdsh date", [*pdsh, "-w", nodeset, "date +%Y"]),
            (
                f"rankscope stacks --via ssh, + black hole, --node-timeout {args.deadline:g}",
                [*stacks, "--via", "ssh", *hole_flags, "--hosts", f"{nodeset},blackhole"],
            ),
            (
                f"manual pdsh + py-spy, + black hole (pdsh -t/-u {args.deadline:g})",
                [*pdsh, *pdsh_hole, "-w", f"{nodeset},blackhole", manual_line],
            ),
        ]
        if args.no_black_hole:
            plan = [(name, argv) for name, argv in plan if "black hole" not in name]
        notes: list[str] = []
        if not lists_node_python(env):
            notes.append(
                f"skipped '{NODE_PYTHON_ROW}': `rankscope stacks --help` does not list --node-python yet"
            )
            plan = [(name, argv) for name, argv in plan if name != NODE_PYTHON_ROW]
        # The same fan-out rows through another engine: ClusterShell's Task, or older sources.
        engines: list[tuple[str, list[str], dict[str, str]]] = [("", [str(RANKSCOPE)], env)]
        if args.engines:
            task = [sys.executable, str(ROOT / "bench" / "task_engine.py")]
            engines.append((" [ClusterShell Task]", task, env))
        if args.baseline_src:
            old = dict(env, PYTHONPATH=str(Path(args.baseline_src).resolve()))
            engines.append((" [before]", [str(RANKSCOPE)], old))
        rows = [(name, argv, env) for name, argv in plan]
        for number, (label, prefix, engine_env) in enumerate(engines[1:], start=1):
            for name, argv in plan:
                if name == NODE_PYTHON_ROW and not lists_node_python(engine_env):
                    notes.append(f"left out '{name}{label}': that version does not know --node-python")
                    continue
                if name.startswith("rankscope"):
                    # Own ssh masters per engine: a row must pay for its first connections itself.
                    argv = [str(a).replace(f"{scratch}/cm-", f"{scratch}/cm{number}-") for a in argv]
                    rows.append((name + label, [*prefix, *argv[1:]], engine_env))
        for note in notes:
            print(f"note: {note}", flush=True)
        runs = measure_rows(rows, args.repeat)
        # Where the time goes: the per-node work alone, node after node (each in its own namespaces,
        # as its ssh session would run it), no ssh.
        # What the head runs on each node with --node-python (StacksOptions.to_argv: its raw answer), the
        # command a node's sh collector hands over to when it must; a version before the raw answer
        # (--baseline-src) gets the command line it knew.
        remote_cmd = [str(RANKSCOPE), "stacks", "--local", "--json", "--node-answer", "--deadline", "23"]
        before_cmd = [word for word in remote_cmd if word != "--node-answer"]
        manual_cmd = ["sh", "-c", manual_line]
        before_env = dict(env, PYTHONPATH=str(Path(args.baseline_src).resolve())) if args.baseline_src else {}
        imports = (
            "import re, rankscope.cli.stacks_request, rankscope.cli.stacks_node"  # re: the console script's
        )

        def on_every_node(argv: list[str]) -> list[list[str]]:
            return [node.run_inside(argv) for node in nodes]

        # What a node runs by default: the POSIX sh collector (rankscope.stacks.shell_node), which
        # answers with /proc's files and py-spy's dumps (or hands over to remote_cmd where it must).
        from rankscope.stacks.shell_node import shell_argv

        shell_cmd = shell_argv(remote_cmd, "0123456789abcdef")
        costs = {
            "remote sh collector (the default node side)": sequential_cost(on_every_node(shell_cmd), env),
            "remote rankscope stacks --local --json --node-answer": sequential_cost(
                on_every_node(remote_cmd), env
            ),
            # The same node answering with its whole document (what --native or live recorders get).
            "remote rankscope stacks --local --json (whole document)": sequential_cost(
                on_every_node(before_cmd), env
            ),
            **(
                {
                    "remote rankscope stacks --local --json [before]": sequential_cost(
                        on_every_node(before_cmd), before_env
                    )
                }
                if before_env
                else {}
            ),
            # Where a node's time goes: the same command without the live flight recorders' pass, the
            # interpreter alone, rankscope's imports alone, the guardian's bare interpreter (rankscope.lifetime).
            "remote rankscope stacks --local --json --node-answer --no-fr": sequential_cost(
                on_every_node([*remote_cmd, "--no-fr"]), env
            ),
            "python -c pass": sequential_cost(on_every_node([sys.executable, "-c", "pass"]), env),
            "python -I -S -c pass (the guardian's interpreter)": sequential_cost(
                on_every_node([sys.executable, "-I", "-S", "-c", "pass"]), env
            ),
            "python -c 'import (the node's modules)'": sequential_cost(
                on_every_node([sys.executable, "-c", imports]), env
            ),
            "manual pgrep, xargs py-spy dump": sequential_cost(on_every_node(manual_cmd), env),
            "ssh NODE true (client side)": sequential_cost(
                [["ssh", "-F", str(sshd.ssh_config), name, "true"] for name in names], env
            ),
        }
        first = runs[0]
        problems = [problem for run in runs for problem in row_problems(run, ranks)]
        hole_run = next(
            (r for r in runs if "black hole" in str(r["name"]) and str(r["name"]).startswith("rankscope")),
            None,
        )
        if hole_run is not None and "blackhole [unreachable]" not in str(hole_run["stdout"]):
            print(
                "WARNING: black-hole run did not list the black hole as unreachable:\n"
                + str(hole_run["stdout"])
            )
        out = ROOT / "bench" / "out"
        out.mkdir(parents=True, exist_ok=True)
        (out / "multinode.json").write_text(
            json.dumps(
                {
                    "nodes": len(names),
                    "ranks": ranks,
                    "root_rc": args.root_rc,
                    "setup": "a PID namespace per node (unshare), ssh sessions nsenter it (ForceCommand)",
                    "notes": notes,
                    "problems": problems,
                    "runs": runs,
                    "sequential": costs,
                },
                indent=2,
            )
        )
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"\n{len(names)} nodes x 2 ranks, {os.cpu_count()} CPUs, median of {args.repeat}, "
            f"login rc: {'/root/.bashrc' if args.root_rc else '/etc/skel/.bashrc'}, load average {load}\n"
        )
        print("| what | median s | min-max s | first run s | head and clients' CPU s | exit | output lines |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for run in runs:
            spread = f"{run['min_s']}-{run['max_s']}"
            print(
                f"| {run['name']} | {run['median_s']} | {spread} | {run['first_s']} | {run['client_cpu_s']} "
                f"| {run['returncode']} | {run['stdout_lines']} |"
            )
        print(f"\nper-node work for all {len(names)} nodes, one after the other (no fan-out):\n")
        print("| what | wall s | CPU s (this side's children) |")
        print("|---|---:|---:|")
        for name, cost in costs.items():
            print(f"| {name} | {cost['wall_s']} | {cost['cpu_s']} |")
        if hole_run is not None:
            overhead = float(hole_run["median_s"]) - float(first["median_s"])  # type: ignore[arg-type]
            print(f"\nblack-holed node adds {overhead:.2f}s (deadline {args.deadline:g}s)")
        print("\nrankscope --via ssh report head:\n" + "\n".join(str(first["stdout"]).splitlines()[:25]))
        for note in notes:
            print(f"note: {note}")
        for problem in problems:
            print(f"PROBLEM: {problem}")
        return 1 if problems else 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for node in nodes:
            node.stop()
        for master in scratch.glob("cm*-*"):  # the kept ssh connections end with the benchmark
            subprocess.run(["ssh", "-o", f"ControlPath={master}", "-O", "exit", "x"], capture_output=True)
        if sshd is not None:
            sshd.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=10.0, help="--node-timeout for the black-hole run")
    parser.add_argument("--root-rc", action="store_true", help="nodes read /root/.bashrc at login")
    parser.add_argument("--engines", action="store_true", help="also run the rows on ClusterShell's Task")
    parser.add_argument("--baseline-src", metavar="DIR", help="also run the rows with the rankscope in DIR")
    parser.add_argument("--no-black-hole", action="store_true", help="leave out the two black-hole rows")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        try:
            return inner(args)
        except KeyboardInterrupt:
            print("interrupted: everything the benchmark started is stopped", file=sys.stderr)
            return 130
    namespace = f"rsbench{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        argv = [sys.executable, __file__, "--inner", "--nodes", str(args.nodes), "--repeat", str(args.repeat),
                "--deadline", str(args.deadline), *(["--root-rc"] if args.root_rc else []),
                *(["--engines"] if args.engines else []),
                *(["--no-black-hole"] if args.no_black_hole else []),
                *(["--baseline-src", args.baseline_src] if args.baseline_src else [])]  # fmt: skip
        run = subprocess.Popen(["ip", "netns", "exec", namespace, *argv])
        # A Ctrl-C in the terminal reaches the inner run as well; either signal is passed on (the
        # inner run acts on the first only) and this side waits for it to stop what it started.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda received, _: run.send_signal(received))
        return run.wait()
    finally:
        subprocess.run(["ip", "netns", "del", namespace])


if __name__ == "__main__":
    sys.exit(main())
