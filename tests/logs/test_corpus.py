"""The corpus: logs in the formats real multi-rank jobs print, each with its expected verdict.

One row of ``corpus/cases.toml`` per case, compared field by field with what ``rankscope logs``
prints in ``--json`` (the identity it names, the cause id, the location), never as prose. The logs
under ``corpus/logs/`` were written for this project in the launchers', frameworks' and NCCL's
formats (corpus/README.md says where each format comes from). The cases run the command in this
process (``run_cli_here``: what it prints, its exit code); one case of each kind also runs through
the real command line in a subprocess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import tomllib
from tests.support.cli import CliResult, run_cli, run_cli_here

Runner = Callable[..., CliResult]

CORPUS = Path(__file__).parent / "corpus"
CASES: list[dict[str, Any]] = tomllib.loads((CORPUS / "cases.toml").read_text())["case"]


def _id(case: dict[str, Any]) -> str:
    return f"{Path(case['file']).stem}-{case.get('verb', 'errors')}"


def _params() -> list[Any]:
    params = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if "xfail" in case else []
        params.append(pytest.param(case, id=_id(case), marks=marks))
    return params


def _expected(value: Any) -> Any:
    return None if value == "null" else value


def _json(run: Runner, *args: str, code: int = 0) -> dict[str, Any]:
    result = run("logs", *args, "--json")
    assert result.returncode == code, result.stderr
    data: dict[str, Any] = result.json()
    return data


def _check_errors(case: dict[str, Any], log: Path, run: Runner) -> None:
    data = _json(run, "errors", str(log))
    verdict = data.get("verdict") or {}
    got = {
        "who": verdict.get("who"),
        "global_rank": verdict.get("global_rank"),
        "cause": verdict.get("cause"),
        "exception": verdict.get("exception"),
        "where": verdict.get("where"),
        "ranks": verdict.get("ranks"),
        "empty_groups": sum(
            1
            for group in data["groups"] + data["unprefixed_groups"]
            if group["exception_type"] == "<no exception line>" and not group["frames"]
        ),
    }
    want = {key: _expected(case[key]) for key in got if key in case}
    if "exception" in case and "cause" not in case:
        want["cause"] = "python_exception"
    assert {key: got[key] for key in want} == want


def _check_ranks(case: dict[str, Any], log: Path, run: Runner) -> None:
    data = _json(run, "ranks", str(log))
    assert sorted(r["label"] for r in data["ranks"]) == sorted(case["labels"])
    assert data["unprefixed_lines"] == case["unprefixed"]


def _check_nccl(case: dict[str, Any], log: Path, run: Runner) -> None:
    data = _json(run, "nccl", str(log))
    if "processes" in case:
        assert sorted(r["who"] for r in data["ranks"]) == sorted(case["processes"])
    if "nccl_lines" in case:
        assert data["nccl_lines"] == case["nccl_lines"]
    if "finding" in case:
        found = {f["kind"]: ",".join(f["who"]) for f in data["findings"]}
        assert case["finding"] in found, sorted(found)
        assert found[case["finding"]] == case["finding_ranks"]


def _check_json(case: dict[str, Any], log: Path, run: Runner) -> None:
    verb, *rest = case["args"]
    data = _json(run, verb, *rest, str(log), code=case["exit"])
    assert data["schema"] == f"rankscope.logs.{verb}/1"
    assert "read" in data


CHECKS = {"errors": _check_errors, "ranks": _check_ranks, "nccl": _check_nccl, "json": _check_json}


def test_the_corpus_covers_every_measured_item() -> None:
    assert len(CASES) >= 40
    assert {case["item"] for case in CASES} == set(range(1, 8))
    for case in CASES:
        assert (CORPUS / "logs" / case["file"]).is_file(), case["file"]


@pytest.mark.parametrize("case", _params())
def test_corpus_case(case: dict[str, Any]) -> None:
    CHECKS[case.get("verb", "errors")](case, CORPUS / "logs" / case["file"], run_cli_here)


def _first_of_each_verb() -> list[Any]:
    firsts: dict[str, dict[str, Any]] = {}
    for case in CASES:
        if "xfail" not in case:
            firsts.setdefault(case.get("verb", "errors"), case)
    return [pytest.param(case, id=_id(case)) for case in firsts.values()]


@pytest.mark.parametrize("case", _first_of_each_verb())
def test_corpus_case_through_the_command_line(case: dict[str, Any]) -> None:
    """The first case of each kind again, through `python -m rankscope` in a subprocess."""
    CHECKS[case.get("verb", "errors")](case, CORPUS / "logs" / case["file"], run_cli)
