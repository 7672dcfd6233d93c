"""The measurement core: the timing loop, the scenarios, the verdict rules, CPU/GPU contention and
the performance stage that runs them."""
