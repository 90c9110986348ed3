"""`stacks --from DIR` with `--folded` and `--html`: a saved run of a real job (tests/data/stacks-out-v1)."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

from tests.support.cli import run_cli

SAVED = Path(__file__).parent.parent / "data" / "stacks-out-v1"
FOLDED_LINE = re.compile(r"^([^;\n]+(?:;[^;\n]+)*) (\d+)$")


def test_folded_from_a_saved_run_counts_ranks() -> None:
    result = run_cli("stacks", "--from", str(SAVED / "native-samples"), "--folded")
    assert result.returncode == 0, result.stderr
    lines = [FOLDED_LINE.match(line) for line in result.stdout.splitlines()]
    assert lines and all(lines), result.stdout
    counts = {m.group(1): int(m.group(2)) for m in lines if m}
    main = {stack: n for stack, n in counts.items() if stack.startswith("MainThread;")}
    # Two ranks, one sample's groups kept: each rank once, native frames folded as the text report folds them.
    assert sorted(main.values()) == [1, 1]
    assert any(stack.endswith(";pthread_cond_wait (libc.so.6)") for stack in main), main
    text = run_cli("stacks", "--from", str(SAVED / "native-samples")).stdout
    for stack in main:
        assert all(frame in text for frame in stack.split(";")[1:]), stack


def test_html_from_a_saved_run(tmp_path: Path) -> None:
    page = tmp_path / "new" / "page.html"
    result = run_cli("stacks", "--from", str(SAVED / "plain"), "--html", str(page))
    assert result.returncode == 0, result.stderr
    assert f"page written to {page}" in result.stderr and "Diagnosis" in result.stdout
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    data = json.loads(re.search(r'id="rankscope-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["verdict"] == [
        "rank 0 waits in all_reduce (torch.distributed) called from sync_gradients (hang_job.py:70)",
        "rank 1 is elsewhere: update_index (hang_job.py:48)",
    ]
    assert [root["name"] for root in data["sections"][0]["roots"]] == ["MainThread", "heartbeat-N"]
