"""Look inside one process: its open file descriptors (`rankscope fds`) and its system calls (`rankscope strace`).

collect.py and trace.py talk to the outside world (/proc through rankscope.procfs, strace);
fdkinds.py and syscalls.py are pure; report.py holds the data, render.py the words.
"""
