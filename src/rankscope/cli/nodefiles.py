"""``--out DIR`` of a multi-node run: one file per node (like srun's ``--output=trace-%N.out``) and the merged JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from rankscope.cli.outfiles import OutDir

if TYPE_CHECKING:
    from rankscope.cluster.classify import NodeResult


def write_node_files(
    out_dir: Path,
    results: Sequence[NodeResult],
    merged: Mapping[str, Any],
    merged_name: str,
    extra: Optional[Mapping[str, str]] = None,
    force: bool = False,
) -> None:
    """NODE.out (stdout), NODE.err (stage and stderr, for failed or chatty nodes), the merged JSON, ``extra``."""
    with OutDir(out_dir, force) as out:
        for result in results:
            out.write(f"{result.node}.out", result.stdout)
            if result.stderr or not result.ok:
                note = f"# stage: {result.stage}" + (f": {result.reason}" if result.reason else "") + "\n"
                out.write(f"{result.node}.err", note + result.stderr)
        out.write(merged_name, json.dumps(merged, indent=2) + "\n")
        for name, text in (extra or {}).items():
            out.write(name, text)
