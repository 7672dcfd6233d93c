"""Host-side tools: everything run.py needs outside the container."""
