"""The trace file format, shared by the writer (inside the traced process) and the readers.

One file per process, ``trace-{host}-{rank}-{pid}``::

    offset 0      header page (4096 bytes): MAGIC, version, layout, then a JSON metadata blob
    offset 4096   names region: one line per interned code object, ``id<TAB>file<TAB>line<TAB>name\\n``
    names end     records: RECORD_WORDS little-endian unsigned 64-bit words each
                  ring mode: exactly ``capacity`` records, overwritten in a circle (the file never grows)
                  full mode: records appended until the trace stops

A record is three words: ``[monotonic ns, code_id << 32 | line << 8 | kind, thread ident]``
(with FLAG_TICKS the first word is the CPU's constant-rate counter, converted to nanoseconds
through two (counter, ns) pairs at CALIBRATION_OFFSET).
Whole stacks (version 2): right after the start mark, and at the start of every lap of the ring (a
chunk of ``--full``), the writer records every traced thread's open calls: a LAP mark, then per
thread its STACK_FRAME records (outermost first) ended by a STACK_END, then a LAP_END mark. A
reader that decodes from there on knows each thread's whole stack, even after the ring has
overwritten the calls that opened it.

A slot whose first word is 0 was never written. In a ring the newest record is the one with the
largest time (the clock is monotonic); the oldest follows it.

Python 3.9, standard library only: imported inside training processes.
"""

from __future__ import annotations

import struct

MAGIC = b"RSTRACE\x00"
#: 2: whole-stack records (STACK_FRAME, STACK_END, LAP marks) and PROGRESS records.
#: A reader reads every version up to its own; a newer file is refused with one line.
VERSION = 2
HEADER_SIZE = 4096
#: magic, version, flags, record words, capacity, names size, names used, wraps, metadata length
HEADER = struct.Struct("<8sIIIQQQQI")
#: byte offset of the fields the writer updates while it runs
NAMES_USED_OFFSET = 8 + 4 + 4 + 4 + 8 + 8
WRAPS_OFFSET = NAMES_USED_OFFSET + 8
#: (stamp, monotonic ns) at start and the latest such pair, 4 words: set when FLAG_TICKS
CALIBRATION_OFFSET = 64
CALIBRATION = struct.Struct("<QQQQ")
META_OFFSET = 256
META_MAX = HEADER_SIZE - META_OFFSET
RECORD_WORDS = 3
RECORD_BYTES = 8 * RECORD_WORDS

FLAG_RING = 1
FLAG_LINES = 2
FLAG_SAMPLE = 4
FLAG_CALLS = 8
FLAG_TICKS = 16  # record times are CPU counter ticks, converted with the calibration pairs

# event kinds (the low byte of a record's second word)
CALL = 1
RETURN = 2
LINE = 3
UNWIND = 4  # a frame left by an exception
SAMPLE_FRAME = 5  # one frame of a sampled stack, outermost first
SAMPLE_LEAF = 6  # the innermost frame of a sampled stack (ends it)
SAMPLE_SAME = 7  # this thread's stack is the same as its previous sample
MARK = 8  # start/stop of a traced region, a lap's whole stacks (code id 0; the line field says which)
STACK_FRAME = 9  # one open call of a thread's whole stack, outermost first (version 2)
STACK_END = 10  # ends one thread's whole stack; line field 1: its outermost calls were left out;
#: its code id (where not 0) names a names entry whose file is THREAD_FILE: the thread's name
THREAD_FILE = "<thread>"
PROGRESS = 11  # a rankscope.progress() step: word = step << 8 | PROGRESS (0 <= step < 2**56)

# the line field of a MARK record
MARK_START = 1
MARK_STOP = 2
MARK_LAP = 3  # whole stacks follow
MARK_LAP_END = 4  # every traced thread's stack was written

KIND_NAMES = {
    CALL: "call",
    RETURN: "return",
    LINE: "line",
    UNWIND: "unwind",
    SAMPLE_FRAME: "frame",
    SAMPLE_LEAF: "sample",
    SAMPLE_SAME: "same",
    MARK: "mark",
    STACK_FRAME: "open",
    STACK_END: "stack",
    PROGRESS: "progress",
}

#: Open calls a whole stack keeps per thread (the innermost; STACK_END says when some were left out).
STACK_DEPTH = 256
#: A lap's whole stacks take at most this fraction of the ring (the rest is left to events).
STACK_SHARE = 4

#: ``--full`` appends records this many at a time; each chunk (version 2) starts with whole stacks.
FULL_CHUNK_RECORDS = 1 << 16

DEFAULT_RING_RECORDS = 1 << 18  # 262144 records, 6 MiB
DEFAULT_NAMES_BYTES = 1 << 20  # 1 MiB of interned names
#: The largest names region a reader accepts (a larger one is a damaged or hostile header).
NAMES_MAX = 2 << 20
