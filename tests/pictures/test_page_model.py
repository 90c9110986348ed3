"""The page model from reports, the writer's escaping and secrets, the page file, collapsed stacks (pure)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from tests.pictures.synthetic import big_fr_dumps, big_report

from rankscope.cli.pictures import check_page_path, write_page
from rankscope.errors import BadInputError
from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps
from rankscope.model import Failure, FailureKind, Frame, Member, Stage
from rankscope.pictures.folded import folded_lines
from rankscope.pictures.fr_page import fr_page
from rankscope.pictures.html import HIDDEN, embed_json, hide_secrets, render_html
from rankscope.pictures.page import FlameNode, FlameSection, GridSection, Page, TableSection
from rankscope.pictures.stacks_page import stacks_page
from rankscope.stacks.render import render_text
from rankscope.stacks.report import GpuStatus, StackGroup

DATA = Path(__file__).parent.parent / "data" / "fr" / "gloo-torch2.13"
#: What a page carries as data: the JSON inside its one ``application/json`` script element.
DATA_BLOCK = re.compile(r'<script type="application/json" id="rankscope-data">(.*?)</script>', re.S)


def page_data(html: str) -> dict:
    blocks = DATA_BLOCK.findall(html)
    assert len(blocks) == 1
    return json.loads(blocks[0])


def flame(page: Page) -> FlameSection:
    return next(s for s in page.sections if isinstance(s, FlameSection))


def chain(node: FlameNode, *names: str) -> FlameNode:
    for name in names:
        node = next(c for c in node.children if c.name == name)
    return node


def test_the_icicle_counts_ranks_and_folds_library_frames_as_the_text_report() -> None:
    report = big_report(1024, 8)
    page = stacks_page(report, report.diagnosis)
    main, heartbeat = flame(page).roots
    assert (main.name, main.count, main.ranks, main.culprit) == (
        "MainThread",
        1024,
        "ranks 0-1023 on node[000-007]",
        False,
    )
    step = chain(main, "<module>", "main", "train_step")
    assert step.count == 1024 - 128
    folded = step.children[0]
    assert folded.name == "… 39 frames in torch" and folded.library and len(folded.folded) == 39
    text = render_text(report, report.diagnosis)
    assert (
        "train_step (train.py:120)\n    │    … 39 frames in torch\n    │    layer_39.forward" in text
    )  # its fold
    layer = chain(folded, "layer_39.forward")
    reduce, load = layer.children
    assert (reduce.name, reduce.count, load.name, load.count) == (
        "sync_gradients",
        1024 - 128 - 2,
        "load_batch",
        2,
    )
    assert load.culprit and not reduce.culprit and load.ranks == "ranks 7,300 on node[000,002]"
    read_shard = chain(load, "read_shard")
    assert (read_shard.where, read_shard.path) == ("data.py:12", "/home/user/job/data.py")
    assert heartbeat.name == "heartbeat-N" and heartbeat.count == 1024
    full = chain(
        flame(stacks_page(report, report.diagnosis, full=True)).roots[0], "<module>", "main", "train_step"
    )
    assert full.children[0].name == "layer_0.forward"  # --full: every frame


def test_several_nodes_get_a_grid_coloured_by_stack_group() -> None:
    report = big_report(1024, 8)
    grid = next(s for s in stacks_page(report, report.diagnosis).sections if isinstance(s, GridSection))
    assert [row.node for row in grid.rows] == [f"node{n:03d}" for n in range(8)]
    assert all(len(row.cells) == 128 for row in grid.rows)
    cells = {cell.rank: cell for row in grid.rows for cell in row.cells}
    assert {rank for rank, cell in cells.items() if cell.culprit} == {"7", "300"}
    assert (
        len({cells[str(r)].group for r in range(896, 1024)}) == 1 and cells["896"].group != cells["0"].group
    )
    assert "barrier" in grid.groups[cells["896"].group]
    one_node = big_report(16, 1)
    assert not any(isinstance(s, GridSection) for s in stacks_page(one_node, one_node.diagnosis).sections)


def test_progress_steps_are_a_table() -> None:
    report = big_report(64, 2, culprits=(5,))
    table = next(s for s in stacks_page(report, report.diagnosis).sections if isinstance(s, TableSection))
    assert table.rows == [
        ["step 41 phase=train", "rank 5 on node000", "3.0s ago"],
        ["step 42 phase=train", "ranks 0-4,6-63 on node[000-001]", "3.0s ago"],
    ]


def test_a_page_of_1024_ranks_stays_under_2_mb() -> None:
    report = big_report(1024, 8)
    dumps = big_fr_dumps(1024, 120)
    verdict = analyse(dumps)
    stacks = render_html(stacks_page(report, report.diagnosis, fr=verdict))
    fr = render_html(fr_page(verdict, "dumps", dumps))
    assert len(stacks.encode()) < 2 << 20 and len(fr.encode()) < 2 << 20, (len(stacks), len(fr))
    # Every rank's lane is there (folded), each with its last 50 collectives around the divergence.
    (group,) = page_data(fr)["sections"][0]["groups"]
    assert [lane["ranks"] for lane in group["lanes"]] == ["rank 7", "ranks 0-6,8-1023"]  # the suspect first
    for lane in group["lanes"]:
        assert (
            len(lane["collectives"]) == 50
            and lane["left_out_before"] == 110 - 50
            and lane["left_out_after"] == 0
        )
        assert [c["seq"] for c in lane["collectives"] if c["diverges"]] == [110]
    assert "last 50 collectives" in page_data(fr)["sections"][0]["note"]
    # Joined to stacks, where each rank is: the live stacks carry no list of collectives.
    joined = next(s for s in page_data(stacks)["sections"] if s["kind"] == "fr")
    assert [(lane["ranks"], lane["summary"]) for lane in joined["groups"][0]["lanes"]] == [
        ("ranks 0-6,8-1023", "enqueued #110 all_reduce from step (train.py:45), completed #109"),
        ("rank 7", "enqueued #110 barrier from main (train.py:63), completed #109"),
    ]


def test_1024_ranks_that_all_differ_keep_fewer_lanes_and_collectives_and_say_so() -> None:
    dumps = big_fr_dumps(1024, 120, distinct=True)
    verdict = analyse(dumps)
    html = render_html(fr_page(verdict, "dumps", dumps))
    assert len(html.encode()) < 512 << 10, len(html)
    section = page_data(html)["sections"][0]
    lanes = section["groups"][0]["lanes"]
    drawn, rest = lanes[:-1], lanes[-1]
    assert len(drawn) == 256 and drawn[0]["ranks"] == "rank 7"  # the suspect's lane first
    assert [lane["ranks"] for lane in drawn[1:4]] == ["rank 0", "rank 1", "rank 2"]
    keep = 4000 // 257
    assert all(len(lane["collectives"]) == keep and lane["left_out_before"] == 110 - keep for lane in drawn)
    assert all(lane["collectives"][-1]["diverges"] for lane in drawn)
    assert rest == {
        "ranks": "ranks 256-1023",
        "collectives": [],
        "left_out_before": 0,
        "left_out_after": 0,
        "summary": "768 more different lanes, left out",
    }
    assert section["note"].startswith(
        f"each rank's last {keep} collectives of each group around its first divergence"
    )


def test_fr_lanes_of_a_real_dump_mark_the_divergence() -> None:
    collected = read_dumps(DATA / "extra")
    report = analyse(collected.dumps)
    page = fr_page(report, "extra", collected.dumps)
    (group,) = page.sections[0].groups  # type: ignore[union-attr]
    assert group.divergence_seq == 3 and group.divergence == report.divergences[0].text
    assert [(lane.ranks, [(c.op, c.diverges) for c in lane.collectives]) for lane in group.lanes] == [
        (
            "rank 0",
            [("all_reduce", False), ("all_reduce", False), ("all_reduce", True), ("all_reduce", False)],
        ),
        (
            "ranks 1-2",
            [("all_reduce", False), ("all_reduce", False), ("all_reduce", True), ("barrier", False)],
        ),
    ]
    assert page.verdict == [report.headline]


HOSTILE = [
    "</script><script>alert(1)</script>",
    "</SCRIPT >",
    "<!--<script>",
    "a\u2028b\u2029c",
    "&lt;b&gt; & <b>",
    "${x}`;\"'\\",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_cannot_leave_the_data_block(name: str) -> None:
    report = big_report(8, 2, culprits=(3,))
    report.groups[2] = StackGroup(
        "MainThread", True, (Frame(name, f"/x/{name}.py", 1),), report.groups[2].members
    )
    html = render_html(stacks_page(report, report.diagnosis))
    body = html.split('id="rankscope-data">', 1)[1]
    assert "<" not in body.split("</script>", 1)[0]  # nothing in the data can open or close an element
    assert html.count("</script>") == 2 and html.lower().count("<script") == 2
    data = page_data(html)
    assert name in [node["name"] for node in _nodes(data["sections"][0]["roots"])]


def _nodes(nodes: list[dict]) -> list[dict]:
    return [n for node in nodes for n in [node, *_nodes(node["children"])]]


def test_embedded_json_reads_back_the_same() -> None:
    value = {"names": HOSTILE, "n": [1, 2.5, None, True]}
    assert json.loads(embed_json(value)) == value


@pytest.mark.parametrize(
    "text,hidden",
    [
        ("HF_TOKEN=hf_abc123", "HF_TOKEN=" + HIDDEN),
        ("python train.py --api-key=sk-1 --lr 3", "python train.py --api-key=" + HIDDEN + " --lr 3"),
        (
            "AWS_SECRET_ACCESS_KEY=xyz WANDB_MODE=offline",
            "AWS_SECRET_ACCESS_KEY=" + HIDDEN + " WANDB_MODE=offline",
        ),
        ("password: hunter2", "password: " + HIDDEN),
        ("all_reduce (train.py:70)", "all_reduce (train.py:70)"),
        (
            "encode (transformers/tokenization_utils_base.py:2345)",
            "encode (transformers/tokenization_utils_base.py:2345)",
        ),
        ("login (auth.py:12)", "login (auth.py:12)"),
    ],
)
def test_secret_looking_values_are_hidden(text: str, hidden: str) -> None:
    assert hide_secrets(text) == hidden


def test_a_page_carries_no_secret_from_the_report() -> None:
    report = big_report(8, 2, culprits=(3,))
    report.groups[3].thread = "worker HF_TOKEN=hf_leak42"
    report.failures = []
    html = render_html(stacks_page(report, report.diagnosis))
    assert "hf_leak42" not in html and "HF_TOKEN=" in html


def test_the_page_file_is_private_and_never_written_through_a_link(tmp_path: Path) -> None:
    page = Page("t", "s", ["v"])
    path = tmp_path / "p.html"
    path.write_text("old")
    os.chmod(path, 0o644)
    write_page(path, page)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "<!DOCTYPE html>" in path.read_text()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "link.html"
    link.symlink_to(victim)
    for check in (check_page_path, lambda p: write_page(p, page)):
        with pytest.raises(BadInputError, match="symbolic link"):
            check(link)
    assert victim.read_text() == "keep"
    with pytest.raises(BadInputError, match="not a regular file"):
        check_page_path(tmp_path)


def test_folded_lines_sum_samples_and_keep_the_separator_out() -> None:
    a = Member("h", 1, 0)
    b = Member("h", 2, 1)
    frames = (Frame("<module>", "/j/t.py", 1), Frame("f;g", "/j/t.py", 2))
    one = [StackGroup("Main;Thread", True, frames, [a, b])]
    other = [StackGroup("Main;Thread", True, frames[:1], [a]), StackGroup("Main;Thread", True, frames, [b])]
    assert folded_lines([one]) == ["Main,Thread;<module> (t.py:1);f,g (t.py:2) 2"]
    assert folded_lines([one, other]) == [
        "Main,Thread;<module> (t.py:1) 1",
        "Main,Thread;<module> (t.py:1);f,g (t.py:2) 3",
    ]


def test_gpus_and_failures_are_tables() -> None:
    """GPUs come from NVML or nvidia-smi, which this machine has not: the report's entries are made up."""
    report = big_report(8, 2, culprits=(3,))
    report.gpus = [GpuStatus("node000", 0, "NVIDIA H100 80GB HBM3", 0, 1024, 81559, "NVML")]
    report.failures = [
        Failure("node001 pid 10005", Stage.DUMP, "py-spy timed out", "retry", kind=FailureKind.TIMED_OUT)
    ]
    tables = {
        s.title: s for s in stacks_page(report, report.diagnosis).sections if isinstance(s, TableSection)
    }
    assert tables["GPUs"].rows == [
        ["node000", "0", "NVIDIA H100 80GB HBM3", "0%", "1024 / 81559 MiB", "NVML"]
    ]
    assert tables["Failed"].rows == [["node001 pid 10005", str(Stage.DUMP), "py-spy timed out", "retry"]]
