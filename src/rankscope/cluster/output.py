"""``--out DIR``: one raw file per node (like srun's ``--output=trace-%N.out``) plus a merged JSON."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from rankscope.cluster.fanout import NodeResult
from rankscope.errors import BadInputError


def write_private_text(path: Path, text: str) -> None:
    # Stacks may carry local variables and environments: owner-only, from the first byte.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def write_node_files(
    out_dir: Path,
    results: Sequence[NodeResult],
    merged: dict[str, Any],
    merged_name: str,
    extra: Optional[dict[str, str]] = None,
) -> None:
    """NODE.out (stdout), NODE.err (stage and stderr, for failed or chatty nodes), the merged JSON, ``extra``."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for result in results:
            write_private_text(out_dir / f"{result.node}.out", result.stdout)
            if result.stderr or result.stage != "ok":
                note = f"# stage: {result.stage}" + (f": {result.reason}" if result.reason else "") + "\n"
                write_private_text(out_dir / f"{result.node}.err", note + result.stderr)
        write_private_text(out_dir / merged_name, json.dumps(merged, indent=2) + "\n")
        for name, text in (extra or {}).items():
            write_private_text(out_dir / name, text)
    except OSError as exc:
        raise BadInputError(f"cannot write to --out {out_dir}: {exc}", "pass a writable directory") from exc
