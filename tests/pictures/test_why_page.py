"""The `why` page model from real why reports (`why --from` a saved run of a real hung job,
`why --fr` the recorded dumps of a real desync), and `why --folded` / `--html` on the command line."""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path

import pytest
from tests.support.cli import CliResult, run_cli

from rankscope.model import Failure, FailureKind, Stage
from rankscope.pictures.html import HIDDEN
from rankscope.pictures.page import FlameNode, FlameSection, FrSection, Page, TableSection
from rankscope.pictures.why_page import why_page
from rankscope.why.report import CAUSE, PARTIAL, Evidence, GpuFacts, Hypothesis, WhyReport, load_report

DATA = Path(__file__).parent.parent / "data"
SAVED = DATA / "stacks-out-v1" / "plain"
DESYNC = DATA / "fr" / "gloo-torch2.13" / "extra"


def why_json(*args: str) -> tuple[WhyReport, CliResult]:
    result = run_cli("why", *args, "--json")
    assert result.returncode == 15, result.stdout + result.stderr  # a cause named
    return load_report(result.json()), run_cli("why", *args)


def verdict_block(text: str) -> list[str]:
    """The text report's verdict: from ``Verdict:`` to the first blank line."""
    return text.split("\n\n", 1)[1].split("\n\n", 1)[0].splitlines()


def sections(page: Page, kind: type) -> list:
    return [s for s in page.sections if isinstance(s, kind)]


def walk(node: FlameNode) -> list[FlameNode]:
    return [node, *(n for child in node.children for n in walk(child))]


def test_a_hung_job_saved_by_stacks_out() -> None:
    report, text = why_json("--from", str(SAVED))
    page = why_page(report)
    # The verdict exactly as the text report words it: cause and ranks, where, each evidence line with its source.
    assert page.verdict == verdict_block(text.stdout)
    assert page.verdict[0] == "Verdict: rank 1 is elsewhere while the other ranks wait in a collective"
    assert page.verdict[1] == "  where: update_index (hang_job.py:48)"
    assert all(line.startswith("  stacks  ") for line in page.verdict[2:]), page.verdict
    assert re.fullmatch(r"rankscope why — \S+ \(\d+\.\d s\)", page.subtitle), page.subtitle
    # The merged call tree of why's stacks: rank 1's own frames red, the frames both ranks share not.
    (tree,) = sections(page, FlameSection)
    assert "red: only the ranks the verdict names" in tree.title
    frames = {n.name: n for root in tree.roots for n in walk(root)}
    assert frames["update_index"].culprit and frames["update_index"].ranks == "rank 1"
    assert not frames["main"].culprit and frames["main"].count == 2
    assert not frames["sync_gradients"].culprit
    # Every rank's state and what each signal gave, as the text report lists them.
    tables = {t.title: t for t in sections(page, TableSection)}
    ranks = tables["Ranks, merged by equal state"]
    assert [row[:2] for row in ranks.rows] == [[s.ranks, s.state] for s in report.ranks]
    signals = tables["Signals: what each one gave"]
    assert [row[:2] for row in signals.rows] == [
        ["stacks", "read"],
        ["flight recorders", "absent"],
        ["job output", "absent"],
        ["kernel messages", "absent"],
        ["crash and SIGTERM dumps", "absent"],
        ["torchelastic error files", "absent"],
    ]
    assert not sections(page, FrSection)  # no recorder was read


def test_the_recorders_of_a_desync() -> None:
    report, text = why_json("--fr", str(DESYNC))
    page = why_page(report)
    assert page.verdict == verdict_block(text.stdout)
    assert (
        page.verdict[0] == "Verdict: rank 0 issued collectives the other ranks did not (a collective desync)"
    )
    assert page.verdict[2].startswith("  flight recorders  rank 0 issued an extra all_reduce #3")
    assert not sections(page, FlameSection)  # no stacks: the job is gone
    (fr,) = sections(page, FrSection)
    (group,) = fr.groups
    assert group.divergence_seq == 3 and "rank 0" in group.divergence
    assert [lane.ranks for lane in group.lanes] == ["rank 0", "ranks 1-2"]


def test_weaker_hypotheses_gpus_and_failures_below_a_partial_verdict() -> None:
    """Made in memory: this machine has no GPU, so NVML's facts cannot be read here."""
    weaker = Hypothesis(
        cause="gpu_wait",
        text="rank 3 waits for its GPU",
        ranks=[3, 4, 5],
        location="step (train.py:12)",
        kind="observed",
        evidence=[Evidence("stacks", "rank 3 in cudaStreamSynchronize"), Evidence("GPU", "GPU 3 100% busy")],
        next_step="rankscope stacks --native --pid 77",
    )
    report = WhyReport(
        outcome=PARTIAL,
        verdict=weaker,
        hypotheses=[weaker],
        gpus=[GpuFacts(host="node1", index=3, name="H100", utilization=100, ecc_uncorrected=2, pids=[77])],
        failures=[
            Failure("pid 77", Stage.DUMP, "permission denied", "run as root", kind=FailureKind.PERMISSION)
        ],
        notes=["the scheduler says nothing"],
    )
    page = why_page(report)
    assert page.verdict == [
        "Too little evidence to judge: the signals that failed or are absent are listed below"
    ]  # a verdict that is not a named cause is not drawn as one
    tables = {t.title: t for t in sections(page, TableSection)}
    (row,) = tables["Other hypotheses (weaker last)"].rows
    assert row[:3] == ["rank 3 waits for its GPU", "observed", "3-5"]
    assert row[3].splitlines() == [
        "where: step (train.py:12)",
        "stacks  rank 3 in cudaStreamSynchronize",
        "GPU     GPU 3 100% busy",
        "next: rankscope stacks --native --pid 77",
    ]
    assert tables["GPUs"].rows == [["node1", "3", "H100", "100%", "?", "2", "77", ""]]
    assert tables["Failed"].rows == [["pid 77", str(Stage.DUMP), "permission denied", "run as root"]]
    assert page.notes == ["the scheduler says nothing"]
    report.outcome = CAUSE  # the same hypothesis named as the cause: it is the verdict
    assert why_page(report).verdict[0] == "Verdict: rank 3 waits for its GPU"


def test_folded_is_the_same_as_stacks_folded_of_the_same_stacks() -> None:
    why = run_cli("why", "--from", str(SAVED), "--folded")
    stacks = run_cli("stacks", "--from", str(SAVED), "--folded")
    assert why.returncode == 15 and stacks.returncode == 0, why.stderr + stacks.stderr
    assert why.stdout == stacks.stdout and why.stdout.count("\n") == 3, why.stdout
    refused = run_cli("why", "--from", str(SAVED), "--folded", "--json")
    assert refused.returncode == 2 and "--json cannot be used with it" in refused.stderr
    nothing = run_cli("why", "--fr", str(DESYNC), "--folded")  # no stacks: nothing on stdout, one line why
    assert nothing.returncode == 15 and nothing.stdout == ""
    assert "no stacks were read" in nothing.stderr


def test_html_from_a_saved_run(tmp_path: Path) -> None:
    page = tmp_path / "new" / "why.html"
    result = run_cli("why", "--from", str(SAVED), "--html", str(page))
    assert result.returncode == 15 and result.stdout.startswith("rankscope why"), result.stderr
    assert f"page written to {page}" in result.stderr
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    data = json.loads(re.search(r'id="rankscope-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["title"] == "rankscope why" and data["verdict"] == verdict_block(result.stdout)


@pytest.mark.parametrize(
    ("kind", "code", "words"), [("link", 8, "symbolic link"), ("directory", 2, "is a directory")]
)
def test_html_refuses_a_link_or_a_directory_before_anything_runs(
    tmp_path: Path, kind: str, code: int, words: str
) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    page = tmp_path / "page.html"
    if kind == "link":
        page.symlink_to(target)
    else:
        page.mkdir()
    result = run_cli("why", "--from", str(SAVED), "--html", str(page))
    assert result.returncode == code and result.stdout == "", result.stdout + result.stderr
    assert words in result.stderr
    assert target.read_text() == "keep me"


def test_a_secret_in_the_evidence_is_hidden_on_the_page(tmp_path: Path) -> None:
    """A saved run of a real job, and its output whose exception quotes a token: the verdict's
    evidence holds the line; the page holds it with the value hidden, nowhere in full."""
    saved = tmp_path / "saved"
    shutil.copytree(SAVED, saved)
    (saved / "job.log").write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/job/train.py", line 8, in login\n'
        '[rank1]:     raise RuntimeError("hub refused HF_TOKEN=hf_whysecret77")\n'
        "[rank1]: RuntimeError: hub refused HF_TOKEN=hf_whysecret77\n"
    )
    page = tmp_path / "why.html"
    result = run_cli("why", "--from", str(saved), "--html", str(page))
    assert result.returncode == 15 and "HF_TOKEN=hf_whysecret77" in result.stdout, (
        result.stdout + result.stderr
    )
    html = page.read_text()
    assert "hf_whysecret77" not in html
    data = json.loads(re.search(r'id="rankscope-data">(.*?)</script>', html, re.S).group(1))
    hidden = [line.replace("hf_whysecret77", HIDDEN) for line in verdict_block(result.stdout)]
    assert data["verdict"] == hidden and data["verdict"][0].endswith(f"HF_TOKEN={HIDDEN}"), data["verdict"]
