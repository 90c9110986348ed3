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
A slot whose first word is 0 was never written. In a ring the newest record is the one with the
largest time (the clock is monotonic); the oldest follows it.

Python 3.9, standard library only: imported inside training processes.
"""

from __future__ import annotations

import struct

MAGIC = b"RSTRACE\x00"
VERSION = 1
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
MARK = 8  # start/stop of a traced region (code id 0)

KIND_NAMES = {
    CALL: "call",
    RETURN: "return",
    LINE: "line",
    UNWIND: "unwind",
    SAMPLE_FRAME: "frame",
    SAMPLE_LEAF: "sample",
    SAMPLE_SAME: "same",
    MARK: "mark",
}

DEFAULT_RING_RECORDS = 1 << 18  # 262144 records, 6 MiB
DEFAULT_NAMES_BYTES = 1 << 20  # 1 MiB of interned names
#: The largest names region a reader accepts (a larger one is a damaged or hostile header).
NAMES_MAX = 2 << 20
