"""Base tier: GEMM FLOP/s per dtype over a size sweep (FlagPerf's computation-* cases).

No data set, model or engine: the pipeline runs baseline_stage (benchmarks/base_common.py).
"""

# The six case functions, none of which a base case uses (benchmarks/base_common.py's __all__).
from benchmarks.base_common import *  # noqa: F403
from benchmarks.base_common import gemm_stage as baseline_stage  # noqa: F401 - the hook the pipeline reads
