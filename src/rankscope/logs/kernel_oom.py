"""The kernel's OOM killer in text (pure; shared by `logs errors` and `why`'s kernel messages).

mm/oom_kill.c prints ``Out of memory: Killed process PID (comm) total-vm:NkB, anon-rss:NkB, ...``
(``Memory cgroup out of memory: ...`` under a cgroup's limit) and, since Linux 5.0, a summary line
``oom-kill:constraint=...,task=comm,pid=PID,uid=N`` before it. Users paste them from ``dmesg`` into
the same report as the job's output; a launcher's report of the same pid killed by SIGKILL is then
the OOM killer's doing.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

OOM = re.compile(
    r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
)
OOM_SUMMARY = re.compile(r"oom-kill:.*?\btask=(?P<comm>[^,]*),pid=(?P<pid>\d+)")
_ANON_RSS = re.compile(r"anon-rss:(\d+)kB")


class OomKill(NamedTuple):
    pid: int
    comm: str
    #: The process's anonymous memory when killed, in words (``58.4 GiB``); None when not printed.
    anon_rss: Optional[str]


def oom_kill(text: str) -> Optional[OomKill]:
    """The kill a ``Killed process`` line reports; None for any other line."""
    found = OOM.search(text)
    if found is None:
        return None
    rss = _ANON_RSS.search(text, found.end())
    size = None
    if rss is not None:
        kib = int(rss.group(1))
        size = f"{kib / (1 << 20):.1f} GiB" if kib >= 1 << 20 else f"{kib / 1024:.0f} MiB"
    return OomKill(int(found.group("pid")), found.group("comm"), size)
