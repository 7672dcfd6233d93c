"""What the container writes: the result record and the compile report."""
