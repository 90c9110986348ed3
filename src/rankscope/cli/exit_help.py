"""The exit codes, in --help itself: a pip-installed user has no docs/ directory.

The top-level help lists every code; each verb's help lists the codes that verb uses
(docs/exit-codes.md says the same at length). tests/test_cli.py checks both.
"""

from __future__ import annotations

from rankscope.errors import ExitCode

#: code -> what it means, in a few words.
MEANING: dict[int, str] = {
    ExitCode.OK: "ok",
    ExitCode.INTERNAL: "a bug in rankscope (rerun with --debug, report the traceback)",
    ExitCode.USAGE: "bad command line",
    ExitCode.NOTHING_FOUND: "nothing found (no job, no process, no log)",
    ExitCode.PARTIAL: "partial: some targets failed (listed in the report), or ranks missing",
    ExitCode.ALL_FAILED: "every target failed (the report says why)",
    ExitCode.MISSING_TOOL: "a required tool is missing (py-spy, ssh, pdsh, srun)",
    ExitCode.PERMISSION_DENIED: "permission denied (ptrace, /proc, another user's job)",
    ExitCode.BAD_INPUT: "bad input: no such pid, file or directory, a bad --out/--from directory",
    ExitCode.DEMO_MISSED: "the demo's diagnosis missed the injected culprit",
    ExitCode.CHECK_FAILED: "doctor: at least one check failed (each FAIL line carries its fix)",
    ExitCode.RANKS_FAILED: "gpu-test: a rank failed its test (or --isolate found a bad device/link)",
    ExitCode.RANKS_MISSING: "gpu-test: some ranks never joined or never reported",
    ExitCode.MISCONFIGURED: "gpu-test: a set-up mistake caught before the backend started",
    ExitCode.NUMERICS_MISMATCH: "numerics: a comparison at the default tolerance disagrees",
    ExitCode.DESYNC: "fr: ranks disagree on their collectives (the report names the first divergence)",
    ExitCode.CAUSE_NAMED: "why: a cause was named (the verdict: culprit ranks, cause, location)",
    130: "interrupted by Ctrl-C (what was collected so far is printed)",
    143: "ended by SIGTERM (what was collected so far is printed)",
}

#: verb -> the codes it exits with (besides 1, a bug, which any verb may hit).
VERB_CODES: dict[str, tuple[int, ...]] = {
    "stacks": (0, 2, 3, 4, 5, 6, 7, 8, 130, 143),
    "demo": (0, 2, 6, 9),
    "whoami": (0, 2, 8),
    "logs": (0, 2, 3, 8, 130, 143),
    "exec": (0, 2, 4, 5, 6, 8, 130, 143),
    "net": (0, 2, 4, 5, 6, 8),
    "doctor": (0, 2, 10),
    "launch": (0, 2, 8),
    "gpu-test": (0, 2, 6, 11, 12, 13),
    "bench": (0, 2, 6, 11),
    "fds": (0, 2, 3, 4, 5, 7, 8),
    "strace": (0, 2, 3, 4, 5, 6, 7, 8, 130, 143),
    "core": (0, 2, 3, 4, 5, 6, 8),
    "attach": (0, 2, 5, 6, 7, 8, 130),
    "numerics": (0, 2, 6, 8, 20),
    "fr": (0, 2, 3, 4, 8, 14),
    "trace": (0, 2, 3, 4, 8),
    "why": (0, 2, 3, 4, 8, 15, 130, 143),
    "runtime": (0, 2, 4, 7, 8),
}

#: Verbs whose code is not one of the table's.
SPECIAL = {
    "prefix": "Exit code: the command's own (128+N when a signal N ended it); 6 when the command is not "
    "found, 8 when it is not executable, 2 for a bad command line.",
    "rerun": "Exit code: the command's own (128+N when a signal N ended it); 124 when --timeout ended it; "
    "6 when the command is not found, 8 when it is not executable or the --compare log is missing, "
    "2 for a bad command line.",
    "watch": "Exit code: the job's own when watch started it (128+N when a signal N ended it), whatever "
    "was captured; 0 when an attached job (--pid, --jobid) ends; 3 when --jobid finds no process here, "
    "6 when the command is not found, 8 for a dead --pid, a command that is not executable or an --out "
    "that cannot be used, 2 for a bad command line.",
}


def epilog(verb: str) -> str:
    """The exit codes a verb's --help lists (``""`` for a verb this table does not know)."""
    if verb in SPECIAL:
        return SPECIAL[verb]
    codes = VERB_CODES.get(verb)
    if codes is None:
        return ""
    return "\b\nExit codes:\n" + "\n".join(f"  {code}  {MEANING[code]}" for code in codes)


def full_table() -> str:
    """Every exit code, for the top-level --help."""
    return "\b\nExit codes (every verb's --help lists its own):\n" + "\n".join(
        f"  {code}  {text}" for code, text in MEANING.items()
    )
