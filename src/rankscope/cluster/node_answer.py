"""The head's reading of a node's answer to ``stacks --local --json --node-answer``.

A node answers with its raw material (``rankscope.stacks.node/1``, rankscope.stacks.node): its
report without groups, states or diagnosis, and py-spy's own dump of every process it dumped. The
groups and states are derived here, once per node, by the same reading of raw dumps as
``stacks --from DIR`` (rankscope.stacks.saved.from_dumps); the diagnosis is made once over every
node's report after the merge, as before. A node that ran the full pipeline (``--native``, live
flight recorders), or an older rankscope, answers with the whole ``rankscope.stacks`` document,
read as it always was.
"""

from __future__ import annotations

from typing import Any

from rankscope.serial import load_document
from rankscope.stacks.node import NodeAnswer
from rankscope.stacks.report import StacksReport, load_report
from rankscope.stacks.saved import from_dumps

#: The schema name of a node's raw answer, without its version.
NODE_SCHEMA = NodeAnswer.SCHEMA.rsplit("/", 1)[0]


def load_answer(data: Any) -> StacksReport:
    """A node's answer (the raw one, or the whole ``rankscope.stacks`` document) as its report, its
    groups derived; ValueError (or KeyError, TypeError) when it is neither."""
    if not (isinstance(data, dict) and str(data.get("schema", "")).startswith(NODE_SCHEMA + "/")):
        return load_report(data)
    if data["schema"] != NodeAnswer.SCHEMA:
        raise ValueError(f"a newer node answer ({data['schema']}): upgrade rankscope here")
    if not isinstance(data.get("dumps"), dict) or not all(isinstance(v, str) for v in data["dumps"].values()):
        raise ValueError("a node answer without its dumps")
    answer = load_document(NodeAnswer, data)
    dumps = answer.dumps
    report, _bad = from_dumps(load_report(answer.report), dumps, lambda name: dumps[name].encode(), "dump ")
    return report
