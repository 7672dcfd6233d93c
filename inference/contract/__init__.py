"""The contract floor: everything a vendor's engine or a case imports of the framework.

The house, lowest floor first (docs/architecture.md "The house"): ``common/`` (shared helpers),
``contract/`` (this package), the framework's two sides ``tools/`` (container) and ``utils/``
(host), and the plug-ins in FlagPerf's folders, ``inference_engine/<vendor>/`` and
``benchmarks/<case>/``. An import goes down the house or stays in its room, never up; the
framework reaches a plug-in only through a load by name that a declared table formats
(``DYNAMIC_IMPORTS``, followed by the import-circle test).

What lives here, and why here: it is what both a plug-in and the framework read, so it must sit
below both.
  engine_base.py   ``EngineBase``, the engine API (``OptionalMethod``, ``implements``)
  llm_base.py      ``LLMEngineBase``, ``ServingEngineBase``: the LLM engine API
  serving_base.py  a served LLM's server plumbing and vLLM's engine, shared by vendors
  registry.py      which vendors and compilers exist, by file layout; loads an engine module
                   and a vendor's base-tier kernels
  kernels.py       ``TorchKernels``, the base-tier kernels a vendor subclasses
  cases.py         the case API (``CaseModule``, ``CaseHooks``) and the case loader
  config/          the case config (``CaseConfig``, ``CaseView``, ``origin_of``, the merge)
  settings.py      the measurement defaults (``MEASUREMENT_DEFAULTS``)
  tolerances.py    the numeric check's limits per precision
  cache.py, folder_cache.py   content-keyed file and folder caches (a case caches its weights)

It imports only ``common/`` and itself (tests/test_lifecycle_units.py::test_layering).
"""

# What a plug-in file may import of the code under inference/ (anything outside it, the standard
# library and installed packages, is free). A module is allowed when it is one of these or inside
# one; besides these, a plug-in imports its own folder (an engine ``inference_engine/<vendor>/``, a
# case ``benchmarks/<case>/``). tests/test_lifecycle_units.py holds every plug-in file to it.
PLUGIN_IMPORTS: dict[str, tuple[str, ...]] = {
    # the floor, and ByteMLPerf's base class names for its backend folders
    "engine": ("common", "contract", "general_perf"),
    "case": (
        "common",
        "contract",
        # the bases every case builds on, and other cases' helpers
        "benchmarks",
        # The framework's measuring stages, which a case's hook runs in place of the default
        # (a base-tier or LLM case's own stage): still in tools/, the rest of the case's imports
        # are the floor.
        "tools.measure.loop",
        "tools.measure.baseline",
        "tools.measure.llm_stage",
        "tools.measure.serving_stage",
        "tools.results.result",
    ),
}
