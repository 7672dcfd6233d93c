"""ByteMLPerf's ``general_perf`` package name, so that its vendors' backends import as written.

A ByteMLPerf backend begins with ``from general_perf.backends import
compile_backend, runtime_backend``; this package answers that import with
InferPerf's own base classes of the same shape (``general_perf/backends/``).
Nothing else of ByteMLPerf lives here: the folder layout, the interact profile,
workloads and reports are handled by ``tools/compat/bytemlperf/`` and
``utils/bytemlperf_workload.py`` (docs/bytemlperf_migration.md).
"""
