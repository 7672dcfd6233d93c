"""Names in inference/'s folder layout that both sides read, defined once.

- A CASES framework such as ``pytorch_2.1`` names the image folder
  ``docker_images/<vendor>/pytorch_2.1/``; the case's code lives in
  ``benchmarks/<case>/pytorch/`` (``framework_dir``).
- A vendor is its folder ``inference_engine/<vendor>/`` (and, for containers,
  ``docker_images/<vendor>/``); ``unknown_vendor`` is the one message for a vendor
  without it.
"""

from __future__ import annotations

from collections.abc import Iterable


def framework_dir(framework: str) -> str:
    """``pytorch_2.1`` -> ``pytorch``: the ``benchmarks/<case>/`` folder of a CASES framework name."""
    return framework.split("_", 1)[0]


def unknown_vendor(vendor: str, folder: str = "inference_engine", known: Iterable[str] | None = None) -> str:
    """The message for a vendor without ``<folder>/<vendor>/``, listing the ``known`` ones when given."""
    message = f"unknown vendor '{vendor}': no {folder}/{vendor}/"
    if known is not None:
        message += f" (known: {', '.join(known) or 'none'})"
    return message


# The base tier (benchmarks/base_common.py): cases that measure the chip itself, named base_<what>;
# ``run.py --cases base`` runs them alone.
BASE_PREFIX = "base_"


def is_base_case(case: str) -> bool:
    return case.startswith(BASE_PREFIX)


# What every started process learns of the run's hosts (utils/executors/base.py::child_env), for a
# case that spans them (benchmarks/base_common.py's all-reduce): the hosts' addresses in HOSTS
# order, comma-separated; this host's index there; the run id.
HOSTS_ENV = "INFERPERF_HOSTS"
NODERANK_ENV = "INFERPERF_NODERANK"
RUN_ID_ENV = "INFERPERF_RUN_ID"
