"""A torchrun worker that never imports torch: it marks itself ready as hang_job.py does, then sleeps.

For a test about a job's processes rather than its collectives (a worker that exits while it is being
dumped: tests/stacks/test_real_jobs.py): torchrun still starts and watches it, and rankscope finds it by
its rank variables, without the two seconds of CPU an ``import torch`` costs each rank.
"""

import os
import time
from pathlib import Path

Path(os.environ["RANKSCOPE_READY_DIR"], f"ready.{os.environ['RANK']}").touch()
time.sleep(3600)
