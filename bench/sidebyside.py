"""Two versions of rankscope side by side: what bench_stacks.py, bench_logs.py and compare_versions.py share.

- :class:`Side`: one version, run from its own ``src`` with its own console entry point (the
  ``[project.scripts]`` line of its ``pyproject.toml``: the entry point moved between versions), so
  each side runs what ``pip install`` of that checkout would run.
- :func:`measure`: wall and CPU time of one command. CPU is user + system of the command **and of
  every process it started**, those that outlive it included (rankscope's guardian ends after
  rankscope, and would escape ``time``): the command runs under a small wrapper (this file run as
  a script) that is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so orphans are re-parented to
  it; it reaps them all and reports ``getrusage(RUSAGE_CHILDREN)``. Wall time is the command's
  own, start to exit: what a user waits for.
- :func:`alternate`: the commands round-robin, the order reversed every other round, so a busy
  spell on the machine and any warm-up weigh on each version alike.
- :class:`Comparison`: medians of both versions, the ratio new / old, and the flag for a slowdown
  over :data:`SLOWDOWN` in CPU time; :func:`markdown_table` prints them.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

#: A version is flagged when its median CPU time exceeds the other's by more than this.
SLOWDOWN = 0.05
#: The wrapper gives up on a command after this many seconds (it and what it started are killed).
TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Sample:
    """One run: wall seconds, CPU seconds (user + system, the whole tree), peak RSS of its largest process."""

    wall_s: float
    cpu_s: float
    maxrss_kib: int = 0
    returncode: int = 0
    #: Processes that outlived the command and were reaped after it (their CPU is in ``cpu_s``).
    orphans: int = 0


@dataclass(frozen=True)
class Side:
    """One version of rankscope: its ``src``, a launcher that runs its entry point, its environment."""

    label: str
    src: Path
    launcher: Path
    env: Mapping[str, str]

    @property
    def rankscope(self) -> list[str]:
        return [str(self.launcher)]


def entry_point(src: Path) -> str:
    """``module:function`` of the ``rankscope`` console script of the checkout holding ``src``."""
    import tomllib

    pyproject = src.parent / "pyproject.toml"
    if pyproject.is_file():
        scripts = tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {})
        if "rankscope" in scripts:
            return str(scripts["rankscope"])
    return "rankscope.__main__:main"


def make_side(label: str, src: Path, workdir: Path, path_prefix: str = "") -> Side:
    """A :class:`Side` for ``src``: a launcher in ``workdir`` as pip writes one (``#!python``, import the
    entry point, call it), ``PYTHONPATH`` set to ``src`` (so what rankscope starts in Python imports the
    same version), the bytecode compiled (as an installed package has it), and checked: the launcher's
    interpreter imports rankscope from ``src``, not from what is installed."""
    src = src.resolve()
    module, function = entry_point(src).split(":")
    launcher = workdir / f"rankscope-{label}"
    launcher.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\n\nsys.exit({function}())\n"
    )
    launcher.chmod(0o700)
    env = {**os.environ, "PYTHONPATH": str(src)}
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "rankscope")], check=True)
    found = subprocess.run(
        [sys.executable, "-c", "import rankscope; print(rankscope.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(src):
        raise SystemExit(f"{label}: PYTHONPATH={src} imports rankscope from {found}; not that version")
    return Side(label, src, launcher, env)


def measure(
    argv: list[str],
    env: Optional[Mapping[str, str]] = None,
    stdout: Optional[Path] = None,
    pin: bool = False,
    timeout: float = TIMEOUT_S,
) -> Sample:
    """Run ``argv`` under the wrapper; its stdout goes to ``stdout`` (a scratch file when None: not
    /dev/null, where GNU grep stops at the first match). ``pin``: on one core (``taskset -c 0``)."""
    if pin and os.path.exists("/usr/bin/taskset"):
        argv = ["/usr/bin/taskset", "-c", "0", *argv]
    with tempfile.TemporaryDirectory(prefix="rankscope-bench-") as scratch:
        stats = Path(scratch) / "stats.json"
        out = stdout or Path(scratch) / "stdout"
        proc = subprocess.run(
            [sys.executable, "-I", "-S", __file__, str(stats), str(out), str(timeout), "--", *argv],
            env=env,
            stderr=subprocess.PIPE,
            check=False,
        )
        if proc.returncode != 0 or not stats.exists():
            raise SystemExit(f"{argv}: the measuring wrapper failed: {proc.stderr.decode(errors='replace')}")
        sample = Sample(**json.loads(stats.read_text()))
        if sample.returncode not in (0, 1):  # 1: grep -c with no match
            said = out.read_bytes()[-2000:] + proc.stderr[-2000:]
            raise SystemExit(f"{argv} exited {sample.returncode}:\n{said.decode(errors='replace')}")
    return sample


def alternate(commands: Mapping[str, Callable[[], Sample]], runs: int) -> dict[str, list[Sample]]:
    """Each command ``runs`` times, round-robin; every other round in the reverse order."""
    names = list(commands)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for round_ in range(runs):
        for name in names if round_ % 2 == 0 else reversed(names):
            samples[name].append(commands[name]())
    return samples


@dataclass
class Comparison:
    """One benchmark, old and new version, each with its samples (taken alternately, in one run)."""

    name: str
    old: list[Sample] = field(default_factory=list)
    new: list[Sample] = field(default_factory=list)

    def median(self, side: str, what: str) -> float:
        samples = self.old if side == "old" else self.new
        return statistics.median(getattr(s, what) for s in samples)

    def spread(self, side: str) -> str:
        cpu = [s.cpu_s for s in (self.old if side == "old" else self.new)]
        return f"{min(cpu):.3f}–{max(cpu):.3f}"

    def ratio(self, what: str) -> float:
        return self.median("new", what) / max(self.median("old", what), 1e-9)

    @property
    def slower(self) -> bool:
        """The new version's median CPU time is more than :data:`SLOWDOWN` over the old one's."""
        return self.ratio("cpu_s") > 1 + SLOWDOWN

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "old": [asdict(s) for s in self.old], "new": [asdict(s) for s in self.new]}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Comparison:
        def samples(key: str) -> list[Sample]:
            raw = data[key]
            assert isinstance(raw, list)
            return [Sample(**s) for s in raw]

        return cls(str(data["name"]), samples("old"), samples("new"))


def save(comparisons: list[Comparison], path: Path) -> None:
    path.write_text(json.dumps([c.to_json() for c in comparisons], indent=1))


def load(path: Path) -> list[Comparison]:
    return [Comparison.from_json(c) for c in json.loads(path.read_text())]


def markdown_table(comparisons: list[Comparison]) -> str:
    """Medians of CPU and wall time, old and new, the ratios, the CPU range of each (how much the
    runs of one version differ: a ratio within that noise is no finding), and the slowdown flag."""
    lines = [
        "| benchmark | runs | CPU old (s) | CPU new (s) | CPU new / old | CPU min–max old; new (s) "
        "| wall old (s) | wall new (s) | wall new / old | CPU slowdown over 5% |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|:---:|",
    ]
    for c in comparisons:
        runs = f"{len(c.old)}" if len(c.old) == len(c.new) else f"{len(c.old)}/{len(c.new)}"
        lines.append(
            f"| {c.name} | {runs} | {c.median('old', 'cpu_s'):.3f} | {c.median('new', 'cpu_s'):.3f} "
            f"| {c.ratio('cpu_s'):.3f}x | {c.spread('old')}; {c.spread('new')} | {c.median('old', 'wall_s'):.3f} | {c.median('new', 'wall_s'):.3f} "
            f"| {c.ratio('wall_s'):.3f}x | {'**YES**' if c.slower else 'no'} |"
        )
    return "\n".join(lines)


# --- the wrapper: run as a script (python -I -S sidebyside.py STATS STDOUT TIMEOUT -- ARGV) -------


def _children() -> list[int]:
    """This process's children now (orphans re-parented to it included)."""
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as handle:
                pids += [int(p) for p in handle.read().split()]
        except OSError:
            pass
    return pids


def _wrap(stats: str, stdout: str, timeout: float, argv: list[str]) -> None:
    import ctypes
    import resource
    import signal

    pr_set_child_subreaper = 36
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")

    def kill_all(_signum: int, _frame: object) -> None:  # past the timeout: the command and its orphans
        for child in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)

    signal.signal(signal.SIGALRM, kill_all)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    # Ctrl-C reaches the command too (same process group); the wrapper waits for it to end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(stdout, "wb") as sink:
        start = time.perf_counter()
        pid = os.posix_spawnp(
            argv[0],
            argv,
            dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_DUP2, sink.fileno(), 1)],
            setsigdef=[signal.SIGINT],
        )
    _pid, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    orphans = 0
    while True:  # what outlived the command, re-parented here: reaped, so that its CPU counts
        try:
            os.wait()
        except ChildProcessError:
            break
        orphans += 1
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    sample = {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "maxrss_kib": usage.ru_maxrss,
        "returncode": os.waitstatus_to_exitcode(status),
        "orphans": orphans,
    }
    with open(stats, "w") as handle:
        json.dump(sample, handle)


if __name__ == "__main__":
    _wrap(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[5:])
