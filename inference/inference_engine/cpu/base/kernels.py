"""The cpu vendor's base-tier kernels (contract/kernels.py::TorchKernels, docs/vendor_guide.md §14).

The cpu vendor's engine is ONNX Runtime, so its fp32 GEMM is ONNX Runtime's own: a one-node
``MatMul`` graph on the CPU execution provider (MLAS), run through an I/O binding with
preallocated output, at ONNX Runtime's default threads (one per physical core), as the
engine runs. B is a constant initializer, as a model's weights are: ONNX Runtime packs a
constant B once, when the session is created, where an input B is packed on every call, so
an input B's peak sits below what a model's convolutions reach. MLAS is also faster than
torch.mm at fp32, so a peak measured with torch.mm would sit below what the engine achieves
and every MFU would exceed 100 % (the figures: docs/vendor_guide.md §14, docs/baselines.md).
bf16 and fp16 GEMMs are PyTorch's (oneDNN): ONNX Runtime's CPU provider has no bf16 MatMul.
The vendor has no device memory apart from host RAM, so host<->device transfer is not
applicable.
"""

from __future__ import annotations

from contract.kernels import TorchKernels


class Kernels(TorchKernels):
    name = "onnxruntime MLAS (fp32), torch (bf16, fp16)"
    gemm_dtypes = ("fp32", "bf16", "fp16")  # no int8 GEMM here
    transfer_not_applicable = (
        "the cpu vendor has no device memory apart from host RAM: see base_stream for its bandwidth"
    )

    def gemm(self, dtype, m, n, k, device):
        if dtype != "fp32":
            return super().gemm(dtype, m, n, k, device)
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        generator = np.random.default_rng(0)
        weights = numpy_helper.from_array(generator.standard_normal((k, n), dtype=np.float32), "B")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["A", "B"], ["C"])],
            "gemm",
            [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
            [helper.make_tensor_value_info("C", TensorProto.FLOAT, [m, n])],
            initializer=[weights],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8  # readable by every ONNX Runtime this project supports
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        binding = session.io_binding()
        binding.bind_ortvalue_input(
            "A", ort.OrtValue.ortvalue_from_numpy(generator.standard_normal((m, k), dtype=np.float32))
        )
        binding.bind_ortvalue_output("C", ort.OrtValue.ortvalue_from_numpy(np.empty((m, n), dtype=np.float32)))
        return lambda: session.run_with_iobinding(binding)
