"""The pictures of docs/pictures.md, made from real runs: PNGs of the `--html` pages in headless Chromium.

    python bench/make_pictures.py            # writes docs/pictures/*.png (root, Debian: apt-get install chromium)

- stacks.png: `rankscope stacks --pid L --html` of a real hung 4-rank torchrun job (gloo, CPU;
  rankscope's demo job, `--scenario steps --culprit 2`: rank 2 loops in load_batch, the others wait
  in all_reduce, each rank at its own step), with its culprit frame clicked;
- why.png: `rankscope why --pid L --html` of the same job: the verdict with its evidence, the tree with
  rank 2's frames red, the ranks' states and the signals;
- fr.png: `rankscope fr --html` of the dumps of a real 3-rank gloo job (tests/data/fr, scenario extra);
- net.png: `rankscope net check --html` over ssh to sshd on 127.0.0.1: node01 probed at 127.0.0.1,
  node02 at ::1 (the listeners bind 0.0.0.0, IPv4 only: refused), node03's ssh login refused;
- trace.png: `rankscope trace export --html` of a real 2-rank torchrun job (gloo, CPU) traced with
  rankscope.trace, torch.distributed included (TRACED below): five steps, rank 1 slower to load its
  batches; at step 6 rank 1 never finishes loading and rank 0 waits in all_reduce, their open calls
  drawn to the end of the rings;
- grid.png: the node-by-rank grid of a 1,024-rank report made up in memory (tests/pictures/synthetic.py:
  one machine cannot run a job on 8 nodes), as bench/bench_html.py measures it.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pictures.browser import Tab, running_browser  # noqa: E402
from tests.support.sshd import free_port, start_sshd  # noqa: E402

from rankscope.demo.launch import start_torchrun  # noqa: E402
from rankscope.pictures.html import render_html  # noqa: E402
from rankscope.pictures.stacks_page import stacks_page  # noqa: E402

OUT = ROOT / "docs" / "pictures"
RANKSCOPE = [sys.executable, "-m", "rankscope"]
#: A 2-rank training loop traced from its first line (torch.distributed's calls too): rank 1 loads
#: its batches slower, and at step 6 never finishes loading; rank 0 waits for it in all_reduce.
TRACED = """\
import os, time
from pathlib import Path
import torch, torch.distributed as dist
import rankscope, rankscope.trace as rt

rt.start(out={out!r}, include=["torch.distributed"])

def load_batch(rank, step):
    time.sleep(0.02 * (1 + 2 * rank))
    while rank == 1 and step == 6:
        time.sleep(0.05)

def forward(t):
    return (t @ t).sum()

def sync_gradients(t):
    dist.all_reduce(t)

def train():
    rank = dist.get_rank()
    t = torch.ones(64, 64)
    for step in range(1, 8):
        if step == 6:
            Path(os.environ["RANKSCOPE_READY_DIR"], f"ready.{{rank}}").touch()
        load_batch(rank, step)
        forward(t)
        sync_gradients(t)
        rankscope.progress(step=step)

dist.init_process_group("gloo")
train()
"""


def rankscope(*args: str) -> None:
    done = subprocess.run([*RANKSCOPE, *args], capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 4, 14, 15):
        raise SystemExit(f"rankscope {' '.join(args)} exited {done.returncode}: {done.stderr}")


def shoot(tab: Tab, page: Path, name: str, selector: str = "", height: int = 0, click: str = "") -> None:
    tab.open(page)
    if click:
        index = tab.evaluate(
            f"[...document.querySelectorAll('.fn')].findIndex(e => e.textContent === {click!r})"
        )
        tab.click(f".fn:nth-child({index + 1})")
    top = 0.0
    if selector:
        top = float(
            tab.evaluate(f"document.querySelector({selector!r}).getBoundingClientRect().top + scrollY")
        )
    full = float(tab.evaluate("document.documentElement.scrollHeight"))
    clip = {"x": 0, "y": top, "width": 1280, "height": min(height or full, full - top), "scale": 1}
    shot = tab.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
    (OUT / name).write_bytes(base64.b64decode(shot["data"]))
    print(f"wrote {OUT / name}")


def traced_job(work: Path) -> None:
    """trace.html: the rings of a hung 2-rank job, exported while it hangs."""
    (work / "traced").mkdir()
    script = work / "traced" / "traced_job.py"
    script.write_text(TRACED.format(out=str(work / "traces")))
    job = start_torchrun(script, nproc=2, workdir=work / "traced")
    try:
        job.wait_ready(timeout=180, settle=2.0)
        rankscope(
            "trace", "export", str(work / "traces"), "--out", str(work / "trace.json"),
            "--html", str(work / "trace.html"),
        )  # fmt: skip
    finally:
        job.stop()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rankscope-pictures-") as tmp:
        work = Path(tmp)
        job = start_torchrun(
            nproc=4, script_args=("--scenario", "steps", "--culprit", "2"), workdir=work / "job"
        )
        try:
            job.wait_ready(timeout=180)
            rankscope("stacks", "--pid", str(job.process.pid), "--html", str(work / "stacks.html"))
            rankscope("why", "--pid", str(job.process.pid), "--html", str(work / "why.html"))
        finally:
            job.stop()
        traced_job(work)
        data = ROOT / "tests" / "data" / "fr" / "gloo-torch2.13" / "extra"
        rankscope("fr", str(data), "--html", str(work / "fr.html"))
        sshd = start_sshd(work / "sshd", ["node01", "node02"])
        try:
            sshd.add_alias("node03", Port=str(free_port()))
            rankscope(
                "net", "check", "--via", "ssh", "--ssh-config", str(sshd.ssh_config), "--hosts", "node[01-03]",
                "--address", "node01=127.0.0.1", "--address", "node02=::1", "--address", "node03=127.0.0.3",
                "--remote-rankscope", str(Path(sys.executable).with_name("rankscope")), "--port", str(free_port()),
                "--window", "1", "--html", str(work / "net.html"),
            )  # fmt: skip
        finally:
            sshd.stop()
        from tests.pictures.synthetic import big_report

        report = big_report(1024, 8)
        (work / "big.html").write_text(render_html(stacks_page(report, report.diagnosis)))
        for browser in running_browser(work / "profile"):
            shoot(browser.tab, work / "stacks.html", "stacks.png", click="load_batch")
            shoot(browser.tab, work / "why.html", "why.png")
            shoot(browser.tab, work / "fr.html", "fr.png")
            shoot(browser.tab, work / "net.html", "net.png")
            shoot(browser.tab, work / "trace.html", "trace.png")
            shoot(browser.tab, work / "big.html", "grid.png", selector="section.grid", height=330)


if __name__ == "__main__":
    main()
