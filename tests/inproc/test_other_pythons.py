"""The tracer, the trace readers, progress markers and the in-process handler on Python 3.12 and 3.13,
under a real torchrun.

torch is installed for the suite's own interpreter only, but torchrun starts workers of any
interpreter (``--no-python``): each worker is ``python3.1x -m rankscope trace run -- job.py`` from
the source tree. The job needs no torch, only the rank variables torchrun sets: rank r marks steps
0 .. r+2 with rankscope.progress() and then waits in one function. Those interpreters have no
``rankscope-inproc.pth`` (rankscope is not installed into them), so the job calls
``rankscope.inproc.enable()`` itself, as docs/inproc.md tells such users to.

One job per interpreter is checked for everything: one trace file per rank, `trace tail` grouping the
ranks at the function they wait in, each rank's progress file, and `rankscope stacks` (py-spy 0.4
reads 3.12 and 3.13) and `stacks --via-signal` showing the same place with each rank's step.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job
from tests.support.pythons import SRC, version_params

from rankscope.inproc import progress, runtime

pytestmark = pytest.mark.slow

NPROC = 2

JOB = """
import os
import time

import rankscope
import rankscope.inproc


def train_step(i):
    rankscope.progress(step=i, phase="train")


def wait_for_peers():
    time.sleep(600)


rankscope.inproc.enable()
for i in range(3 + int(os.environ["RANK"])):
    train_step(i)
wait_for_peers()
"""


def _steps(directory: Path) -> dict[int, int]:
    """Each rank's step, from its progress file (read as `rankscope stacks` reads it)."""
    found = {}
    for path in directory.glob("*.progress"):
        parsed = runtime.parse_name(path.name)
        with contextlib.suppress(OSError, ValueError):
            record = progress.read(str(path))
            if parsed is not None and parsed[1] is not None and record.step is not None:
                found[parsed[1]] = record.step
    return found


def _click_for(where: Path) -> Path:
    """A directory holding click (pure Python), the one dependency the command line imports at start:
    it stands in for installing rankscope into that interpreter."""
    import click

    where.mkdir()
    (where / "click").symlink_to(Path(click.__file__).parent, target_is_directory=True)
    return where


@pytest.mark.parametrize("python", version_params("3.12", "3.13"))
def test_a_torchrun_job_on_another_python_is_traced_and_shows_its_steps(python: str, tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    (tmp_path / "job.py").write_text(JOB)
    traces, rt = tmp_path / "traces", tmp_path / "rt"
    deps = _click_for(tmp_path / "deps")
    env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{deps}",
        "OMP_NUM_THREADS": "1",
        runtime.ENV_DIR: str(rt),
    }
    env.pop("RANKSCOPE_INPROC", None)
    launcher = [str(torchrun), "--standalone", f"--nproc-per-node={NPROC}", "--no-python", python]
    launcher += ["-m", "rankscope", "trace", "run", "--out", str(traces), "--"]
    want = {rank: rank + 2 for rank in range(NPROC)}
    # torchrun_job stops the workers with torchrun, whatever session each runs in.
    with torchrun_job(
        tmp_path, nproc=NPROC, script=Path("job.py"), env=env, launcher=launcher, ready=False
    ) as job:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _steps(rt) != want and job.process.poll() is None:
            time.sleep(0.2)
        assert _steps(rt) == want, job.log_tail()

        files = sorted(p.name for p in traces.glob("trace-*"))
        assert sorted(int(name.split("-")[-2]) for name in files) == list(range(NPROC)), files
        tail = run_cli("trace", "tail", str(traces), "--json").json()
        assert [g["ranks"] for g in tail["groups"]] == [f"[0-{NPROC - 1}]"]
        assert tail["groups"][0]["files"] and "wait_for_peers" in json.dumps(tail["groups"][0])
        major, minor = Path(python).parent.parent.name.split(".")[:2]
        shown = run_cli("trace", "show", str(traces / files[0]), "--json").json()
        assert shown["meta"]["python"].startswith(f"{major}.{minor}.")

        for extra in ([], ["--via-signal"]):
            out = run_cli("stacks", "--pid", str(job.pid), *extra, "--json")
            assert out.returncode == 0, out.stderr
            document = out.json()
            assert {p["rank"]["rank"]: p["progress"]["step"] for p in document["processes"]} == want
            assert [p.get("via") == "signal" for p in document["processes"]] == [bool(extra)] * NPROC
            (group,) = [g for g in document["groups"] if g["thread"] == "MainThread"]
            assert group["frames"][-1]["function"] == "wait_for_peers"
            assert sorted(m["rank"] for m in group["members"]) == list(range(NPROC))
