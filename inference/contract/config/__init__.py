"""The case configuration: FlagPerf's three-file merge (spec §3.2.1) into one typed object.

Sources, lowest precedence first:
  configs/<case>/configurations.yaml                   the benchmark settings
  configs/<case>/parameters.yaml                       case parameters, hardware-independent
  configs/<case>/vendor_config/<vendor>_configurations.yaml   vendor overrides
plus the command-line keys of run_inference.py. Rules:
  - a key in both configurations and parameters is an error;
  - a vendor key may not touch parameters, host.yaml or command-line keys;
  - a vendor key new to configurations logs a warning, one that changes a
    value logs info, and one that repeats the base value is an error.

The package: ``values`` (the keys' checks and bounds), ``case`` (``CaseConfig``, its defaults, ``setting`` and
``origin_of``), ``view``
(``CaseView``, what a case or engine may read), ``load`` (the merge and ``--set``),
``expr`` (number expressions). Its public names are importable from ``contract.config``.
"""

from common.scenario import SCENARIOS
from common.values import cpu_count
from contract.config.case import (
    CASE_DEFAULTS,
    CaseConfig,
    check_choice,
    check_flag,
    has_dynamic_axis,
    origin_of,
    query_samples,
    setting,
)
from contract.config.load import (
    OVERRIDE_ORIGIN,
    case_config_paths,
    load_case_config,
    merge_case_config,
    parse_overrides,
)
from contract.config.values import CLI_KEYS, REQUIRED_KEYS, check_device_available, check_extra
from contract.config.view import CaseView
from contract.settings import MEASUREMENT_DEFAULTS

__all__ = [
    "CASE_DEFAULTS",
    "CLI_KEYS",
    "MEASUREMENT_DEFAULTS",
    "OVERRIDE_ORIGIN",
    "REQUIRED_KEYS",
    "SCENARIOS",
    "CaseConfig",
    "CaseView",
    "case_config_paths",
    "check_choice",
    "check_device_available",
    "check_flag",
    "has_dynamic_axis",
    "check_extra",
    "cpu_count",
    "load_case_config",
    "merge_case_config",
    "origin_of",
    "query_samples",
    "parse_overrides",
    "setting",
]
