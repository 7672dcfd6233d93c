"""ByteMLPerf's conventions, accepted next to InferPerf's own (docs/bytemlperf_migration.md).

  backend.py   a backend folder (compile_backend_xxx.py, runtime_backend_xxx.py, XXX.json,
               requirements.txt) under inference_engine/<vendor>/, and importing it
  profile.py   its interact profile, answered from the case config (no dialogs)
  configs.py   ByteMLPerf's ``configs`` and data set, built from InferPerf's
  engine.py    the backend as an InferPerf engine (InferModel, preflight)
  hooks.py     what the pipeline asks of these: data_percent, batch_sizes: best,
               the backend's own benchmark()
  report.py    bytemlperf.json, ByteMLPerf's report shape, written by every case

The host side's part (workload files) is utils/bytemlperf_workload.py.
"""
