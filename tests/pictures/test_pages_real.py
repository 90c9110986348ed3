"""The pages of real reports in a real browser, and the collapsed stacks of a real hung job.

One hung 2-rank gloo job (rank 1 loops in load_batch at step 2, rank 0 waits in all_reduce at
step 1) with a thread whose name is hostile markup, and a secret in its environment; one
headless Chromium for every page of the module (tests/pictures/browser.py).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.pictures.browser import Browser, colours, running_browser
from tests.pictures.rings import traced_ranks
from tests.support.cli import CliResult, run_cli
from tests.support.cluster_fixtures import REMOTE_RANKSCOPE, run_via
from tests.support.jobs import torchrun_job
from tests.support.sshd import Sshd, free_port

from rankscope.demo.launch import HANG_JOB, LaunchedJob

DATA = Path(__file__).parent.parent / "data"
#: A thread name that would run script if a page put it in as markup; the ``;`` is the folded format's separator.
HOSTILE = "</script><img src=x onerror=\"document.title='pwned'\">;x"
SECRET = "hf_pagesecret4242"
#: Folded stacks: frames separated by ``;`` (none empty, none with a line break), a space, a count.
FOLDED_LINE = re.compile(r"^[^;\n]+(?:;[^;\n]+)* (\d+)$")

WRAPPER = """\
import runpy, sys, threading
threading.Thread(target=threading.Event().wait, name={name!r}, daemon=True).start()
sys.argv = [{job!r}, *sys.argv[1:]]
runpy.run_path({job!r}, run_name="__main__")
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    workdir = tmp_path_factory.mktemp("pictures-job")
    script = workdir / "hostile_job.py"
    script.write_text(WRAPPER.format(name=HOSTILE, job=str(HANG_JOB)))
    env = dict(os.environ, HF_TOKEN=SECRET)
    with torchrun_job(workdir, "--scenario", "steps", "--culprit", "1", script=script, env=env) as launched:
        yield launched


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield from running_browser(tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture(scope="module")
def stacks_page(job: LaunchedJob, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CliResult]:
    page = tmp_path_factory.mktemp("pages") / "stacks.html"
    result = run_cli("stacks", "--pid", str(job.process.pid), "--html", str(page), "--no-color")
    assert result.returncode == 0, result.stdout + result.stderr
    return page, result


def folded(result: CliResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in result.stdout.splitlines():
        match = FOLDED_LINE.match(line)
        assert match, f"not a folded line: {line!r}"
        stack = line[: match.start(1) - 1]
        assert stack not in counts, f"stack printed twice: {stack}"
        counts[stack] = int(match.group(1))
    return counts


def test_folded_stacks_count_ranks_or_rank_samples(job: LaunchedJob, tmp_path: Path) -> None:
    one = run_cli("stacks", "--pid", str(job.process.pid), "--folded")
    assert one.returncode == 0, one.stderr
    stacks = folded(one)
    main = {s: n for s, n in stacks.items() if s.startswith("MainThread;")}
    assert sum(main.values()) == 2 and len(main) == 2, stacks
    culprit = next(s for s in main if "load_batch (hang_job.py:" in s)
    assert culprit.split(";")[1].startswith("<module> (hostile_job.py:"), culprit  # outermost first
    # The hostile thread: its name is the outermost frame, its ';' no longer splits it.
    hostile = [s for s in stacks if s.startswith("</script><img")]
    assert len(hostile) == 1 and stacks[hostile[0]] == 2, stacks
    assert hostile[0].split(";")[0] == HOSTILE.replace(";", ",")
    # Library frames folded as the text report folds them, every frame with --full.
    assert any("frames in " in s for s in stacks)
    full = folded(run_cli("stacks", "--pid", str(job.process.pid), "--folded", "--full"))
    assert not any(" frames in " in s for s in full) and sum(full.values()) == sum(stacks.values())
    assert max(s.count(";") for s in full) > max(s.count(";") for s in stacks)
    # With --out, stdout still holds only folded lines; the text report is kept.
    out = tmp_path / "out"
    kept = run_cli("stacks", "--pid", str(job.process.pid), "--folded", "--out", str(out))
    assert sum(folded(kept).values()) == sum(stacks.values()) and str(out) in kept.stderr
    assert "Diagnosis" in (out / "report.txt").read_text()
    # Three samples: rank-samples.
    sampled = folded(
        run_cli("stacks", "--pid", str(job.process.pid), "--folded", "--samples", "3", "--interval", "0.1")
    )
    assert sum(n for s, n in sampled.items() if s.startswith("MainThread;")) == 6, sampled


def test_why_folded_of_the_hung_job_keeps_its_bundle(job: LaunchedJob, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    result = run_cli("why", "--pid", str(job.process.pid), "--folded", "--out", str(bundle))
    assert result.returncode == 15, result.stdout + result.stderr  # why's exit code: a cause named
    stacks = folded(result)  # stdout holds only folded lines
    main = {s: n for s, n in stacks.items() if s.startswith("MainThread;")}
    assert sum(main.values()) == 2 and any("load_batch (hang_job.py:" in s for s in main), stacks
    assert f"bundle: {bundle}/" in result.stderr
    assert (bundle / "report.txt").read_text().split("\n\n", 2)[1].startswith("Verdict: rank 1 ")


def test_folded_and_json_are_refused_together(job: LaunchedJob) -> None:
    result = run_cli("stacks", "--pid", str(job.process.pid), "--folded", "--json")
    assert result.returncode == 2 and "--json cannot be used with it" in result.stderr


@pytest.mark.needs("chromium")
def test_stacks_page_in_a_browser(stacks_page: tuple[Path, CliResult], browser: Browser) -> None:
    page, result = stacks_page
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    html = page.read_text()
    assert SECRET not in html and len(html) < 200_000
    requests = browser.tab.open(page)
    assert requests == [page.resolve().as_uri()], requests  # the document itself, nothing else
    assert browser.tab.errors == []  # no script error, nothing refused
    tab = browser.tab
    assert tab.evaluate("document.body.dataset.drawn") == "yes"
    # The verdict as the text report words it.
    diagnosis = result.stdout.split("\nDiagnosis\n", 1)[1].split("\n\n", 1)[0]
    expected = [line.strip() for line in diagnosis.splitlines()]
    shown = tab.evaluate("[...document.querySelectorAll('#verdict p')].map(p => p.textContent)")
    assert shown == expected and any("rank 1" in line for line in shown), (shown, expected)
    # The icicle: widths are rank counts; the culprit's own frames red, the shared ones not.
    frames = tab.evaluate(
        "[...document.querySelectorAll('.fn')].map(e => [e.textContent, e.className, e.style.width])"
    )
    by_name = {name: (cls, width) for name, cls, width in frames}
    assert by_name["MainThread"] == ("fn root", "100%")
    assert "cul" in by_name["load_batch"][0] and by_name["load_batch"][1] == "50%"
    assert "cul" not in by_name["main"][0]
    assert any("frames in" in name and " lib" in cls for name, cls, _ in frames)  # library frames folded
    # The hostile thread name is text in the page; it made no element and ran nothing.
    assert HOSTILE in [name for name, _, _ in frames]
    assert tab.evaluate("document.querySelectorAll('img').length") == 0
    assert "pwned" not in tab.evaluate("document.title")
    # Progress steps where the ranks record them.
    cells = tab.evaluate("[...document.querySelectorAll('table.facts td')].map(td => td.textContent)")
    assert "step 1 phase=train" in cells and "step 2 phase=train" in cells, cells
    # Drawn, not blank: the culprit's red and the frames' orange are on the screen.
    seen = colours(tab.screenshot())
    assert seen.get((224, 49, 49), 0) > 20 and seen.get((242, 166, 90), 0) > 20, sorted(seen.items())[:20]


@pytest.mark.needs("chromium")
def test_a_click_on_a_frame_shows_its_ranks_and_source_line(
    stacks_page: tuple[Path, CliResult], browser: Browser
) -> None:
    page, _ = stacks_page
    browser.tab.open(page)
    detail = "document.getElementById('frame-detail').textContent"
    assert "Click a frame" in browser.tab.evaluate(detail)
    index = browser.tab.evaluate(
        "[...document.querySelectorAll('.fn')].findIndex(e => e.textContent === 'load_batch')"
    )
    browser.tab.click(f".fn:nth-child({index + 1})")
    text = browser.tab.evaluate(detail)
    line = re.search(r"at (\S+hang_job\.py):(\d+)", text)
    assert line and Path(line.group(1)) == HANG_JOB, text
    source = HANG_JOB.read_text().splitlines()[int(line.group(2)) - 1]
    assert "load_batch" in source or "while" in source or "sleep" in source, source
    assert "1 rank: rank 1" in text and "includes ranks the diagnosis names" in text, text
    assert browser.tab.evaluate("document.querySelectorAll('.fn.sel').length") == 1


@pytest.mark.needs("chromium")
def test_why_page_of_the_hung_job_and_of_its_bundle(
    job: LaunchedJob, browser: Browser, tmp_path: Path
) -> None:
    """`why --pid --out --html` on the job (HF_TOKEN in its environment), then `why --from` its bundle."""
    live, bundle = tmp_path / "why.html", tmp_path / "bundle"
    result = run_cli("why", "--pid", str(job.process.pid), "--out", str(bundle), "--html", str(live))
    assert result.returncode == 15, result.stdout + result.stderr  # a cause named
    verdict = result.stdout.split("\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert verdict[0].startswith("Verdict: rank 1 "), result.stdout
    saved = tmp_path / "saved.html"
    again = run_cli("why", "--from", str(bundle), "--html", str(saved))
    assert again.returncode == 15 and f"page written to {saved}" in again.stderr, again.stdout + again.stderr
    assert again.stdout.split("\n\n", 2)[1].splitlines() == verdict
    for page in (live, saved):
        assert stat.S_IMODE(page.stat().st_mode) == 0o600
        assert SECRET not in page.read_text()
        tab = browser.tab
        assert tab.open(page) == [page.resolve().as_uri()] and tab.errors == []  # fetches nothing
        assert tab.evaluate("document.body.dataset.drawn") == "yes"
        # The verdict in the DOM is the text report's, line by line (evidence with its source).
        shown = tab.evaluate("[...document.querySelectorAll('#verdict p')].map(p => p.textContent)")
        assert shown == verdict, (shown, verdict)
        # The culprit rank's own frames red in the merged call tree, the frames both ranks share not.
        frames = tab.evaluate("[...document.querySelectorAll('.fn')].map(e => [e.textContent, e.className])")
        by_name = dict(frames)
        assert "cul" in by_name["load_batch"] and "cul" not in by_name["main"], frames
        assert HOSTILE in by_name and tab.evaluate("document.querySelectorAll('img').length") == 0
        tab.click(f".fn:nth-child({[name for name, _ in frames].index('load_batch') + 1})")
        detail = tab.evaluate("document.getElementById('frame-detail').textContent")
        assert "1 rank: rank 1" in detail and "includes ranks the verdict names" in detail, detail
        # What each signal gave, as the text report lists it.
        cells = tab.evaluate("[...document.querySelectorAll('table.facts td')].map(td => td.textContent)")
        assert "stacks" in cells and "step 2 phase=train" in cells, cells
    assert not any(SECRET in f.read_text(errors="replace") for f in bundle.rglob("*") if f.is_file())


@pytest.mark.needs("chromium")
def test_fr_page_marks_the_first_divergence(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "fr.html"
    result = run_cli("fr", str(DATA / "fr" / "gloo-torch2.13" / "extra"), "--html", str(page))
    assert result.returncode == 14, result.stdout + result.stderr  # desync
    assert browser.tab.open(page) == [page.resolve().as_uri()] and browser.tab.errors == []
    lanes = browser.tab.evaluate(
        "[...document.querySelectorAll('.lane')].map(l => [l.querySelector('.who').textContent,"
        " [...l.querySelectorAll('.op')].map(o => [o.textContent, o.classList.contains('div')])])"
    )
    assert lanes == [
        ["rank 0", [["#1 all_reduce", False], ["#2 all_reduce", False], ["#3 all_reduce", True], ["#4 all_reduce", False]]],
        ["ranks 1-2", [["#1 all_reduce", False], ["#2 all_reduce", False], ["#3 all_reduce", True], ["#4 barrier", False]]],
    ]  # fmt: skip
    verdict = browser.tab.evaluate("document.querySelector('#verdict p').textContent")
    assert verdict == result.stdout.split("\nVerdict\n", 1)[1].splitlines()[0].strip()


@pytest.mark.needs("chromium", "ssh")
def test_net_check_page_is_a_heatmap(sshd_nodes: Sshd, browser: Browser, tmp_path: Path) -> None:
    """A real net check over ssh to 127.0.0.1: node02 is probed at ::1, where nothing listens (the
    listeners bind 0.0.0.0, IPv4), and closedport's ssh login is refused."""
    page = tmp_path / "net.html"
    port = free_port()
    result = run_via(
        sshd_nodes, "net check", "--hosts", "node01,node02,closedport",
        "--address", "node01=127.0.0.1", "--address", "node02=::1", "--address", "closedport=127.0.0.3",
        "--remote-rankscope", REMOTE_RANKSCOPE, "--port", str(port), "--window", "1", "--html", str(page),
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 4, result.stdout + result.stderr
    assert browser.tab.open(page) == [page.resolve().as_uri()] and browser.tab.errors == []
    rows = browser.tab.evaluate(
        "[...document.querySelectorAll('table.heat tr')].map(r => [...r.children].map(c => c.textContent))"
    )
    text_rows = [line.split() for line in result.stdout.splitlines()[1:5]]  # the text report's matrix
    assert rows[0] == ["from \\ to", *text_rows[0][3:]]
    assert sorted(rows[0][1:]) == ["closedport", "node01", "node02"]
    assert [row[1:] for row in rows[1:]] == [row[1:] for row in text_rows[1:]]  # the same cells
    silent = next(row for row in rows if row[0] == "closedport")
    assert silent[1:] == ["-", "-", "-"]  # its ssh login is refused: it never ran the probes
    assert browser.tab.evaluate("document.querySelectorAll('table.heat td.good').length") >= 2
    assert (
        browser.tab.evaluate("document.querySelectorAll('table.heat td.bad').length") == 2
    )  # node01 and node02 -> node02
    verdict = browser.tab.evaluate("[...document.querySelectorAll('#verdict p')].map(p => p.textContent)")
    findings = result.stdout.split("\nFindings\n", 1)[1].splitlines()
    assert verdict == [line.strip() for line in findings if line.strip()], (verdict, findings)
    assert verdict[0].startswith("node01 -> node02:") and "refused" in verdict[0]
    notes = browser.tab.evaluate("[...document.querySelectorAll('p.note')].map(p => p.textContent)")
    assert any("closedport did not run the probes" in n for n in notes), notes


@pytest.mark.needs("chromium")
def test_the_network_log_sees_a_page_that_fetches(browser: Browser, tmp_path: Path) -> None:
    """The check above can fail: a page that loads an image is caught fetching it."""
    page = tmp_path / "fetches.html"
    page.write_text(f'<!DOCTYPE html><img src="http://127.0.0.1:{free_port()}/x.png"><p>x</p>')
    requests = browser.tab.open(page)
    assert len(requests) == 2 and requests[1].startswith("http://127.0.0.1:"), requests
    assert browser.tab.errors  # and the failed load is logged: the error check above can fail too


def test_html_refuses_a_symbolic_link(job: LaunchedJob, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    link = tmp_path / "page.html"
    link.symlink_to(target)
    result = run_cli("stacks", "--pid", str(job.process.pid), "--html", str(link))
    assert result.returncode == 8 and "symbolic link" in result.stderr, result.stderr
    assert target.read_text() == "keep me" and result.stdout == ""


@pytest.mark.needs("chromium")
def test_trace_export_timeline_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    traces = traced_ranks(tmp_path)
    page = tmp_path / "trace.html"
    result = run_cli("trace", "export", str(traces), "--out", str(tmp_path / "job.json"), "--html", str(page))
    assert result.returncode == 0, result.stdout + result.stderr
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert browser.tab.open(page) == [page.resolve().as_uri()]  # the document itself, nothing else
    assert browser.tab.errors == []
    tab = browser.tab
    assert tab.evaluate("document.body.dataset.drawn") == "yes"
    rows = tab.evaluate(
        "[...document.querySelectorAll('.timeline .tl-row:not(.tl-axis)')].map(r => [r.dataset.rank,"
        " [...r.querySelectorAll('.sl.open')].map(s => s.textContent),"
        " r.querySelectorAll('.sl:not(.open)').length, r.querySelectorAll('.tick').length])"
    )
    host = rows[0][0].rsplit(":", 1)[0]
    assert [row[0] for row in rows] == [f"{host}:0", f"{host}:1"], rows
    for _, still, ended, ticks in rows:
        assert still == ["wait_for_peer ⟶"], still  # drawn to the ring's end and marked
        assert ended >= 15 and ticks == 5  # 5 steps of load_batch, forward, train_step
    # rank 1 loads slower: its load_batch bars are wider on the same axis
    widths = tab.evaluate(
        "[...document.querySelectorAll('.timeline .tl-row:not(.tl-axis)')].map(r => [...r.querySelectorAll('.sl')]"
        ".filter(s => s.textContent === 'load_batch').map(s => s.getBoundingClientRect().width))"
    )
    assert min(widths[1]) > max(widths[0]), widths
    # Every pixel: a slice's width follows the traced durations, and a narrow one falls between the
    # every-4th-pixel samples (a machine under load made 5 samples of blue where 6 were asked for).
    seen = colours(tab.screenshot(), step=1)
    assert seen.get((255, 169, 77), 0) > 0 and seen.get((116, 192, 252), 0) > 5, sorted(seen.items())[:20]


def test_trace_export_html_refuses_a_symbolic_link_before_exporting(tmp_path: Path) -> None:
    traces = traced_ranks(tmp_path)
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    link = tmp_path / "trace.html"
    link.symlink_to(target)
    out = tmp_path / "job.json"
    result = run_cli("trace", "export", str(traces), "--out", str(out), "--html", str(link))
    assert result.returncode == 8 and "symbolic link" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert target.read_text() == "keep me" and not out.exists()
