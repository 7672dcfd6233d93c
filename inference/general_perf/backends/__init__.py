"""The base classes a ByteMLPerf backend derives from: ``compile_backend.CompileBackend``
and ``runtime_backend.RuntimeBackend`` (docs/bytemlperf_migration.md)."""
