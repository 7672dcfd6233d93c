"""Executors: one module per way of reaching a host (local, Docker over SSH or the local engine, Slurm, Slurm+Docker),
with the transports beside them; ``base.py`` holds the case lifecycle they share."""
