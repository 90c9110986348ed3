"""Pure command builders: a :class:`LaunchPlan` in, one :class:`Recipe` per launcher out.

Every argument of the user's script is a literal word (quoted with shlex.quote); every value that
must be read on the node itself (``$(hostname -s)``, ``$SLURM_PROCID``) is an expansion, delayed by
one more level of quoting wherever a command travels through ``bash -c``, srun, mpirun or pdsh.
tests/launch/test_quoting.py runs the generated text through bash and reads back the exact argv.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from rankscope.launch.plan import Command, Launcher, LaunchFile, LaunchPlan, LaunchReport, Prefix, Recipe
from rankscope.launch.words import Expand, Lit, Word, bash_c, lits, render, words

#: torchrun --tee labels every line ``[<role><local rank>]:``; with the role ``host:`` that is
#: ``[host:local_rank]:``. The template variable (read by torchrun of recent torch; older ones ignore
#: it and keep the local rank) puts the global rank there instead.
_TORCHRUN_TEMPLATE = Expand("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=" + shlex.quote("[${role_name}${rank}]:"))
_TORCHRUN_LABEL: list[Word] = [Lit("--tee"), Lit("3"), Lit("--role"), Expand('"$(hostname -s):"')]
#: torch.distributed's env:// rendezvous reads these; srun and mpirun name them differently.
_SLURM_RANK_ENV = (
    'export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID"'
    ' LOCAL_WORLD_SIZE="$SLURM_NTASKS_PER_NODE";'
)
_OMPI_RANK_ENV = (
    'export RANK="$OMPI_COMM_WORLD_RANK" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE"'
    ' LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE";'
)
_PLACEHOLDER_NOTE = "node1.. are placeholders: pass --hosts NODESET or --hostfile FILE for the real names"


def _script(plan: LaunchPlan) -> list[Word]:
    return lits((plan.script, *plan.args))


def _python_worker(plan: LaunchPlan) -> list[Word]:
    """The worker command of launchers that start python themselves (srun per GPU, mpirun)."""
    worker = [Lit(plan.python), *_script(plan)]
    if plan.prefix == Prefix.RANKSCOPE:
        return [*lits(("rankscope", "prefix", "--")), *worker]
    return worker


def _torchrun(plan: LaunchPlan, placement: Sequence[Word]) -> list[Word]:
    """``torchrun`` with the given rendezvous/placement flags, the label flags and the script."""
    command: list[Word] = [*lits(plan.torchrun), *placement]
    if plan.prefix == Prefix.NATIVE:
        command = [_TORCHRUN_TEMPLATE, *command, *_TORCHRUN_LABEL]
    if plan.prefix == Prefix.RANKSCOPE:
        command += lits(("--no-python", "rankscope", "prefix", "--", plan.python))
    return [*command, *_script(plan)]


def _hostfile(plan: LaunchPlan) -> LaunchFile:
    # Open MPI and DeepSpeed read the same form: one "host slots=N" line per node.
    return LaunchFile("hostfile", "".join(f"{host} slots={plan.gpus}\n" for host in plan.node_names))


def _notes(plan: LaunchPlan, *notes: str) -> tuple[str, ...]:
    return tuple(note for note in (*notes, "" if plan.hosts else _PLACEHOLDER_NOTE) if note)


def _label_note(plan: LaunchPlan, native: str) -> str:
    if plan.prefix == Prefix.RANKSCOPE:
        return "rankscope prefix: every line starts with [host:rank]"
    return native if plan.prefix == Prefix.NATIVE else "no line labels"


def torchrun(plan: LaunchPlan) -> Recipe:
    commands = []
    for node_rank, host in enumerate(plan.node_names):
        placement = lits(
            (
                "--nnodes",
                str(plan.nodes),
                "--nproc-per-node",
                str(plan.gpus),
                "--node-rank",
                str(node_rank),
                "--master-addr",
                plan.rendezvous_host,
                "--master-port",
                str(plan.port),
            )
        )
        commands.append(Command(f"{host} (node rank {node_rank})", render(_torchrun(plan, placement))))
    return Recipe(
        Launcher.TORCHRUN,
        tuple(commands),
        notes=_notes(plan, "start every command at about the same time: the rendezvous waits for all nodes"),
        prefix_note=_label_note(plan, "torchrun --tee 3 --role: every line starts with [host:rank]:"),
    )


def _sbatch_header(plan: LaunchPlan, tasks_per_node: int) -> list[str]:
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={plan.job_name}",
        f"#SBATCH --nodes={plan.nodes}",
        f"#SBATCH --ntasks-per-node={tasks_per_node}",
    ]
    if plan.slurm_gpus:
        lines.append(f"#SBATCH --gpus-per-node={plan.gpus}")
    if plan.watch:
        lines.append(f"#SBATCH --signal=B:USR1@{WATCH_WARNING}")
    lines += [
        "#SBATCH --output=%x-%j.out",
        "set -eu",
        *_watch_trap(plan),
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"export MASTER_PORT={plan.port}",
    ]
    if plan.workdir:
        lines.append(render([Lit("cd"), Lit(plan.workdir)]))
    return lines


def _watch_trap(plan: LaunchPlan) -> list[str]:
    """The batch shell's trap that passes SLURM's warning on to the watcher, set before anything else
    runs: SLURM may send the warning early (by up to a minute), and bash's default for SIGUSR1 would
    end the shell."""
    if not plan.watch:
        return []
    return ["watch_pid=", 'trap \'[ -n "$watch_pid" ] && kill -USR1 "$watch_pid"\' USR1']


#: Seconds before the time limit that SLURM warns the batch shell (SIGUSR1): the watcher captures then.
WATCH_WARNING = 120


def _step(plan: LaunchPlan, step: list[Word]) -> list[str]:
    """The job step's lines: the step itself, or (``plan.watch``) the step under `rankscope watch`, in
    the background so the batch shell's trap can pass SLURM's SIGUSR1 warning on to the watcher."""
    if not plan.watch:
        return [render(step)]
    watch = [
        *lits(("rankscope", "watch", "--inproc", "--jobid")),
        Expand('"$SLURM_JOB_ID"'),
        Lit("--out"),
        Expand('"rankscope-watch-$SLURM_JOB_ID"'),
        Lit("--"),
        *step,
    ]
    return [
        render(watch) + " &",
        "watch_pid=$!",
        'while :; do wait "$watch_pid" && rc=0 || rc=$?; kill -0 "$watch_pid" 2>/dev/null || exit "$rc"; done',
    ]


def _watch_note(plan: LaunchPlan) -> tuple[str, ...]:
    if not plan.watch:
        return ()
    return (
        f"under rankscope watch (rankscope on the first node's PATH): a stall, a straggler or a dead rank is "
        f"captured into rankscope-watch-<jobid>/, and so is the job {WATCH_WARNING} s before its time limit "
        "(#SBATCH --signal=B:USR1); every rank's stacks at SLURM's SIGTERM are kept (RANKSCOPE_INPROC=1)",
    )


def sbatch(plan: LaunchPlan) -> Recipe:
    """One srun task per node, each running torchrun for that node's GPUs."""
    placement: list[Word] = [
        Lit("--nnodes"),
        Expand('"$SLURM_NNODES"'),
        Lit("--nproc-per-node"),
        Lit(str(plan.gpus)),
        Lit("--node-rank"),
        Expand('"$SLURM_PROCID"'),
        Lit("--master-addr"),
        Expand('"$MASTER_ADDR"'),
        Lit("--master-port"),
        Expand('"$MASTER_PORT"'),
    ]
    step = [Lit("srun"), *bash_c(_torchrun(plan, placement))]
    script = "\n".join([*_sbatch_header(plan, 1), *_step(plan, step)]) + "\n"
    return Recipe(
        Launcher.SBATCH,
        (Command("the login node", "sbatch job.sbatch"),),
        (LaunchFile("job.sbatch", script),),
        notes=("the node list comes from SLURM; --hosts is not needed", *_watch_note(plan)),
        prefix_note=_label_note(plan, "torchrun --tee 3 --role: every line starts with [host:rank]:"),
    )


def srun_per_gpu(plan: LaunchPlan) -> Recipe:
    """One srun task per GPU, ranks from SLURM's variables (no torchrun)."""
    worker = [Expand(_SLURM_RANK_ENV), Lit("exec"), *_python_worker(plan)]
    srun = [Lit("srun")] + ([Lit("--label")] if plan.prefix == Prefix.NATIVE else [])
    step = [*srun, *bash_c(worker)]
    script = "\n".join([*_sbatch_header(plan, plan.gpus), *_step(plan, step)]) + "\n"
    return Recipe(
        Launcher.SRUN,
        (Command("the login node", "sbatch job-per-gpu.sbatch"),),
        (LaunchFile("job-per-gpu.sbatch", script),),
        notes=(
            "each task gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: "
            "init_process_group('nccl') reads them (env://); pick the device with LOCAL_RANK",
            *_watch_note(plan),
        ),
        prefix_note=_label_note(plan, "srun --label: every line starts with 'RANK: '"),
    )


def pdsh(plan: LaunchPlan) -> Recipe:
    """torchrun on every node over pdsh; the c10d rendezvous hands out node ranks, so one command serves all."""
    placement = lits(
        (
            "--nnodes",
            str(plan.nodes),
            "--nproc-per-node",
            str(plan.gpus),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{plan.rendezvous_host}:{plan.port}",
            "--rdzv-id",
            plan.job_name,
        )
    )
    remote = _torchrun(plan, placement)
    if plan.workdir:
        remote = [Lit("cd"), Lit(plan.workdir), Expand("&&"), *remote]
    # pdsh hands its last argument to the node's login shell as one string: quote it once for the
    # local shell, and the node's shell expands $(hostname -s). -f: pdsh starts 32 nodes at a time by
    # default, and a rendezvous that waits for all nodes would wait forever for the 33rd.
    command = [
        Expand("PDSH_RCMD_TYPE=ssh"),
        *lits(("pdsh", "-f", str(max(plan.nodes, 1)), "-w", ",".join(plan.node_names))),
        Lit(render(remote)),
    ]
    return Recipe(
        Launcher.PDSH,
        (Command("any node with ssh access to all", render(command)),),
        notes=_notes(plan),
        prefix_note=_label_note(plan, "pdsh puts 'host: ' first, torchrun --role adds [host:rank]:"),
    )


def mpirun(plan: LaunchPlan) -> Recipe:
    worker = [Expand(_OMPI_RANK_ENV), Lit("exec"), *_python_worker(plan)]
    command: list[Word] = [
        *lits(("mpirun", "-np", str(plan.world_size), "--hostfile", "hostfile")),
        *lits(("--map-by", f"ppr:{plan.gpus}:node")),
    ]
    if plan.prefix == Prefix.NATIVE:
        command.append(Lit("--tag-output"))
    command += words("-x", f"MASTER_ADDR={plan.rendezvous_host}", "-x", f"MASTER_PORT={plan.port}")
    command += bash_c(worker)
    return Recipe(
        Launcher.MPIRUN,
        (Command("the first node", render(command)),),
        (_hostfile(plan),),
        notes=_notes(
            plan,
            "Open MPI; as root add --allow-run-as-root; the worker gets RANK, WORLD_SIZE, LOCAL_RANK from OMPI_COMM_WORLD_*",
        ),
        prefix_note=_label_note(
            plan,
            "mpirun --tag-output: [jobid,RANK]<stdout>: before every write (a line written in pieces, "
            "as print() does under PYTHONUNBUFFERED=1, is cut; --prefix rankscope labels whole lines)",
        ),
    )


def deepspeed(plan: LaunchPlan) -> Recipe:
    command = lits(
        (
            "deepspeed",
            "--hostfile",
            "hostfile",
            "--num_nodes",
            str(plan.nodes),
            "--num_gpus",
            str(plan.gpus),
            "--master_addr",
            plan.rendezvous_host,
            "--master_port",
            str(plan.port),
        )
    )
    return Recipe(
        Launcher.DEEPSPEED,
        (Command("the first node", render([*command, *_script(plan)])),),
        (_hostfile(plan),),
        notes=_notes(
            plan,
            "deepspeed starts the nodes over pdsh and passes --local_rank=N to the script",
        ),
        prefix_note="deepspeed (pdsh) puts 'host: ' in front of every line",
    )


BUILDERS = {
    Launcher.TORCHRUN: torchrun,
    Launcher.SBATCH: sbatch,
    Launcher.SRUN: srun_per_gpu,
    Launcher.PDSH: pdsh,
    Launcher.MPIRUN: mpirun,
    Launcher.DEEPSPEED: deepspeed,
}


def build(plan: LaunchPlan, launchers: Sequence[Launcher]) -> LaunchReport:
    return LaunchReport(plan, tuple(BUILDERS[launcher](plan) for launcher in launchers))
