#!/usr/bin/env bash
# Prepare the data sets of the default host.yaml under data/ (idempotent):
#   data/digits               scikit-learn's handwritten digits, split 80/20 (real accuracy)
#   data/imagenet_synthetic   a small ImageNet-layout folder of random JPEGs (performance only)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
cd "$root/inference"
if [ ! -f "$root/data/digits/digits.npz" ]; then
  "$python" -m benchmarks.digits.pytorch.prepare "$root/data/digits"
fi
if [ ! -d "$root/data/imagenet_synthetic" ]; then
  "$python" -m benchmarks.resnet50.pytorch.synthetic "$root/data/imagenet_synthetic" --classes 4 --per-class 8
fi
echo "data ready under $root/data"
