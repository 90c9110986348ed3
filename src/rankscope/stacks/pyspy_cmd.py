"""Running py-spy: where it is, its command line, its environment."""

from __future__ import annotations

import os

#: Seconds one dump may take, and a whole collection, unless told otherwise (--timeout, --deadline).
DEFAULT_TIMEOUT = 10.0
DEFAULT_DEADLINE = 60.0


def find_pyspy() -> str:
    """py-spy next to this interpreter (a venv's bin/), else on PATH."""
    from rankscope.lifetime import tool_path

    found = tool_path("py-spy")
    if found:
        return found
    from rankscope.errors import MissingToolError

    raise MissingToolError("py-spy", "install it: pip install py-spy (a static binary, no compiler needed)")


def dump_argv(pyspy: str, pid: int, native: bool = False, with_locals: bool = False) -> list[str]:
    argv = [pyspy, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    if with_locals:
        argv.append("--locals")
    return argv


def pyspy_env() -> dict[str, str]:
    # py-spy prints a Rust backtrace on every error when RUST_BACKTRACE is set.
    env = dict(os.environ)
    env["RUST_BACKTRACE"] = "0"
    return env


def default_parallelism() -> int:
    """How many dumps run at once unless told: two per CPU, at least 4, at most 64.

    py-spy is short and mostly waits on the kernel; the cap keeps a big node's run within a
    default open-files limit (two pipes per dump) and its memory small (~10 MB per py-spy).
    """
    return max(4, min(64, 2 * (os.cpu_count() or 1)))
