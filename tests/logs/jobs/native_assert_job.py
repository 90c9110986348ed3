"""A torchrun job whose rank 1 fails a C assert() (glibc's __assert_fail, as a native plugin's assert
does): glibc prints ``python3: FILE:LINE: FUNC: Assertion `EXPR' failed.`` and the process aborts;
torchrun reports exitcode -6. No torch needed.

Usage: torchrun --nproc-per-node 2 --tee 3 native_assert_job.py
"""

import ctypes
import os
import time

if os.environ["RANK"] == "1":
    time.sleep(0.5)
    ctypes.CDLL(None).__assert_fail(b"r->used", b"src/net_plugin.c", 812, b"progress_loop")
time.sleep(3)
