"""Running a job: the dry-run, training with checkpoints and resume, the run folder, its budget, memory and
cluster plans, and the summary table."""
