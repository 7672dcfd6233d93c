"""The results history (docs/history.md): every run's figures across time, per series; this host's
between-run noise learned from it; change points; ``run.py history`` and ``run.py calibrate``."""
