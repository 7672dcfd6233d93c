"""What steps 4 and 5 build: the ONNX export (``onnx_export``) and the vendor engine (``engine``),
each reused from the cache when its key matches (contract/cache.py)."""
