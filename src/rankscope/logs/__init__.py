"""Read the logs of many ranks: recognise prefixes, de-interleave, group tracebacks, explain NCCL output.

Reading (``sources``, ``reading``) streams bytes; the scanners (``inventory``, ``demux``,
``tracebacks`` + ``grouping``, ``nccl``) work on the blocks handed to them, with rank labels as
bytes, and do no I/O of their own. ``labels`` is where a label becomes host and rank; each
scanner's result is a document type (``rankscope.logs.<verb>/1``) written by rankscope.serial.
"""
