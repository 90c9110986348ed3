"""Fan-out to many nodes over srun, pdsh or ssh; node sets, hostfiles and SLURM jobs."""
