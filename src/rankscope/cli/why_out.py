"""`why --out DIR`: every raw signal kept as a bundle for a bug report (0700 directories, 0600 files).

Kept: ``why.json`` and ``report.txt``; ``stacks/`` as `stacks --out` writes it (raw dumps,
stacks.json); ``fr.json``; the job's output under ``logs/`` (the last 16 MiB of each file);
``kernel.txt``; the ranks' crash/SIGTERM dumps under ``runtime/``; torchelastic error files under ``errors/``
(``rank-R.pid-P.error.json``); ``environment.txt``, the job's
environment with every secret-looking variable removed, and the removal noted in it.
`rankscope why --from DIR` reads the bundle back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rankscope.cli.outfiles import OutDir
from rankscope.why.secrets import without_secrets
from rankscope.why.signals import Gathered

#: The end of each output file kept.
LOG_TAIL = 16 << 20


def _tail(path: str, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    with open(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > limit:
            f.seek(size - limit)
        return f.read(limit)


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(str(p) for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())
    return [path]


def write_bundle(out_dir: Path, gathered: Gathered, document: dict[str, Any], text: str, force: bool) -> None:
    with OutDir(out_dir, force) as out:
        out.write("why.json", json.dumps(document, indent=2))
        out.write("report.txt", text)
        if gathered.fr is not None:
            from rankscope.fr.report import report_document

            out.write("fr.json", json.dumps(report_document(gathered.fr), indent=2))
        for name, data in gathered.raw.items():
            out.write(name, data)
        if gathered.logs:
            logs = out.subdir("logs")
            used: set[str] = set()
            for source in gathered.logs:
                for path in _files(source):
                    name = path.strip("/").replace("/", "_")[-200:]
                    if name in used:
                        continue
                    used.add(name)
                    out.write(name, _tail(path, LOG_TAIL), subdir=logs)
        crash = [f for f in gathered.rank_files if f.kind in ("crash", "term")]
        if crash:
            runtime = out.subdir("runtime")
            for item in crash:
                out.write(os.path.basename(item.path), _tail(item.path, LOG_TAIL), subdir=runtime)
        errors = [f for f in gathered.rank_files if f.kind == "error_file"]
        if errors:
            kept_errors = out.subdir("errors")
            for item in errors:
                rank = item.rank if item.rank is not None else "none"
                name = f"rank-{rank}.pid-{item.pid or 0}.error.json"
                out.write(name, _tail(item.path, LOG_TAIL), subdir=kept_errors)
        if gathered.environ:
            kept, removed = without_secrets(gathered.environ)
            lines = [f"{k}={v}" for k, v in sorted(kept.items())]
            if removed:
                lines.insert(0, f"# removed as secret-looking: {', '.join(removed)}")
            out.write("environment.txt", "\n".join(lines) + "\n")
    if gathered.stacks_result is not None:
        from rankscope.cli.stacks_report import save_outputs
        from rankscope.stacks.render import render_text
        from rankscope.stacks.report import report_document as stacks_document

        result = gathered.stacks_result
        report = result.report
        stacks_text = render_text(report, report.diagnosis, color=False) if report.diagnosis else ""
        save_outputs(out_dir / "stacks", result, stacks_document(report), stacks_text, force)
