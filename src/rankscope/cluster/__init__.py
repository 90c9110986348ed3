"""Fan-out to many nodes over srun, pdsh or ssh; node sets, hostfiles and SLURM jobs."""

#: The engines that reach the nodes (here, not in transports.py: the CLI needs the names at start-up).
TRANSPORTS = ("srun", "pdsh", "ssh")
