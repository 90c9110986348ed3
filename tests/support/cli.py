"""Run the real `rankscope` command line: in a subprocess, as a user would (``run_cli``), or in this
process (``run_cli_here``) for tests that run it on many files and only read what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(
    *args: str, timeout: float = 120, env: Optional[dict[str, str]] = None, input: str = ""
) -> CliResult:
    proc = subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        input=input,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def run_cli_here(*args: str) -> CliResult:
    """The command line run in this process: the console entry's own function
    (rankscope.cli.node.main) with click's test streams as stdin, stdout and stderr. What it prints
    and its exit code are the command's; it saves the interpreter's start and rankscope's imports
    (0.2 CPU-s a run). For commands that read files and start nothing (``logs``, ``why --log``);
    keep a case of each kind on ``run_cli`` so the console entry itself stays exercised."""
    from click.testing import CliRunner

    from rankscope.cli.node import main

    with CliRunner().isolation() as streams:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = (stream.getvalue().decode("utf-8", "replace") for stream in streams[:2])
    return CliResult(code, out, err)


def run_cli_as(user: str, *args: str, home: str, timeout: float = 120) -> CliResult:
    """Run the command line as another user (``setpriv``, from root), in ``home`` (which that user may write)."""
    proc = subprocess.run(
        ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
        + [sys.executable, "-m", "rankscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HOME": home},
        cwd=home,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def hide_module(directory: Path, module: str) -> str:
    """A PYTHONPATH (``directory``, where a sitecustomize.py is written) whose import hook finds no
    ``module``: the command line run with it stands for an environment without that module."""
    (directory / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r} or name.startswith({module + '.'!r}):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    return str(directory)
