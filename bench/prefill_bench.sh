#!/usr/bin/env bash
# Issue 16's prefill criterion: whole-model prefill GFLOP/s as a fraction of the GEMM kernel's, on
# `synth --shape llama-1b` (BF16, and NVFP4 with the BF16 head kept), 512 tokens, 2 threads. Per
# round, alternating so a busy machine slows all alike: the one-layer GEMM benchmark
# (KernelMatMulLayerLlama1b{Bf16,Nvfp4,Nvfp4Rows16}/2; Rows16 is the layout the engine runs NVFP4
# in on AVX-512 VNNI + VBMI CPUs, skipped elsewhere), then `qforge bench` with the per-token attention
# (QFORGE_NO_AMX_ATTENTION=1) and with the AMX prefill attention. Prefill FLOPs per token: 1.98 G
# (the layers' Linears and the causal attention at 512 tokens; the last token's head is not
# counted). Prints one line per figure; ROUNDS rounds (default 3). Models in BENCH_DIR (default
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
for ((round = 1; round <= ${ROUNDS:-3}; ++round)); do
  $build/qforge_bench --benchmark_filter='KernelMatMulLayerLlama1b(Bf16|Nvfp4|Nvfp4Rows16)/2' \
    --benchmark_min_time=1 2>/dev/null |
    grep -o 'KernelMatMulLayerLlama1b[A-Za-z0-9]*/2.*GFLOP/s=[0-9.]*' | sed "s/^/round $round gemm /"
  for attention in attend amx; do
    if [[ $attention == attend ]]; then export QFORGE_NO_AMX_ATTENTION=1; else unset QFORGE_NO_AMX_ATTENTION; fi
    $qforge bench "$work/llama-1b" "$work/llama-1b-nvfp4" --prompt 512 --gen 1 --repeat 3 -t 2 \
      --json 2>/dev/null | python3 -c "
import json, sys
for m in json.load(sys.stdin)['models']:
    print('round $round $attention', m['model'].split('/')[-1], 'prefill_tok_s',
          round(m['prefill_tok_s'], 1), 'GFLOP/s', round(m['prefill_tok_s'] * 1.98, 1))"
  done
done
