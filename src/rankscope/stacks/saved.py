"""Read back a directory `rankscope stacks --out DIR` wrote, for `rankscope stacks --from DIR`.

What is re-derived and what is kept (docs/stacks.md, "Re-analysing a saved run"):

- ``stacks.json`` gives the facts of the live run that the raw dumps do not hold: the processes
  with their rank identities (``RankId`` from each worker's environment), the jobs, the failures
  of discovery and of dumps, the samples, the GPUs, the nodes of a multi-node run, the time taken.
- ``raw/HOST.rank-R.pid-P[.sample-N][.native].json`` are py-spy's own dumps: when ``raw/`` is
  there, the groups are parsed and merged again from them, and the diagnosis is derived again, so
  a newer rankscope's parsing and analysis apply to a directory an older one wrote. A dump that
  cannot be read becomes a failure naming its file; the others are still reported.
- Without ``raw/`` (a multi-node run keeps each node's answer, ``NODE.out``, not raw dumps) the
  groups of ``stacks.json`` are used as they are; the diagnosis is still derived again.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from rankscope.errors import BadInputError
from rankscope.model import (
    SCHEMA_VERSION,
    Failure,
    FailureKind,
    Frame,
    ProcessSnapshot,
    RankId,
    Stage,
    ThreadStack,
)
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.merge import group_snapshots, lend_native, motion
from rankscope.stacks.pyspy import parse_dump
from rankscope.stacks.report import ProcessInfo, StacksReport, load_report

#: ``HOST.rank-R.pid-P[.sample-N][.native].json`` (or ``.error.txt``), as `stacks --out` names them.
RAW_NAME = re.compile(
    r"^(?P<host>.+)\.rank-(?P<rank>\d+|none)\.pid-(?P<pid>\d+)(?:\.sample-(?P<sample>\d+))?"
    r"(?P<native>\.native)?\.(?P<ext>json|error\.txt)$"
)
SCHEMA_NAME = StacksReport.SCHEMA.rsplit("/", 1)[0]
KINDS = {kind.value for kind in FailureKind}
HINT = "pass --from the directory `rankscope stacks --out DIR` wrote"


@dataclass
class SavedRun:
    """A saved run, re-analysed."""

    report: StacksReport
    #: Where the groups came from: "raw dumps" (re-parsed) or "stacks.json" (no raw/ directory).
    source: str
    #: Files of raw/ that could not be read (each is also a failure of the report).
    bad_files: list[str] = field(default_factory=list)
    #: The flight-recorder verdict the run showed (``fr`` of stacks.json, a rankscope.fr document), if any.
    fr: Optional[Any] = None


def _load_document(path: Path) -> StacksReport:
    doc_path = path / "stacks.json"
    if not path.exists():
        raise BadInputError(f"{path} does not exist", HINT)
    if not path.is_dir():
        raise BadInputError(f"{path} is not a directory", HINT)
    if not doc_path.is_file():
        raise BadInputError(f"{path} is not a rankscope stacks directory: it has no stacks.json", HINT)
    try:
        data = json.loads(doc_path.read_bytes())
    except OSError as exc:
        raise BadInputError(f"cannot read {doc_path}: {exc.strerror or exc}", HINT) from exc
    except ValueError as exc:
        raise BadInputError(
            f"{doc_path} is not valid JSON ({exc}): it was cut short or edited",
            "copy the directory again from where `stacks --out` wrote it",
        ) from exc
    schema = data.get("schema") if isinstance(data, dict) else None
    name, _, version = str(schema).rpartition("/")
    if name != SCHEMA_NAME:
        raise BadInputError(f"{doc_path} is not a rankscope stacks report (schema {schema!r})", HINT)
    if not version.isdigit() or int(version) > SCHEMA_VERSION:
        raise BadInputError(
            f"{doc_path} was written by a newer rankscope (schema {schema}); this one reads {StacksReport.SCHEMA}",
            "upgrade rankscope (pip install -U rankscope) to read it",
        )
    for failure in data.get("failures") or []:
        # A kind added by a newer rankscope (adding one keeps the schema's version) reads as "other".
        if isinstance(failure, dict) and failure.get("kind") not in KINDS:
            failure["kind"] = FailureKind.OTHER.value
    try:
        return load_report(data)
    except ValueError as exc:
        raise BadInputError(
            f"{doc_path} cannot be read as a rankscope stacks report: {exc}",
            "if a newer rankscope wrote it, upgrade rankscope (pip install -U rankscope); "
            "else pass --from the directory `rankscope stacks --out DIR` wrote",
        ) from exc


def _bad_file(name: str, why: str, rank: Optional[RankId] = None, where: str = "raw/") -> Failure:
    return Failure(
        f"{where}{name}",
        Stage.PARSE,
        f"unreadable dump: {why}",
        "the file was cut short or edited; the other dumps are reported",
        rank,
        FailureKind.BAD_OUTPUT,
    )


def _from_raw(saved: StacksReport, raw: Path) -> tuple[StacksReport, list[str]]:
    """The report with its groups, states and native flags derived again from the raw dumps."""
    return from_dumps(saved, (entry.name for entry in raw.iterdir()), lambda name: (raw / name).read_bytes())


def from_dumps(
    saved: StacksReport, names: Iterable[str], read: Callable[[str], bytes], where: str = "raw/"
) -> tuple[StacksReport, list[str]]:
    """``saved`` with its groups, states and native flags derived from py-spy's dumps: ``names`` as
    :data:`RAW_NAME` has them, each read by ``read`` (a saved run's ``raw/``, or a node's raw answer,
    rankscope.cluster.node_answer); and the names that could not be read (each a failure of the
    report, its target ``where`` + the name)."""
    #: (host, pid) -> sample index (0-based) -> file name, for Python dumps and for native ones.
    dumps: dict[tuple[str, int], dict[int, str]] = {}
    natives: dict[tuple[str, int], str] = {}
    last = max(1, saved.samples) - 1
    for name in sorted(names):
        match = RAW_NAME.match(name)
        if match is None or match["ext"] != "json":
            continue
        key = (match["host"], int(match["pid"]))
        sample = int(match["sample"]) - 1 if match["sample"] else last
        if match["native"]:
            natives[key] = name
        else:
            dumps.setdefault(key, {})[sample] = name
    intern: dict[Frame, Frame] = {}
    failures: list[Failure] = []
    bad: list[str] = []

    def parse(name: str, proc: ProcessInfo) -> Optional[list[ThreadStack]]:
        try:
            return parse_dump(read(name), proc.pid, intern)
        except (OSError, KeyError, ValueError, TypeError, AttributeError) as exc:
            bad.append(name)
            failures.append(_bad_file(name, str(exc) or type(exc).__name__, proc.rank, where))
            return None

    samples: list[list[ProcessSnapshot]] = [[] for _ in range(last + 1)]
    final: list[ProcessSnapshot] = []
    native: dict[int, ProcessSnapshot] = {}
    processes = []
    for proc in saved.processes:
        key = (proc.rank.host, proc.pid)
        latest: Optional[ProcessSnapshot] = None
        for index, name in sorted(dumps.get(key, {}).items()):
            threads = parse(name, proc)
            if threads is None:
                continue
            snap = ProcessSnapshot(pid=proc.pid, rank=proc.rank, threads=threads, cmdline=proc.cmdline)
            if 0 <= index <= last:
                samples[index].append(snap)
            latest = snap
        if key in natives:
            threads = parse(natives[key], proc)
            if threads is not None:
                native[proc.pid] = ProcessSnapshot(
                    pid=proc.pid, rank=proc.rank, threads=threads, cmdline=proc.cmdline
                )
        if latest is not None:
            final.append(latest)
        elif proc.dumped and key not in dumps:
            failures.append(
                _bad_file(
                    f"{proc.rank.host}.rank-{proc.rank.rank}.pid-{proc.pid}.json",
                    "the file is missing",
                    proc.rank,
                    where,
                )
            )
        processes.append(replace(proc, dumped=latest is not None))
    states = motion(samples)
    if natives:
        final = lend_native(final, native)
        processes = [replace(p, native=p.pid in native) for p in processes]
    processes = [replace(p, state=states.get(p.pid)) for p in processes]
    report = replace(
        saved,
        groups=group_snapshots(final),
        processes=processes,
        failures=[*saved.failures, *failures],
        diagnosis=None,
    )
    return report, bad


def read_saved(path: Path) -> SavedRun:
    """The report of the run saved in ``path``, its groups and diagnosis derived again.

    Raises BadInputError (one line) when ``path`` is missing, is not a `stacks --out` directory, or
    was written by a newer rankscope; a damaged raw dump is a failure in the report instead.
    """
    saved = _load_document(path)
    raw = path / "raw"
    if raw.is_dir():
        report, bad = _from_raw(saved, raw)
        run = SavedRun(report, "raw dumps", bad)
    else:
        run = SavedRun(replace(saved, diagnosis=None), "stacks.json")
    run.report.diagnosis = diagnose(run.report)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        run.fr = json.loads((path / "stacks.json").read_bytes()).get("fr")
    return run
