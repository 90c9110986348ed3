"""rankscope and torch's own analyzer (`python -m torch.distributed.flight_recorder.fr_trace`) on the
same recorded gloo dumps: every mismatch torch's analyzer reports, rankscope reports too (same group,
same culprit ranks, at that collective or before it).

torch 2.13's analyzer cannot read gloo dumps as torch writes them: gloo records its process-group
config under the name "" (KeyError ('0', 0) in build_collectives). The copies it reads here carry the
groups rankscope derived from the entries; nothing else is changed.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps

GLOO = Path(__file__).parent.parent / "data" / "fr" / "gloo-torch2.13"
SCENARIOS = ("extra", "skip", "op", "size", "subgroup", "p2p")

RUN_ALL = """
import sys
from torch.distributed.flight_recorder.fr_trace import main
for path in sys.argv[1:]:
    print("=== " + path, file=sys.stderr, flush=True)  # torch's analyzer logs to stderr
    main([path, "--allow-incomplete-ranks"])
    sys.stderr.flush()
"""


def torch_findings(text: str) -> list[tuple[str, int, set[int]]]:
    """(pg name, seq, culprit or missing ranks) for every error torch's analyzer printed."""
    found = []
    for block in re.split(r"\n(?=Collective sequence number|Not all ranks joining)", text):
        seq = re.search(
            r"(?:Collective sequence number|Not all ranks joining collective, sequence number): (\d+)", block
        )
        group = re.search(r"group info: ([^:\n]+)", block)
        ranks = re.search(r"(?:Culprit rank (\d+)|missing ranks: \{([\d, ]+)\})", block)
        if seq and group and ranks:
            who = {int(ranks.group(1))} if ranks.group(1) else {int(r) for r in ranks.group(2).split(",")}
            found.append((group.group(1).strip(), int(seq.group(1)), who))
    return found


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, list]]:
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    root = tmp_path_factory.mktemp("torchfr")
    verdicts = {}
    for scenario in SCENARIOS:
        collected = read_dumps(GLOO / scenario)
        report = analyse(collected.dumps)
        verdicts[scenario] = report
        out = root / scenario
        out.mkdir()
        for dump in collected.dumps:
            raw = pickle.loads(Path(dump.path).read_bytes())
            raw["pg_config"] = {
                g.pg: {"name": g.pg, "desc": g.desc, "ranks": str(g.member_list)}
                for g in report.groups
                if dump.rank in g.member_list
            }
            (out / f"rank_{dump.rank}").write_bytes(pickle.dumps(raw))
    proc = subprocess.run(
        [sys.executable, "-c", RUN_ALL, *(str(root / s) for s in SCENARIOS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    texts = dict(re.findall(r"=== [^\n]*/(\w+)\n(.*?)(?=\n=== |\Z)", proc.stderr, flags=re.S))
    return {s: (texts.get(s, ""), verdicts[s]) for s in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rankscope_finds_every_mismatch_torch_finds(both: dict, scenario: str) -> None:
    text, report = both[scenario]
    findings = torch_findings(text)
    assert findings, f"torch's analyzer found nothing in {scenario}: {text[-1500:]}"
    for pg, seq, ranks in findings:
        ours = [d for d in report.divergences if d.pg == pg and d.seq <= seq]
        suspects = {r for d in ours for r in d.suspects} | set(report.absent)
        assert ours and ranks <= suspects, (scenario, pg, seq, ranks, [d.text for d in report.divergences])


def test_where_rankscope_sees_more_than_torch(both: dict) -> None:
    # The extra all_reduce paired silently (#3): torch's analyzer reports the type mismatch one
    # collective later (#4, barrier against all_reduce); rankscope names #3 and its call site.
    text, report = both["extra"]
    assert [(pg, seq) for pg, seq, _ in torch_findings(text)] == [("0", 4)]
    assert (report.divergences[0].seq, report.divergences[0].kind) == (3, "extra")
