#!/usr/bin/env bash
# Prepare the data sets of the default host.yaml under data/ (idempotent):
#   data/digits               scikit-learn's handwritten digits, split 80/20 (real accuracy)
#   data/imagenet_synthetic   a small ImageNet-layout folder of random JPEGs (performance only;
#                             used by resnet50 and vit)
#   data/bert                 the bert case's 48 sentence triples (real accuracy)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
cd "$root/inference"
# The two sets are made side by side (each is mostly its interpreter's imports); either failing fails this.
pids=()
if [ ! -f "$root/data/digits/digits.npz" ]; then
  "$python" -m benchmarks.digits.pytorch.prepare "$root/data/digits" &
  pids+=($!)
fi
if [ ! -d "$root/data/imagenet_synthetic" ]; then
  "$python" -m benchmarks.resnet50.pytorch.synthetic "$root/data/imagenet_synthetic" --classes 4 --per-class 8 &
  pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid"; done
# A copy of the set the case ships: always refreshed, so an edited set is never stale.
mkdir -p "$root/data/bert"
cp "$root/inference/benchmarks/bert/pytorch/sentence_triples.tsv" "$root/data/bert/"
echo "data ready under $root/data"
