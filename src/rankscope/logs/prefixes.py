"""Recognise the rank prefix a launcher put in front of a log line, and strip it.

Forms understood (outermost first; one nested torch ``[rankN]:`` is stripped as well):

- torchrun ``--tee``: ``[default0]:`` (role + local rank), ``[host:0]:`` with ``--role host:``,
  and ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` forms such as ``[3]:`` or ``[trainer:3]:``;
- torch's own exception prefix ``[rank3]:``;
- rankscope's own ``[host:3] `` (``rankscope prefix``, :mod:`rankscope.inproc`);
- Open MPI ``--tag-output``: ``[1,12]<stdout>:``;
- Lightning's own ``[rank: 1] `` (its per-rank messages; the label is the global rank);
- Determined's ``[rank=1] || `` (its trial logs; the global rank; its time and container id before
  it are a head, rankscope.logs.heads);
- SLURM ``srun --label``: ``12: `` (optionally space padded), only when asked for
  (``allow_srun``): the form is too easy to confuse with ordinary text to guess it per line.

Labels are bytes (``b"host1:3"`` or ``b"3"``): the hot loops compare and hash them without decoding;
:mod:`rankscope.logs.labels` reads them as host and rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

_BRACKET = (
    rb"\[(?:\d+),(?P<mpi>\d+)\]<std(?:out|err|diag)>:"  # Open MPI --tag-output
    rb"|\[rank: (?P<lightning>\d+)\]\x20?"  # Lightning's rank_prefixed_message
    rb"|\[rank=(?P<determined>\d+)\] \|\| "  # Determined's trial logs (its global rank)
    rb"|\[(?P<name>[^\[\]\s]{0,200}?)(?P<num>\d+)\](?P<sep>:|\x20)?"  # torchrun, torch, rankscope
)
_SRUN = rb"|(?P<srun>\x20{0,8}\d{1,7}): "
_SRUN_EMPTY = re.compile(rb"\x20{0,8}\d{1,7}:")

BRACKET_PREFIX = re.compile(_BRACKET)
ANY_PREFIX = re.compile(_BRACKET + _SRUN)
#: torch >= 2.x prefixes every line of an uncaught exception of a distributed worker.
TORCH_RANK = re.compile(rb"\[rank(\d+)\]:\x20?")
OMPI_TAG = re.compile(rb"\[\d+,\d+\]<std(?:out|err|diag)>:")
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")

#: Role names that carry no host information.
_NO_HOST_NAMES = frozenset({b"", b"default", b"rank", b"rank=", b"trainer", b"worker"})


@dataclass(frozen=True)
class Split:
    """A line cut in three: the raw prefix bytes, the rank label, the text after it.

    ``raw_prefix`` includes a nested torch ``[rankN]: `` marker: lines of one rank's traceback
    carry it, the same rank's ordinary prints do not, which tells the two apart.
    """

    raw_prefix: bytes
    label: Optional[bytes]
    text: bytes


def label_of(match: re.Match[bytes]) -> bytes:
    """The rank label (``host:rank`` or ``rank``) of a prefix match."""
    mpi = match.group("mpi")
    if mpi is not None:
        return mpi
    lightning = match.group("lightning")
    if lightning is not None:
        return lightning
    determined = match.group("determined")
    if determined is not None:
        return determined
    num = match.group("num")
    if num is not None:
        name = match.group("name")
        host = name[:-1] if name.endswith(b":") else name
        if host in _NO_HOST_NAMES:
            # torchrun's default role ("[default3]:", or "[default:3]:" from a
            # "[${role_name}:${rank}]:" template) says nothing about the host
            return num
        return host + b":" + num
    srun = match.groupdict().get("srun")
    assert srun is not None
    return srun.strip()


#: A logger's head after a Ray/vLLM prefix: ``ERROR 04-25 10:31:09 [multiproc_executor.py:470] ``.
_LOGGER_HEAD = re.compile(
    rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w.]+:\d+\] ?"
)
_PAREN_FIELD = re.compile(rb"\b(rank|pid|ip)=([\w.:]+)")
_PAREN_TP = re.compile(rb"(?:^|[\s_])TP(\d+)\b")
#: SkyPilot's node prefix, ``(head, rank=0, pid=N)``, ``(worker2, rank=2, pid=N, ip=A)`` (since 2022 with
#: the node's host first, ``(node-2, head, rank=0, ...)``): its ``rank=`` is the node's (SKYPILOT_NODE_RANK),
#: not a rank of the job, so the node is named by its role.
_SKYPILOT_NODE = re.compile(rb"(?:^|, )(head|worker\d+), rank=\d+, pid=")
#: Ray's deduplication suffix: ``Traceback (most recent call last): [repeated 6x across cluster]``.
_RAY_REPEATED = re.compile(rb" \[repeated \d+x across cluster\]$")
#: Words that head ordinary lines ("INFO: ...") and are no pdsh host.
_NOT_HOSTS = frozenset(
    {b"INFO", b"WARNING", b"WARN", b"ERROR", b"DEBUG", b"CRITICAL", b"NOTE", b"Note", b"note", b"Traceback"}
    | {b"stdout", b"stderr"}  # a stream's name (rankscope.logs.prefixes: the ``mark`` dialect)
)


@dataclass(frozen=True)
class Dialect:
    """A per-source prefix form that is not recognised line by line (it looks too much like text),
    only when most lines of the source's head have it (:func:`sniff_dialect`).

    - ``pdsh``: ``worker-1: text``, ``10.1.2.3: text`` (pdsh, DeepSpeed's multi-node runner): the host;
    - ``paren``: Ray's ``(Actor pid=N, ip=A) text`` (label ``A,pid=N``, or ``pid=N``) and vLLM's
      ``(VllmWorker rank=R pid=N) text`` (label ``R``, a global rank), ``(Worker_TP2 pid=N)`` and
      ``(VllmWorker TP2 pid=N)`` (label ``TP2``, the tensor-parallel rank); a logger head after it
      (``ERROR 04-25 10:31:09 [file.py:N] ``) is removed from the text;
    - ``indent``: the standard prefixes behind the indentation a paste added (``    [rank7]: ...``);
    - ``mark``: a mark before every line that names no rank: a log pasted as a Markdown quote
      (``> [rank7]: ...``, ``> Traceback ...``), the stream accelerate's test runner names
      (``stderr: Traceback ...``, ``stdout: ...``); it is removed, and the standard prefixes behind it
      are read;
    - ``sglang``: ``[2025-01-30 18:11:27 TP1] text`` (label ``TP1``, ``DP0,TP1``; the server's own
      ``[2025-01-30 18:11:27] `` lines have none). Its tracebacks go on without the prefix;
    - ``compose``: ``docker compose up`` / ``docker compose logs``: ``trainer-1-1  | text`` (the
      service's container, like a host; a torchrun ``--tee`` prefix inside adds the local rank);
    - ``nemo-run``: NeMo-Run's executors' ``TASK/NODE `` before torchrun's ``--tee`` prefix
      (``i.pretrain/0 [default2]:text``): the task's node, like a host, and the local rank inside it;
    - ``kubectl``: ``kubectl logs --prefix`` (Kubernetes >= 1.17, one pod per node of a PyTorchJob):
      ``[pod/NAME/CONTAINER] text``, label the pod's name, like a host; a torchrun ``--tee`` prefix
      inside it (``[pod/NAME/c] [default3]:text``) adds the local rank (``NAME:3``).
    """

    name: str
    pattern: re.Pattern[bytes]

    def split(self, line: bytes) -> Optional[Split]:
        match = self.pattern.match(line)
        if match is None:
            return None
        end = match.end()
        if self.name == "indent":
            inner = split_line(line[end:])
            if inner.label is None:
                return None
            return Split(line[:end] + inner.raw_prefix, inner.label, inner.text)
        if self.name == "mark":  # the mark goes, whatever is behind it
            inner = split_line(line[end:])
            return Split(line[:end] + inner.raw_prefix, inner.label, inner.text)
        if self.name == "pdsh":
            label = match.group(1)
            if label in _NOT_HOSTS:
                return None
        elif self.name in ("kubectl", "compose", "nemo-run"):
            label = match.group(1)
            tee = BRACKET_PREFIX.match(line, end)
            if tee is not None and tee.group("num") is not None and tee.group("name") != b"rank":
                label += b":" + label_of(tee).rpartition(b":")[2]
                end = tee.end()
        elif self.name == "sglang":
            # the scheduler's " DP2 PP1 ATTN_CP0 MOE_DP1 TP9 EP9": its expert-parallel and MoE data-parallel
            # ranks follow from its tensor-parallel one, the rest name the process
            parts = [part for part in match.group(1).split() if not part.startswith((b"EP", b"MOE_DP"))]
            if not parts:
                return None  # the server's own lines: "[2025-01-30 18:11:27] ..."
            label = b",".join(parts)
        else:
            fields = dict(_PAREN_FIELD.findall(match.group(1)))
            tp = _PAREN_TP.search(match.group(1))
            node = _SKYPILOT_NODE.search(match.group(1))
            if node is not None:
                label = node.group(1)
                tee = BRACKET_PREFIX.match(line, end)
                if tee is not None and tee.group("num") is not None and tee.group("name") != b"rank":
                    label += b":" + label_of(tee).rpartition(b":")[2]  # torchrun --tee's [default3]: on it
                    end = tee.end()
            elif b"rank" in fields:
                label = fields[b"rank"]
            elif (
                tp is not None
            ):  # vLLM's (Worker_TP2 pid=N), (VllmWorker TP2 pid=N): its tensor-parallel rank
                label = b"TP" + tp.group(1)
            elif b"pid" in fields:
                label = (fields[b"ip"] + b"," if b"ip" in fields else b"") + b"pid=" + fields[b"pid"]
            else:
                return None
        raw_end = end
        if line.startswith(b"[rank", end):
            inner_rank = TORCH_RANK.match(line, end)
            if inner_rank is not None:
                end = raw_end = inner_rank.end()
        text = line[end:]
        if self.name == "paren":
            head = _LOGGER_HEAD.match(text)
            if head is not None:
                text = text[head.end() :]
            if text.endswith(b" across cluster]"):
                # Ray's log deduplication: the line as other workers printed it too, said once
                repeated = _RAY_REPEATED.search(text)
                if repeated is not None:
                    text = text[: repeated.start()]
        return Split(line[:raw_end], label, text)


DIALECTS = (
    Dialect("pdsh", re.compile(rb"([A-Za-z0-9][\w.-]{0,62}): ")),
    Dialect("paren", re.compile(rb"\(([^()\n]{1,200}?(?:pid|rank)=[^()\n]{0,200}?)\) ")),
    Dialect("indent", re.compile(rb"[ \t]+(?=\[)")),
    Dialect("mark", re.compile(rb">(?: |$)|std(?:out|err): ")),
    Dialect(
        "sglang", re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ")
    ),
    Dialect("compose", re.compile(rb"([A-Za-z0-9][\w.-]{0,252}) +\| ")),
    Dialect("nemo-run", re.compile(rb"([A-Za-z][\w.-]{0,63}/\d{1,6}) (?=\[)")),
)
#: sglang's scheduler lines (``[2025-01-30 18:11:27 DP0 TP1] ``), a form no other log has.
SGLANG = next(d for d in DIALECTS if d.name == "sglang")
#: Ray's and vLLM's ``(Actor pid=N, ip=A) `` on its own (a line of a source whose dialect is another).
PAREN = next(d for d in DIALECTS if d.name == "paren")
#: Lines of that form (and one in 20 of the head) that make a source Ray's when most lines are the driver's.
RAY_LINES_MIN = 3
#: Tried before the bracket forms: a container whose name ends in a digit looks like ``[name3]``.
KUBECTL = Dialect("kubectl", re.compile(rb"\[pod/([^/\[\]\s]{1,253})/[^/\[\]\s]{1,253}\] ?"))


def sniff_dialect(sample: bytes) -> Optional[Dialect]:
    """The dialect most lines of a source's head have, when the standard prefixes do not lead."""
    lines = [line for line in sample.split(b"\n")[:2000] if line.strip()]
    if lines and sum(1 for line in lines if KUBECTL.pattern.match(line)) > len(lines) // 2:
        return KUBECTL
    if not lines or sum(1 for line in lines if BRACKET_PREFIX.match(line)) > len(lines) // 2:
        return None
    for dialect in DIALECTS:
        if sum(1 for line in lines if dialect.split(line) is not None) > len(lines) // 2:
            return dialect
    # Ray's workers' lines beside its driver's own (no prefix): a form no ordinary line has, so a
    # few of them are enough (a driver that logs more than its workers is the common case)
    paren = sum(1 for line in lines if PAREN.split(line) is not None)
    if paren >= RAY_LINES_MIN and paren * 20 >= len(lines):
        return PAREN
    # sglang's schedulers log a traceback as one message (its frames have no prefix) and the server
    # writes lines of its own: a log of a failed start may have fewer prefixed lines than others
    scheduler = sum(1 for line in lines if SGLANG.split(line) is not None)
    if scheduler >= RAY_LINES_MIN and scheduler * 20 >= len(lines):
        return SGLANG
    return None


@dataclass(frozen=True)
class SourceLabels:
    """How the lines of one source get their rank label.

    ``fixed_label``: every line has it (a torchrun ``--log-dir`` file names its rank);
    ``allow_srun``: ``N: `` prefixes are read (the source looks like ``srun --label`` output);
    ``host``: given to labels without one (``--host-from-filename``).
    """

    fixed_label: Optional[bytes] = None
    allow_srun: bool = False
    host: Optional[bytes] = None
    dialect: Optional[Dialect] = None

    def label(self, parsed: Optional[bytes]) -> Optional[bytes]:
        """The label of a line whose prefix parsed to ``parsed``."""
        return qualify(self.fixed_label if self.fixed_label is not None else parsed, self.host)

    def lines(self, chunk: bytes) -> Iterator[tuple[Optional[bytes], bytes]]:
        """(label, text) for each line of a block of whole lines."""
        lines = chunk_lines(chunk)
        fixed = self.label(self.fixed_label)
        if fixed is not None:
            for line in lines:
                yield fixed, line
            return
        host, allow_srun, dialect = self.host, self.allow_srun, self.dialect
        for line in lines:
            split = split_line(line, allow_srun, dialect)
            yield qualify(split.label, host), split.text


#: Lines read as they come: no fixed label, no srun labels, no host given.
PLAIN = SourceLabels()


def chunk_lines(chunk: bytes) -> list[bytes]:
    """The lines of a block that ends at a line boundary, without their newlines."""
    lines = chunk.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def split_line(line: bytes, allow_srun: bool = False, dialect: Optional[Dialect] = None) -> Split:
    """Split one line (without its newline) into prefix, label and text.

    ANSI colour codes and a trailing CR are removed first. A line with no prefix gets
    ``label=None`` and ``raw_prefix=b""``. ``dialect``: the source's own prefix form, tried first.
    """
    if line.endswith(b"\r"):
        line = line[:-1]
    if b"\x1b" in line:
        line = ANSI.sub(b"", line)
    if dialect is not None:
        found = dialect.split(line)
        if found is not None:
            return found
    pattern = ANY_PREFIX if allow_srun else BRACKET_PREFIX
    match = pattern.match(line)
    if match is None:
        if allow_srun and _SRUN_EMPTY.fullmatch(line):
            return Split(line, line.strip()[:-1], b"")  # "3:" on an empty line (its space trimmed)
        return Split(b"", None, line)
    end = match.end()
    if end == len(line) and match.group("name") == b"":
        # "[3]:" alone is how torchrun's failure summary heads each failed rank; an empty
        # print under a "[${rank}]:" template looks the same and loses nothing by this.
        return Split(b"", None, line)
    if match.group("name") == b"" and match.group("sep") == b" " and line.startswith(b"[rank", end):
        inner = TORCH_RANK.match(line, end)
        if inner is not None:
            # "[80746] [rank0]:": a number in front of torch's marker is a pasted line number (or
            # MPICH's -prepend-rank, the same rank): the label is torch's global rank
            return Split(line[: inner.end()], inner.group(1), line[inner.end() :])
    label = label_of(match)
    if (
        match.group("num") is None
        and match.group("lightning") is None
        and line.startswith(b"[", end)
        and not line.startswith(b"[rank", end)
    ):
        # srun --label or mpirun --tag-output around torchrun --tee: "0: [default3]:text" is
        # task 0 (one per node) and torchrun's local rank 3: label "0:3".
        inner_bracket = BRACKET_PREFIX.match(line, end)
        if inner_bracket is not None and inner_bracket.group("num") is not None:
            inner_label = label_of(inner_bracket)
            label = label + b":" + inner_label.rpartition(b":")[2]
            end = inner_bracket.end()
    if match.group("name") == b"rank" and line[end : end + 1] == b" ":
        end += 1  # torch writes "[rank3]: text"
    elif line.startswith(b"[rank", end):
        inner = TORCH_RANK.match(line, end)
        if inner is not None:
            end = inner.end()
    text = line[end:]
    if match.group("mpi") is not None and b"]<std" in text:
        # Open MPI tags every write, not every line: "KeyError[1,2]<stderr>:: [1,2]<stderr>:'x'"
        text = OMPI_TAG.sub(b"", text)
    return Split(line[:end], label, text)


#: ``\s`` of a bytes pattern, spelled out: a class of single bytes compiles to a bitmap (one test a
#: byte), one with ``\s`` in it to a list of tests.
_SPACE = rb"\t\n\x0b\x0c\r\x20"
#: What follows the "[" of a line that :data:`BRACKET_PREFIX` reads: name characters ending in a
#: digit, then "]" (Open MPI's "1,2]<stdout>:" is such a form too). Possessive, so a line costs one
#: pass over its head: unlike BRACKET_PREFIX it does not stop a name at 200 characters.
_PREFIX_BODY = rb"[^\[\]" + _SPACE + rb"]*+(?<=\d)\]"
#: "[3]:" alone on its line is torchrun's failure summary, not rank 3 (see :func:`split_line`).
_SUMMARY_HEAD = rb"\d+\][:\x20]?\r?(?:\n|\Z)"
#: A line with a rank prefix ("[W1123 socket.cpp:10] ..." has none: torch's C++ warnings).
_RANK_LINE = rb"\[(?:rank: \d+\]|(?!" + _SUMMARY_HEAD + rb")" + _PREFIX_BODY + rb")[^\n]*+(?:\n|\Z)"
#: From a line start: the lines with a rank prefix that follow, then one line without (the group),
#: or the end. ``findall`` runs through a block in one call and builds an object only for the
#: lines without a prefix (the rest of the block gives ``b""``, a shared constant).
_UNLABELLED = re.compile(rb"(?:" + _RANK_LINE + rb")*+(?:([^\n]*+\n|[^\n]++\Z)|\Z)")


@dataclass(frozen=True)
class LineTally:
    """The lines of a block of whole lines, counted once for every reader of the block."""

    newlines: int
    #: Lines without a rank prefix (:func:`unlabelled_lines`).
    unlabelled: int
    #: Lines with a bracket rank prefix, when the bracket count below made them (None otherwise):
    #: each starts with "[", which the interleave check uses instead of a count of its own.
    bracket_labelled: Optional[int] = None


def tally_lines(
    data: bytes, labels: SourceLabels, lo: int = 0, hi: Optional[int] = None, newlines: Optional[int] = None
) -> LineTally:
    """Count the lines of ``data[lo:hi]`` (whole lines) and those without a rank prefix, without
    copying it: the count of every verb (``logs ranks``, ``logs split``, ``logs errors``), by one
    definition: the lines :meth:`SourceLabels.lines` gives no label (blank lines, a launcher's own
    lines, "[W...]" warnings, torchrun's "[3]:" summary heads).

    Bracket-prefixed sources are counted at C speed, in one regular-expression pass over the lines'
    heads; a property test checks it against :func:`split_line` (the one difference: a bracket name
    over 200 characters before its number counts here as a prefix).
    """
    hi = len(data) if hi is None else hi
    if newlines is None:
        newlines = data.count(b"\n", lo, hi)
    if labels.fixed_label is not None:
        return LineTally(newlines, 0)
    if labels.allow_srun or labels.dialect is not None or data.find(b"\x1b", lo, hi) >= 0:
        # srun labels, a dialect; colour codes split_line removes first
        chunk = data if lo == 0 and hi == len(data) else data[lo:hi]
        return LineTally(newlines, sum(1 for label, _text in labels.lines(chunk) if label is None))
    lines = newlines + (0 if hi == lo or data[hi - 1] == 0x0A else 1)
    found = _UNLABELLED.findall(data, lo, hi)
    unlabelled = len(found) - found.count(b"")
    return LineTally(newlines, unlabelled, lines - unlabelled)


def unlabelled_lines(chunk: bytes, labels: SourceLabels, newlines: Optional[int] = None) -> int:
    """How many lines of a block of whole lines carry no rank prefix (see :func:`tally_lines`)."""
    return tally_lines(chunk, labels, newlines=newlines).unlabelled


#: torchrun --tee's prefix: a role (or host) and the local rank in brackets, then a colon.
_TEE = re.compile(rb"\[[^\[\]\s]*?\d+\]:")


def tee_local(raw_prefix: bytes) -> bool:
    """A torchrun ``--tee`` prefix (``[default3]:``, ``[trainer:3]:``) without torch's marker: its
    number is a local rank; torch's own ``[rank3]:`` and srun's ``3: `` name the global one."""
    return b"[rank" not in raw_prefix and _TEE.match(raw_prefix) is not None


def torch_global_rank(raw_prefix: bytes) -> Optional[int]:
    """The global rank torch's ``[rankN]:`` marker in a raw prefix gives; None without a marker.

    Under ``torchrun --role host:`` the outer label carries the node's local rank; torch marks
    each line of a worker's uncaught exception with its global rank. ``logs errors`` and
    ``logs grep`` both read the global rank here.
    """
    marker = TORCH_RANK.search(raw_prefix)
    return None if marker is None else int(marker.group(1))


def qualify(label: Optional[bytes], host: Optional[bytes]) -> Optional[bytes]:
    """Give a bare rank label a host (``b"3"`` -> ``b"node7:3"``); labels with a host stay."""
    if host is None or label is None or b":" in label:
        return label
    return host + b":" + label


def sniff_srun(sample: bytes) -> bool:
    """Does this text look like ``srun --label`` output (most lines start with ``N: ``)?"""
    lines = [line for line in sample.split(b"\n")[:2000] if line.strip()]
    if not lines:
        return False
    labelled = sum(1 for line in lines if re.match(rb"\x20{0,8}\d{1,7}: ", line))
    bracketed = sum(1 for line in lines if BRACKET_PREFIX.match(line))
    return labelled > len(lines) // 2 and labelled > bracketed
