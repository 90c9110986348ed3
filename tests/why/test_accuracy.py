"""Accuracy: on the cases of `logs errors` (tests/logs/corpus/cases.toml), `fr` (the recorded gloo
dumps of tests/data/fr/) and `stacks` (the saved directories of tests/data/stacks-out-v1/), `why`
names the same culprit without the user choosing a verb. (`core bt`'s: tests/why/test_files.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import pytest
import tomllib

from rankscope.evidence import decide
from rankscope.folding import RankSet
from rankscope.fr.analyse import analyse_path
from rankscope.model import parse_label
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.saved import read_saved
from rankscope.why.files import read_fr
from rankscope.why.output import read_logs
from rankscope.why.saved import read_from
from rankscope.why.signals import Gathered
from rankscope.why.weigh import weigh

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "logs" / "corpus"
CASES = [
    c
    for c in tomllib.loads((CORPUS / "cases.toml").read_text())["case"]
    if c.get("verb", "errors") == "errors" and "xfail" not in c and ("who" in c or "cause" in c)
]
FR = sorted(p for p in (TESTS / "data" / "fr" / "gloo-torch2.13").iterdir() if p.is_dir())
STACKS = sorted(p for p in (TESTS / "data" / "stacks-out-v1").iterdir() if p.is_dir())


def _rank(who: Optional[str], global_rank: Optional[int]) -> list[int]:
    if global_rank is not None:
        return [global_rank]
    if who is None or who == "null":
        return []
    rank = parse_label(who)[1] if ":" in who else (int(who) if who.isdigit() else None)
    return [rank] if rank is not None else []


#: Causes whose finding blames every rank it folds (the model's ranks without gradients; the ranks that
#: never arrived, as the waiting ranks' messages name them), not one rank.
FOLDED = (
    "ddp_unused_parameters",
    "ranks_never_joined",
    "monitored_barrier",
    "nccl_id_wait",
    "store_unreachable",
)


@pytest.mark.parametrize("case", CASES, ids=[Path(c["file"]).stem for c in CASES])
def test_the_culprit_of_every_logs_errors_case(case: dict[str, Any]) -> None:
    gathered = Gathered()
    read_logs([str(CORPUS / "logs" / case["file"])], gathered)
    report = weigh(gathered)
    folded = case.get("cause") in FOLDED and case.get("ranks", "null") != "null"
    if case.get("who") == "null":
        expected_ranks = list(RankSet.parse(case["ranks"])) if folded else []
        assert report.verdict is None or report.verdict.ranks == expected_ranks
        return
    assert report.verdict is not None
    if "cause" in case:
        assert report.verdict.cause == case["cause"]
    if "who" in case:
        # the case names the rank as the log labels it; a [rankN] marker in the log gives its global rank
        logs_verdict = decide(gathered.log_findings)
        assert logs_verdict is not None and logs_verdict.who == case["who"]
        expected = _rank(case["who"], case.get("global_rank", logs_verdict.global_rank))
        if folded:
            expected = list(RankSet.parse(case["ranks"]))
        elif case.get("cause", "python_exception") == "python_exception" and _plain(case.get("ranks")):
            # every rank that raised the error (torch's markers on each copy), as `logs errors` groups them
            expected = list(RankSet.parse(case["ranks"]))
        assert report.verdict.ranks == expected


def _plain(ranks: Any) -> bool:
    return isinstance(ranks, str) and bool(re.fullmatch(r"[\d,-]+", ranks))


def test_the_corpus_has_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("dumps", FR, ids=[p.name for p in FR])
def test_the_culprit_of_every_recorded_flight_recorder_case(dumps: Path) -> None:
    expected = analyse_path(dumps)
    gathered = Gathered()
    read_fr(str(dumps), gathered)
    report = weigh(gathered)
    if not expected.divergences:
        assert report.verdict is None
        return
    assert report.verdict is not None
    assert report.verdict.cause == "collective_desync"
    assert report.verdict.ranks == sorted(expected.divergences[0].suspects)


@pytest.mark.parametrize("saved", STACKS, ids=[p.name for p in STACKS])
def test_the_culprit_of_every_saved_stacks_run(saved: Path) -> None:
    stacks = read_saved(saved).report
    expected = (stacks.diagnosis or diagnose(stacks)).divergent_ranks
    report = weigh(read_from(saved))
    assert report.verdict is not None
    assert expected == [1]
    assert (report.verdict.cause, report.verdict.ranks) == ("elsewhere", expected)
    assert report.verdict.location == "update_index (hang_job.py:48)"


@pytest.mark.parametrize(
    ("log", "words"),
    [
        ("recorded_torchrun_port_in_use.log", "port 29733 is already in use"),
        (
            "recorded_gloo_ddp_unused_info.log",
            "ranks 0-1 stopped in DDP: parameters of the model got no gradient",
        ),
        ("recorded_gloo_desync_detail.log", "issued collectives the other ranks did not"),
        ("recorded_gloo_monitored_barrier.log", "rank 2 did not reach monitored_barrier"),
        ("recorded_store_waiting_for_clients.log", "rank 1 never joined the others at start-up"),
        ("recorded_store_client_timeout.log", "could not connect to the rendezvous store at 127.0.0.1:29733"),
        (
            "nccl_uniqueid_old_pdsh.log",
            "rank 0 never reached the collective that sets up the NCCL communicator",
        ),
    ],
)
def test_torch_distributed_errors_that_name_their_cause_read_as_such(log: str, words: str) -> None:
    gathered = Gathered()
    read_logs([str(CORPUS / "logs" / log)], gathered)
    verdict = weigh(gathered).verdict
    assert verdict is not None and words in verdict.text, verdict
