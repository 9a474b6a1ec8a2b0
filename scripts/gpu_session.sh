#!/usr/bin/env bash
# One GPU session on a machine that has torch, cuda-bindings and NVRTC: compile every native variant into a fresh
# cache, run the GPU tests (native and 64-lane emulation, in parallel processes on the one GPU), then optional
# benchmarks. Logs go to $OUT (default ./gpu-out); the last lines printed are a short summary.
#   scripts/gpu_session.sh [pytest selection...]      e.g. tests/kernels/test_backward.py -k "not emulating"
# Environment: BENCH (a command line for `python3 -m portattn bench`, empty: no benchmark), WORKERS (pytest
# processes, default 8).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PORTATTN_CACHE_DIR=${PORTATTN_CACHE_DIR:-/tmp/portattn-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/device.txt"
start=$(date +%s)
python3 -m portattn warmup > "$OUT/warmup.log" 2>&1 || { tail -20 "$OUT/warmup.log"; exit 1; }
echo "warmup: $(( $(date +%s) - start )) s, $(grep -c '^\[' "$OUT/warmup.log") variants"
status=0
if [ $# -gt 0 ]; then
    start=$(date +%s)
    python3 -m pytest -q -rfE -n "${WORKERS:-8}" -m gpu "$@" > "$OUT/tests.log" 2>&1 || status=1
    echo "tests: $(( $(date +%s) - start )) s"
    grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -40
    tail -1 "$OUT/tests.log"
fi
if [ -n "${BENCH:-}" ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    python3 -m portattn bench $BENCH --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1 || status=1
    echo "bench: $(( $(date +%s) - start )) s"
    grep -E "^\| " "$OUT/bench.log" | tail -40
fi
exit $status
