"""The measurement core: the timing loop, the scenarios, the verdict rules, CPU/GPU contention and
the performance stage that runs them.

Importing it installs the measuring functions a case's hook calls (``contract/measuring.py``,
implemented by ``tools/measure/services.py``): the pipeline imports this package before it loads
a case, so every case run by the framework finds them."""

from contract.measuring import install
from tools.measure.services import ToolsMeasuring

install(ToolsMeasuring())
