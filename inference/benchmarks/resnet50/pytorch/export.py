from benchmarks.common import export_onnx, param


def export_model(model, config) -> str:
    crop = int(param(config, "crop"))
    return export_onnx(model, config, sample_shape=(3, crop, crop))
