"""`rankscope watch`: runs beside a job, notices a stall, a straggler or a death, and captures it.

- ``model.py``: what one look at the job saw (:class:`Snapshot`) and what the watcher decides (:class:`Trigger`).
- ``collect.py``: the only module that reads the job: its workers, their progress markers and exit
  codes, the job's output files, the in-process handler's dumps.
- ``decide.py``: pure: snapshots in, triggers out (stall, straggler, death).
- ``confirm.py``: a stall confirmed by two non-blocking stack samples before anything else touches the job.
- ``capture.py``: the one function that runs the capture command (``rankscope why``) with a deadline.
- ``index.py``: capture directories and the index file (one JSON line per capture).
- ``render.py``: the one-line verdicts on stderr.
- ``loop.py``: the watching loop.
"""
