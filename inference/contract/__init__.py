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
  kernels.py       ``TorchKernels``, the base-tier kernels a vendor subclasses; a call's work
                   (``gemm_flop``, ``stream_bytes``, ...), ``KernelSettings``, ``KernelRate``
  cases.py         the case API (``CaseModule``, ``CaseHooks``) and the case loader
  measuring.py     what a case calls while it measures (``Measuring``: ``timed_forward``, the base
                   tier's and the LLM stages), installed by the container side, got by ``measuring()``
  phase.py         a measured phase's record (``PhaseResult``, ``Verdict``, ``ContentionReading``)
  llm_workload.py  an LLM case's workload keys (``LLMWorkload``) and seeded prompts (``PromptSource``)
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
    # the floor, and the bases every case builds on and other cases' helpers; the framework's
    # measuring functions a case's hook runs come through contract/measuring.py, not from tools/
    "case": ("common", "contract", "benchmarks"),
}
