#!/usr/bin/env bash
# Issue 16's prefill criterion: whole-model prefill GFLOP/s as a fraction of the GEMM kernel's, on
# `synth --shape llama-1b` (BF16, and NVFP4 with the BF16 head kept), 512 tokens, 2 threads.
# `qforge bench --vs-gemm` runs every layer's Linear products alone (the same kernels, threads and
# weights: the GEMM benchmark on this model's shapes) right after each prefill, so both see the
# machine in the same second, and reports the median of those same-run ratios over REPEAT runs
# (default 9; the models in turns with --alternate). Both rates count the Linears' FLOPs (1.95 G a
# token); with the causal attention's at 512 tokens (1.98 G in all) the prefill's figure is 1.7%
# higher. Per round: with the per-token attention (QFORGE_NO_AMX_ATTENTION=1) and with the AMX
# prefill attention. ROUNDS rounds (default 1). Models in BENCH_DIR (default
# /tmp/qforge-decode-bench, shared with bench/decode_bench.sh), made when missing.
#   bench/prefill_bench.sh [build=build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
qforge=$build/qforge
work=${BENCH_DIR:-/tmp/qforge-decode-bench}
mkdir -p "$work"
[[ -f $work/llama-1b/model.safetensors ]] ||
  $qforge synth --shape llama-1b -o "$work/llama-1b" -q --force
[[ -f $work/llama-1b-nvfp4/model.safetensors ]] ||
  $qforge quantize "$work/llama-1b" -o "$work/llama-1b-nvfp4" --format nvfp4 -q --force
for ((round = 1; round <= ${ROUNDS:-1}; ++round)); do
  for attention in attend amx; do
    if [[ $attention == attend ]]; then export QFORGE_NO_AMX_ATTENTION=1; else unset QFORGE_NO_AMX_ATTENTION; fi
    $qforge bench "$work/llama-1b" "$work/llama-1b-nvfp4" --prompt 512 --gen 1 \
      --repeat "${REPEAT:-9}" -t 2 --alternate --vs-gemm --json 2>/dev/null | python3 -c "
import json, sys
for m in json.load(sys.stdin)['models']:
    print('round $round $attention', m['model'].split('/')[-1],
          'prefill GFLOP/s %.1f products GFLOP/s %.1f prefill/products %.3f (%.3f-%.3f)' % (
              m['prefill_linear_gflops'], m['products_gflops'], m['prefill_of_products'],
              m['prefill_of_products_min'], m['prefill_of_products_max']))"
  done
done
