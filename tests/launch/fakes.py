"""Stand-in launchers that do what the real ones do with their argv, then record the worker's argv.

The quoting tests run the generated commands through a real bash. Each stand-in treats its argv the
way the real launcher does (srun and mpirun exec the command after their options, pdsh hands its
last argument to a shell as ssh does, sbatch runs the script); the worker (torchrun, python3,
deepspeed) writes its argv, NUL-separated, to $ARGV_OUT.
"""

from __future__ import annotations

import os
from pathlib import Path

RECORD = '#!/bin/bash\nprintf "%s\\0" "$@" > "$ARGV_OUT"\nprintf "%s" "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" > "$ARGV_OUT.template"\n'
FAKES = {
    "torchrun": RECORD,
    "python3": RECORD,
    "deepspeed": RECORD,
    "srun": '#!/bin/bash\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n',
    "mpirun": '#!/bin/bash\nwhile [ "$1" != bash ]; do shift; done\nexec "$@"\n',
    "pdsh": '#!/bin/bash\nfor last; do :; done\nexec bash -c "$last"\n',
    "sbatch": '#!/bin/bash\nexec bash "$1"\n',
    "scontrol": "#!/bin/bash\necho node1\n",
    # `rankscope prefix -- CMD`: leaves a mark, then runs CMD.
    "rankscope": '#!/bin/bash\ntouch "$ARGV_OUT.prefixed"\nwhile [ "$1" != -- ]; do shift; done\nshift\nexec "$@"\n',
}
#: What srun would have set on the node that runs the step.
SLURM_ENV = {
    "SLURM_PROCID": "0",
    "SLURM_NNODES": "1",
    "SLURM_NTASKS": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_JOB_NODELIST": "node1",
}


def install_fakes(directory: Path) -> dict[str, str]:
    """Write the stand-ins into ``directory``; the environment that puts them first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in FAKES.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)
    env = dict(os.environ, **SLURM_ENV)
    env["PATH"] = f"{directory}:{env['PATH']}"
    return env


def read_argv(path: Path) -> list[str]:
    data = path.read_bytes()
    assert data.endswith(b"\0"), data
    return [part.decode() for part in data[:-1].split(b"\0")]
