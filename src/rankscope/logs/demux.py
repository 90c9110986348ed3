"""De-interleave: one rank's lines (`logs grep`), or every rank into its own file (`logs split`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Optional

from rankscope.logs.prefixes import chunk_lines, host_and_rank, labelled_lines, qualify, split_line


def prefix_literals(label: bytes) -> list[bytes]:
    """Every raw prefix start that can carry ``label`` (each match is confirmed by parsing).

    Literals that start with ``[`` are searched at line starts; the others anywhere in a line.
    """
    host, rank = host_and_rank(label)
    if rank is None:
        return [b"[" + label]
    number = str(rank).encode()
    if host is not None:
        literals = [b"[" + label + b"]", b"[" + host.encode() + number + b"]"]
        if host.isdigit():  # srun task / MPI rank around torchrun: "0: [default3]:" is "0:3"
            literals += [b"]:[default" + number + b"]", b": [default" + number + b"]"]
        return literals
    return [
        b"[" + number + b"]",
        b"[default" + number + b"]",
        b"[rank" + number + b"]",
        b"[trainer" + number + b"]",
        b"[worker" + number + b"]",
        b"[:" + number + b"]",
        b"," + number + b"]<std",  # Open MPI [job,rank]<stdout>:
        number + b": ",  # srun --label (any padding)
    ]


class RankGrep:
    """Find the lines of some ranks in chunks, fast.

    Only the literal prefix forms present in the first 8 MiB are searched (each with
    ``bytes.find`` per chunk); every hit is confirmed by parsing its prefix.
    """

    def __init__(self, labels: Sequence[bytes], keep_prefix: bool) -> None:
        self.labels = set(labels)
        self.keep_prefix = keep_prefix
        self._literals: dict[Optional[bytes], list[bytes]] = {}

    def _compile(self, sample: bytes, host: Optional[bytes]) -> list[bytes]:
        wanted = set(self.labels)
        if host is not None:  # this file's bare labels get its host: look for the bare rank too
            wanted |= {label[len(host) + 1 :] for label in self.labels if label.startswith(host + b":")}
        literals: list[bytes] = []
        for label in wanted:
            for literal in prefix_literals(label):
                if literal in sample and literal not in literals:
                    literals.append(literal)
        if not literals:
            literals = [lit for label in wanted for lit in prefix_literals(label)]
        return literals

    def lines(
        self,
        chunk: bytes,
        fixed_label: Optional[bytes],
        allow_srun: bool,
        lo: int = 0,
        hi: int = -1,
        host: Optional[bytes] = None,
    ) -> Iterator[bytes]:
        """Matching lines of ``chunk[lo:hi]`` (whole lines), searched in place without a copy."""
        if hi < 0:
            hi = len(chunk)
        if fixed_label is not None:
            chunk, lo, hi = chunk[lo:hi], 0, hi - lo
            if qualify(fixed_label, host) in self.labels:
                for line in chunk.split(b"\n")[:-1] if chunk.endswith(b"\n") else chunk.split(b"\n"):
                    yield (b"[" + fixed_label + b"] " + line) if self.keep_prefix else line
            return
        literals = self._literals.get(host)
        if literals is None:
            literals = self._literals[host] = self._compile(chunk[lo : min(hi, lo + (8 << 20))], host)
        starts: set[int] = set()
        for literal in literals:
            if literal.startswith(b"["):
                # bytes.find on "\n[host:rank]" runs at memchr-like speed: no per-line Python work.
                if chunk.startswith(literal, lo):
                    starts.add(lo)
                needle = b"\n" + literal
                pos = chunk.find(needle, lo, hi)
                while pos >= 0:
                    starts.add(pos + 1)
                    pos = chunk.find(needle, pos + 1, hi)
            else:  # Open MPI and srun forms do not start the line: find them, then the line start
                pos = chunk.find(literal, lo, hi)
                while pos >= 0:
                    starts.add(max(lo, chunk.rfind(b"\n", lo, pos) + 1))
                    pos = chunk.find(literal, pos + 1, hi)
        for start in sorted(starts):
            end = chunk.find(b"\n", start, hi)
            line = chunk[start : hi if end < 0 else end]
            split = split_line(line, allow_srun)
            if qualify(split.label, host) in self.labels:
                yield line.rstrip(b"\r") if self.keep_prefix else split.text


def safe_file_name(label: Optional[bytes]) -> str:
    if label is None:
        return "unprefixed.log"
    text = label.decode("utf-8", "replace")
    return re.sub(r"[^A-Za-z0-9._-]", "_", text.replace(":", "_rank")) + ".log"


class Splitter:
    """Write each rank's lines (prefix stripped) to ``DIR/<host>_rank<N>.log``, private modes."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(out_dir, 0o700)
        self.out_dir = out_dir
        self.files: dict[Optional[bytes], BinaryIO] = {}
        self.counts: dict[Optional[bytes], int] = {}

    def _handle(self, label: Optional[bytes]) -> BinaryIO:
        handle = self.files.get(label)
        if handle is None:
            path = self.out_dir / safe_file_name(label)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            handle = self.files[label] = os.fdopen(fd, "wb")
        return handle

    def feed(
        self, chunk: bytes, fixed_label: Optional[bytes], allow_srun: bool, host: Optional[bytes] = None
    ) -> None:
        buffers: dict[Optional[bytes], list[bytes]] = {}
        for label, text in labelled_lines(chunk_lines(chunk), fixed_label, allow_srun):
            buffers.setdefault(qualify(label, host), []).append(text)
        for label, texts in buffers.items():
            self._handle(label).write(b"\n".join(texts) + b"\n")
            self.counts[label] = self.counts.get(label, 0) + len(texts)

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
