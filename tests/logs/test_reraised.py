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


POOL = """\
[rank0]: multiprocessing.pool.RemoteTraceback:
[rank0]: \"\"\"
[rank0]: Traceback (most recent call last):
[rank0]:   File "/usr/lib/python3.10/multiprocessing/pool.py", line 125, in worker
[rank0]:     result = (True, func(*args, **kwds))
[rank0]:   File "/srv/prep/tokenize.py", line 41, in encode_shard
[rank0]:     ids = tok(text)["input_ids"]
[rank0]: TypeError: 'NoneType' object is not subscriptable
[rank0]: \"\"\"
[rank0]:
[rank0]: The above exception was the direct cause of the following exception:
[rank0]:
[rank0]: Traceback (most recent call last):
[rank0]:   File "/srv/prep/main.py", line 77, in <module>
[rank0]:     shards = pool.map(encode_shard, files)
[rank0]:   File "/usr/lib/python3.10/multiprocessing/pool.py", line 774, in get
[rank0]:     raise self._value
[rank0]: TypeError: 'NoneType' object is not subscriptable
"""


def test_an_error_raised_again_where_a_pool_awaited_it_is_placed_where_it_happened(tmp_path: Path) -> None:
    log = tmp_path / "pool.log"
    log.write_text(POOL)
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["where"]) == ("0", "/srv/prep/tokenize.py:41")
    text = run_cli_here("logs", "errors", str(log)).stdout
    assert "(raised twice: where it happened, then where its result was awaited" in text


def test_a_chained_exception_is_still_told_as_one(tmp_path: Path) -> None:
    log = tmp_path / "chained.log"
    log.write_text(CHAINED)
    text = run_cli_here("logs", "errors", str(log)).stdout
    assert "(while handling: KeyError: 'lr')" in text
    assert text.splitlines()[0].startswith("root cause: rank 0: ValueError: no learning rate in the config")
