"""bench/sidebyside.py: what the version comparison of docs/benchmarks.md measures and flags.

Real processes, no job: a command whose child outlives it (as rankscope's guardian outlives
rankscope), a checkout with its own entry point, and the flag on made-up samples.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from bench.sidebyside import Comparison, Sample, make_side, markdown_table, measure

#: A command that starts a child in a session of its own and exits at once; the child burns 0.3 s
#: of CPU after its parent is gone (the guardian's shape: it ends after the command).
ORPHAN = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        while time.process_time() < 0.3:
            pass
        os._exit(0)
    sys.exit(0)
    """
)


def test_cpu_of_a_child_that_outlives_the_command_is_counted() -> None:
    sample = measure([sys.executable, "-c", ORPHAN])
    assert sample.returncode == 0
    assert sample.orphans == 1
    assert sample.cpu_s >= 0.3  # GNU time reports what the command itself waited for: ~0.02 s here


def test_each_side_runs_its_own_entry_point_from_its_own_src(tmp_path: Path) -> None:
    checkout = tmp_path / "old"
    (checkout / "src" / "rankscope" / "cli").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project.scripts]\nrankscope = "rankscope.cli.old:main"\n')
    (checkout / "src" / "rankscope" / "__init__.py").write_text("")
    (checkout / "src" / "rankscope" / "cli" / "__init__.py").write_text("")
    (checkout / "src" / "rankscope" / "cli" / "old.py").write_text(
        "import rankscope\ndef main():\n    print('old entry point', rankscope.__file__)\n    return 0\n"
    )
    side = make_side("old", checkout / "src", tmp_path)
    out = tmp_path / "out"
    assert measure(side.rankscope, side.env, out).returncode == 0
    said = out.read_text()
    assert said.startswith("old entry point ")
    assert said.split()[-1] == str(checkout / "src" / "rankscope" / "__init__.py")


def test_a_cpu_median_over_5_percent_is_flagged() -> None:
    old = [Sample(1.0, cpu) for cpu in (1.0, 0.9, 5.0)]  # median 1.0: one outlier does not move it
    slower = Comparison("slower", old, [Sample(1.0, cpu) for cpu in (1.06, 1.1, 0.2)])
    same = Comparison("same", old, [Sample(9.0, cpu) for cpu in (1.04, 1.0, 1.2)])  # wall is not the test
    assert slower.slower and not same.slower
    table = markdown_table([slower, same]).splitlines()
    assert table[2].startswith("| slower | 3 | 1.000 | 1.060 | 1.060x | 0.900–5.000; 0.200–1.100 |")
    assert table[2].endswith("| **YES** |")
    assert table[3].endswith("| 9.000 | 9.000x | no |")
