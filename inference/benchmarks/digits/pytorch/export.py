from benchmarks.common import export_onnx


def export_model(model, config) -> str:
    return export_onnx(model, config, sample_shape=(1, 8, 8))
