"""`why --log` on a CUDA out-of-memory error: the verdict gives torch's numbers (asked, GPU, free,
PyTorch's allocation) instead of cutting torch's long message at its width. The log is written
here as torch 2.x prints it under torchrun; no job or GPU is needed (a file is read)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli_here

LOG = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/job/train.py", line 60, in main
[rank1]:     outputs = model(**batch)
[rank1]:   File "/job/modeling.py", line 210, in forward
[rank1]:     attn = q @ k.transpose(-1, -2)
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity \
of 79.15 GiB of which 2.10 GiB is free. Including non-PyTorch memory, this process has 77.03 GiB memory in use. \
Of the allocated memory 70.12 GiB is allocated by PyTorch, and 5.31 GiB is reserved by PyTorch but unallocated.
"""


def test_the_verdict_of_an_out_of_memory_error_gives_its_numbers(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(LOG)
    verdict = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert verdict["text"] == (
        "rank 1 raised torch.OutOfMemoryError: CUDA out of memory (asked 4.00 GiB on GPU 1, capacity 79.15 GiB, "
        "free 2.10 GiB; PyTorch allocated 70.12 GiB, reserved but unallocated 5.31 GiB; this process holds "
        "77.03 GiB)"
    )
    assert verdict["location"] == "forward (modeling.py:210)"


LONG = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/job/train.py", line 41, in main
[rank0]:     loss = criterion(outputs, labels)
[rank0]: ValueError: Expected input batch_size (32) to match target batch_size (64). Check that the collate \
function of the data loader and the sampler that gives every rank its share agree on the batch size per rank.
"""


def test_a_long_message_is_cut_at_its_sentence_end_not_mid_word(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(LONG)
    verdict = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert verdict["text"] == (
        "rank 0 raised ValueError: Expected input batch_size (32) to match target batch_size (64). …"
    )
