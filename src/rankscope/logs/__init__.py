"""Read the logs of many ranks: recognise prefixes, de-interleave, group tracebacks, explain NCCL output.

Reading (``sources``) streams bytes; everything else works on lines or chunks handed to it
and does no I/O of its own.
"""
