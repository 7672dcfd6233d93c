"""Container-side tools: everything run_inference.py needs inside the vendor container."""
