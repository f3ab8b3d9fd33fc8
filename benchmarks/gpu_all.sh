#!/usr/bin/env bash
# Every GPU benchmark of the serving engine in one run, results as JSON under benchmarks/out/gpu/.
#
#     bash benchmarks/gpu_all.sh            # from the repository root, with the project's Python on PATH
#
# Each step exits cleanly (with a message) when CUDA, triton or gemlite is missing, so a partial environment
# still runs the rest. Steps:
#   1. serving_gpu.py        decode tokens/s, BF16 vs FP8 pages, Triton kernel vs the PyTorch path, capacity,
#                            MLA latent decode attention at DeepSeek-V3 sizes
#   2. quant_gpu.py          HQQ int8 / int4 / split-precision weights through Gemlite
#   3. integrity_overhead.py the data-path KV integrity check as a share of decode step time, 16/64/128 x 4k
#   4. the Triton decode-kernel tests compiled for the GPU (sliding window, FP8 per-token scales, MLA latent pages)
#   5. the Triton fused quantized-experts kernel on CUDA tensors: equal to the reference loop, no device sync
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:-$PWD}"
PY="${PYTHON:-python}"
OUT=benchmarks/out/gpu
mkdir -p "$OUT"
status=0
run() {
    echo "== $*"
    "$@" || { echo "!! failed: $*"; status=1; }
}
run "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
run "$PY" benchmarks/serving_gpu.py --context 2048 --new-tokens 128 --kv-budget-gib 2 --json "$OUT/serving_gpu.json"
run "$PY" benchmarks/quant_gpu.py --json "$OUT/quant_gpu.json"
run "$PY" benchmarks/integrity_overhead.py --device cuda --requests 16 64 128 --context 4096 --steps 5 \
    --json "$OUT/integrity_overhead.json"
run "$PY" -m pytest -q -p no:cacheprovider tests/serving/test_triton_decode.py -k "compiles or engine"
run "$PY" -m pytest -q -p no:cacheprovider tests/serving/test_grouped_experts.py -k cuda
exit $status
