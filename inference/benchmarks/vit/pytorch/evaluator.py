from benchmarks.common import top1_accuracy as evaluator

__all__ = ["evaluator"]
