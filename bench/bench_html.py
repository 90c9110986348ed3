"""The `--html` pages at 1,024 ranks: their size, the time to make them, and the time headless Chromium
takes to show them, from navigation start to the load event (``performance.timing``).

    python bench/bench_html.py                 # 1,024 ranks on 8 nodes, 5 loads of each page
    python bench/bench_html.py --ranks 4096 --nodes 32 --runs 3

The reports are made up in memory (tests/pictures/synthetic.py): a stacks report of RANKS ranks on
NODES nodes (three main-thread stacks, 40 torch frames deep, two culprit ranks, a heartbeat thread,
progress markers) with a flight-recorder verdict joined, and the `fr` page of every rank's recorder
(120 collectives each, rank 7 diverging at #110), and the same where every rank's lane differs (its
earlier collectives issued from a line of its own: the worst case for the page's size). Each page is written once and loaded RUNS times in
one browser (a fresh navigation each time; the first load, which warms the browser, is not counted).
Chromium is Debian's (`apt-get install chromium`), driven over its remote-debugging protocol.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pictures.browser import running_browser  # noqa: E402
from tests.pictures.synthetic import big_fr_dumps, big_report  # noqa: E402

from rankscope.fr.align import analyse  # noqa: E402
from rankscope.pictures.fr_page import fr_page  # noqa: E402
from rankscope.pictures.html import render_html  # noqa: E402
from rankscope.pictures.stacks_page import stacks_page  # noqa: E402

LOAD_TIME = "performance.timing.loadEventEnd - performance.timing.navigationStart"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    report = big_report(args.ranks, args.nodes)
    dumps = big_fr_dumps(args.ranks, 120)
    verdict = analyse(dumps)
    distinct = big_fr_dumps(args.ranks, 120, distinct=True)
    distinct_verdict = analyse(distinct)
    with tempfile.TemporaryDirectory(prefix="bench-html-") as tmp:
        pages = {}
        for name, build in (
            ("stacks", lambda: stacks_page(report, report.diagnosis, fr=verdict)),
            ("fr", lambda: fr_page(verdict, "dumps", dumps)),
            ("fr-all-differ", lambda: fr_page(distinct_verdict, "dumps", distinct)),
        ):
            start = time.perf_counter()
            text = render_html(build())
            made = time.perf_counter() - start
            path = Path(tmp) / f"{name}.html"
            path.write_text(text)
            pages[name] = (path, len(text.encode()), made)
        for browser in running_browser(Path(tmp) / "profile"):
            tab = browser.tab
            for name, (path, size, made) in pages.items():
                tab.open(path)  # warm-up
                loads = []
                for _ in range(args.runs):
                    tab.open(path)
                    loads.append(float(tab.evaluate(LOAD_TIME)))
                assert tab.evaluate("document.body.dataset.drawn") == "yes"
                print(
                    f"{name:13} {args.ranks} ranks on {args.nodes} nodes: {size / 1024:.0f} KiB, made in "
                    f"{made * 1000:.0f} ms, navigation start to load event: median "
                    f"{statistics.median(loads):.0f} ms (min {min(loads):.0f}, max {max(loads):.0f}, "
                    f"{args.runs} loads)"
                )


if __name__ == "__main__":
    main()
