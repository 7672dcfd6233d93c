"""Vendor compilers and runtimes: inference_engine/<vendor>/<compiler>.py defines InferModel."""
