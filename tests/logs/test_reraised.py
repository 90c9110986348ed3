"""An error torch's ExceptionWrapper re-raises in the rank (a DataLoader worker's, a DataParallel
replica's) is read as the worker's own: its frames, its error, its place; the re-raised line says
where it came from. The DataLoader case is in the corpus (dataloader_worker_original_traceback.log)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli_here

REPLICA = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/srv/dp/train.py", line 31, in <module>
[rank1]:     out = model(x)
[rank1]:   File "/usr/lib/python3/dist-packages/torch/nn/parallel/data_parallel.py", line 193, in forward
[rank1]:     outputs = self.parallel_apply(replicas, inputs, module_kwargs)
[rank1]:   File "/usr/lib/python3/dist-packages/torch/_utils.py", line 706, in reraise
[rank1]:     raise exception
[rank1]: RuntimeError: Caught RuntimeError in replica 1 on device 1.
[rank1]: Original Traceback (most recent call last):
[rank1]:   File "/usr/lib/python3/dist-packages/torch/nn/parallel/parallel_apply.py", line 96, in _worker
[rank1]:     output = module(*input, **kwargs)
[rank1]:   File "/srv/dp/model.py", line 12, in forward
[rank1]:     return self.proj(x.view(-1, 300))
[rank1]: RuntimeError: shape '[-1, 300]' is invalid for input of size 1024
"""

CHAINED = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/srv/job.py", line 5, in load
[rank0]:     return cfg["lr"]
[rank0]: KeyError: 'lr'
[rank0]:
[rank0]: During handling of the above exception, another exception occurred:
[rank0]:
[rank0]: Traceback (most recent call last):
[rank0]:   File "/srv/job.py", line 9, in <module>
[rank0]:     load()
[rank0]: ValueError: no learning rate in the config
"""


def test_a_replicas_error_is_its_own_with_where_it_was_raised(tmp_path: Path) -> None:
    log = tmp_path / "dp.log"
    log.write_text(REPLICA)
    data = run_cli_here("logs", "errors", str(log), "--json").json()
    verdict = data["verdict"]
    assert (verdict["who"], verdict["exception"], verdict["where"]) == (
        "1",
        "RuntimeError",
        "/srv/dp/model.py:12",
    )
    assert "is invalid for input of size 1024" in verdict["what"]
    text = run_cli_here("logs", "errors", str(log)).stdout
    assert (
        "(raised in replica 1 on device 1; the rank re-raised it as: RuntimeError: Caught RuntimeError"
        in text
    )


def test_a_chained_exception_is_still_told_as_one(tmp_path: Path) -> None:
    log = tmp_path / "chained.log"
    log.write_text(CHAINED)
    text = run_cli_here("logs", "errors", str(log)).stdout
    assert "(while handling: KeyError: 'lr')" in text
    assert text.splitlines()[0].startswith("root cause: rank 0: ValueError: no learning rate in the config")
