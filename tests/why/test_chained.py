"""`why --log` on an error raised while handling another (``raise RuntimeError(...) from e``, or an
exception inside an ``except`` block): the earlier exception, often the real reason (the file that
was missing), is cited right after the error. The log is written here as Python prints such a
chain under torchrun (each line with torch's ``[rankN]:`` marker); no job is needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

CAUSE = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 10, in load
[rank1]:     state = torch.load(path)
[rank1]:   File "/usr/lib/python3/dist-packages/torch/serialization.py", line 1065, in load
[rank1]:     with _open_file_like(f, "rb") as opened_file:
[rank1]: FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/step_4000.pt'
[rank1]:\x20
[rank1]: {joint}
[rank1]:\x20
"""
ERROR = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 30, in <module>
[rank1]:     main()
[rank1]:   File "/work/train.py", line 20, in main
[rank1]:     load(args.resume)
[rank1]:   File "/work/train.py", line 12, in load
[rank1]:     raise RuntimeError("could not resume")
[rank1]: RuntimeError: could not resume
"""


@pytest.mark.parametrize(
    "joint",
    [
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
    ],
)
def test_the_exception_it_was_raised_from_is_cited_after_the_error(tmp_path: Path, joint: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(CAUSE.format(joint=joint) + ERROR)
    document = run_cli_here("why", "--log", str(log), "--json").json()
    verdict = document["verdict"]
    assert verdict["text"] == "rank 1 raised RuntimeError: could not resume"
    assert verdict["location"] == "load (train.py:12)"
    texts = [e["text"] for e in verdict["evidence"]]
    at = texts.index("RuntimeError: could not resume")
    assert (
        texts[at + 1]
        == "while handling: FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/step_4000.pt'"
    )


def test_an_error_alone_cites_nothing_more(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(ERROR)
    texts = [
        e["text"] for e in run_cli_here("why", "--log", str(log), "--json").json()["verdict"]["evidence"]
    ]
    assert not any(t.startswith("while handling") for t in texts), texts
