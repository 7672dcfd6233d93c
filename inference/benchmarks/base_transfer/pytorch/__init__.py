"""Base tier: host<->device transfer bandwidth, pinned and pageable (not applicable on cpu).

No data set, model or engine: the pipeline runs baseline_stage (benchmarks/base_common.py).
"""

# The six case functions, none of which a base case uses (benchmarks/base_common.py's __all__).
from benchmarks.base_common import *  # noqa: F403
from benchmarks.base_common import transfer_stage as baseline_stage  # noqa: F401 - the hook the pipeline reads
